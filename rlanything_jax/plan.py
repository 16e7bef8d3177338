"""What a config needs per device, before a pod is paid for:
`python -m rlanything_jax.plan --config=configs/<file>.py[:variant] --devices=N [--device_memory_gib=G]`.

It builds the policy's and the reward model's parameters as shapes only (`nnx.eval_shape`: no weights are
read or allocated; the architecture comes from the model directory's config.json, or from the released
shapes of the models the paper configs name, `core/models/released_configs.py`), makes N fake CPU devices with
the config's mesh and sharding rules, and lowers and compiles the run's own programs at the config's
shapes: each train step (micro-batch rows x (max_prompt_tokens + max_response_tokens)), and each
sampler's prefill and decode (the rollout's rows and cache, the judge's calls), plus the vision tower
for a Qwen3-VL. For each it prints the per-device bytes of `compiled.memory_analysis()` and the FLOPs of
`compiled.cost_analysis()`, then an analytic breakdown (`system/planning/estimate.py`), whether the run fits G GiB
per device, and which settings would make it fit.

Assumptions, stated in the output too:
- Buffer sizes come from XLA's CPU compiler. A TPU or GPU compile assigns buffers differently (its own
  fusions, layouts, scheduling and collectives; XLA:CPU may keep bfloat16 work in float32): the figures
  are close to, not equal to, an accelerator's. The analytic breakdown is the model-level estimate.
- XLA:CPU's scheduler is not memory-aware: in unrolled layers it hoists a checkpointed layer's recomputation,
  so their compiled temporaries barely change with train.*.remat (a 4-layer test model: 114 MB none, 107 MB
  full). Scanned layers (`model.<role>.scan_layers`) keep the policy: 141 MB none, 70 MB dots, 40 MB full.
  The analytic activations follow the remat policy either way.
- With --layers=K (the default, 2) each program is compiled with K and 2K unrolled decoder layers and every
  figure extrapolated linearly to the model's depth (unrolled layers' buffers add up by layer); --layers=0
  compiles the full depth. A model with `model.<role>.scan_layers` (the paper configs) is also compiled as
  its run compiles it, scanned at its full depth, and its memory figures are that program's (its FLOPs the
  extrapolation's: a loop's body counts once). A Qwen3-VL keeps its whole vision tower.
- Train steps are compiled with --micro_batches (2) micro-batches: the Learner's scan with a gradient
  accumulator, as any update of more rows than micro_batch_size runs.
- The colocated placement: both models' train states (and the environment model's parameters when the
  curriculum uses it) stay resident; the samplers share their learner's parameters.
- FLOPs of a while loop count its body once: decode's are one token step per window bucket.
Bad input ends with one line naming it and exit status 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Sequence

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import DEFAULT_CONFIG, load_config

USAGE = """usage: python -m rlanything_jax.plan --config=FILE.py[:VARIANT] --devices=N [--device_memory_gib=G]
         [--config.KEY=VALUE ...] [--layers=K] [--micro_batches=M] [--analytic_only] [--json]

  --devices=N            fake CPU devices the config's mesh is laid over (the accelerators of the run)
  --device_memory_gib=G  memory of one device (default 16, a TPU v5e's)
  --layers=K             compile K and 2K decoder layers and extrapolate (default 2; 0: the full depth)
  --micro_batches=M      micro-batches per compiled train step (default 2)
  --analytic_only        skip compiling: the analytic breakdown and verdict only
  --json                 end with one JSON line of the figures
"""
ASSUMPTIONS = ("per-device bytes from XLA:CPU compiles on fake devices: close to, not equal to, TPU/GPU buffer "
               "sizes; analytic figures are model-level estimates (flash-style attention unless attention_impl=xla, "
               "Adam moments in float32 beside a float32 master copy of low-precision parameters (master_copy), "
               "else in the parameters' dtype, samplers sharing their learner's parameters); XLA:CPU's compiled "
               "temporaries of unrolled layers ignore remat (its scheduler hoists recomputation), scanned "
               "layers' follow it, as the analytic activations do")


@dataclasses.dataclass(frozen=True)
class Args:
    spec: str = DEFAULT_CONFIG
    overrides: tuple[str, ...] = ()
    devices: int = 0
    device_memory_gib: float = 16.0
    layers: int = 2
    micro_batches: int = 2
    analytic_only: bool = False
    json: bool = False


def parse_args(argv: Sequence[str]) -> Args:
    """The command line as Args; ValueError (one line) on anything else."""
    values: dict = {"overrides": []}
    numbers = {"--devices": int, "--device_memory_gib": float, "--layers": int, "--micro_batches": int}
    for arg in argv:
        if arg in ("-h", "--help"):
            raise SystemExit(print(USAGE) or 0)
        name, _, value = arg.partition("=")
        if name == "--config":
            values["spec"] = value
        elif arg.startswith("--config."):
            values["overrides"].append(arg[len("--config."):])
        elif name in numbers:
            try:
                values[name[2:]] = numbers[name](value)
            except ValueError:
                raise ValueError(f"{name} needs a number, got {value!r}") from None
        elif arg in ("--analytic_only", "--json"):
            values[arg[2:]] = True
        else:
            raise ValueError(f"unknown argument {arg!r} (see --help)")
    args = Args(**dict(values, overrides=tuple(values["overrides"])))
    if args.devices < 1:
        raise ValueError("--devices=N (a positive number of devices) is required")
    if args.device_memory_gib <= 0 or args.micro_batches < 1 or args.layers < 0:
        raise ValueError("--device_memory_gib must be > 0, --micro_batches >= 1 and --layers >= 0")
    return args


def use_cpu_devices(count: int, argv: Sequence[str]) -> None:
    """Makes JAX start with `count` CPU devices: sets the flags before its backend starts, or runs this
    command again in a fresh process when a backend with another device count already runs."""
    from jax._src import xla_bridge

    flag = f"--xla_force_host_platform_device_count={count}"
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    if xla_bridge.backends_are_initialized():
        import jax

        if jax.default_backend() == "cpu" and jax.device_count() == count:
            return
        env = dict(os.environ, XLA_FLAGS=f"{flags} {flag}".strip(), JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "rlanything_jax.plan", *argv], env)
    # TF_CPP_MIN_LOG_LEVEL: XLA's C++ warnings (e.g. the SPMD partitioner's resharding notes) stay out of the report.
    os.environ.update(XLA_FLAGS=f"{flags} {flag}".strip(), JAX_PLATFORMS="cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def architectures(cfg, roles: Sequence[str]) -> dict:
    """Each role's Architecture (no JAX backend needed); ValueError (one line) for an unknown model."""
    from rlanything_jax.system.planning.architectures import role_architecture

    return {role: role_architecture(getattr(cfg.model, role).path, cfg.model.scratch,
                                    getattr(cfg.model, role).scan_layers) for role in roles}


def _models(cfg, roles: Sequence[str], archs: dict | None = None) -> dict:
    """Each role's architecture with its abstract parameters (`nnx.eval_shape`)."""
    from rlanything_jax.system.planning.architectures import abstract_model
    from rlanything_jax.system.planning.estimate import Model

    archs = archs or architectures(cfg, roles)
    return {role: Model(archs[role], abstract_model(archs[role], getattr(cfg.model, role).dtype,
                                                    getattr(cfg.model, role).compute_dtype)[1]) for role in roles}


def compile_programs(cfg, models: dict, devices: int, layers: int, micro_batches: int, log) -> list:
    """Every program of the run at its shapes, compiled on the fake devices (see the module docstring)."""
    from rlanything_jax.core import sharding
    from rlanything_jax.system.planning import programs
    from rlanything_jax.system.planning.workload import workload

    mesh = sharding.build_mesh(dict(cfg.mesh.shape))
    load = workload(cfg, {role: models[role].arch.vision for role in ("policy", "reward")}, micro_batches)
    out = []
    for role in ("policy", "reward"):
        arch = models[role].arch
        depths = programs.layer_counts(arch, layers)
        lowered = [(f"{role} train step", programs.lower_train_step(cfg, role, load.train[role], mesh)),
                   (f"{role} prefill", programs.lower_prefill(cfg, role, load.sampler[role], mesh)),
                   (f"{role} decode", programs.lower_decode(cfg, role, load.sampler[role], mesh))]
        if arch.vision is not None and load.sampler[role].images_per_row:
            lowered.append((f"{role} vision tower", programs.lower_vision(cfg, role, load.sampler[role], mesh)))
        for name, lower in lowered:
            figures = programs.measure(name, lower, arch, depths)
            scanned = f", scanned at {arch.text.num_layers}" if figures.scanned else ""
            log(f"compiled {name} at {'/'.join(map(str, depths))} layers{scanned} in {figures.compile_s:.0f} s")
            out.append(figures)
    return out


def report(cfg, args: Args, models: dict, compiled: list, elapsed_s: float) -> tuple[str, dict]:
    """The printed report and its JSON figures."""
    from rlanything_jax.core import sharding
    from rlanything_jax.system.planning.estimate import estimate, gib, parameter_count, suggest
    from rlanything_jax.system.planning.workload import workload

    budget = int(args.device_memory_gib * 2 ** 30)
    sizes = sharding.mesh_axis_sizes(dict(cfg.mesh.shape), args.devices)
    load = workload(cfg, {role: models[role].arch.vision for role in ("policy", "reward")},
                    args.micro_batches)
    paper = estimate(cfg, models, args.devices, args.micro_batches, load)
    lines = [f"plan for {cfg.config_file} on {args.devices} devices (mesh {sizes}), "
             f"{args.device_memory_gib:g} GiB each",
             f"assumptions: {ASSUMPTIONS}"]
    for role, model in models.items():
        arch = model.arch
        count = parameter_count(model.params)
        size = f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.2f} M"
        lines.append(f"  {role}: {arch.name} ({size} parameters, "
                     f"{arch.text.num_layers} layers{', vision tower' if arch.vision else ''}; {arch.source})")
    for role in ("policy", "reward"):
        t, s = load.train[role], load.sampler[role]
        lines.append(f"  {role} shapes: train {t.micro_batches} x {t.rows} rows x {t.length} tokens (loss window "
                     f"{t.window}{f', {t.image_patches} image patches per row' if t.image_patches else ''}), "
                     f"remat {getattr(cfg.train, role).remat}; sampler {s.prefill_rows}/{s.decode_rows} rows "
                     f"(prefill/decode), prompt {s.prompt_length}, cache {s.cache_length}"
                     f"{f', {s.images_per_row} images per row' if s.images_per_row else ''}")
    figures = {"config": cfg.config_file, "devices": args.devices, "mesh": sizes,
               "device_memory_gib": args.device_memory_gib, "resident_gib": {}, "programs": {}}
    lines.append("analytic per device (GiB), resident: " + ", ".join(
        f"{name} {gib(value)}" for name, value in paper.resident.items()) + f"; total {gib(paper.resident_bytes)}")
    figures["resident_gib"] = {name: round(value / 2 ** 30, 3) for name, value in paper.resident.items()}
    measured = {p.name: p for p in compiled}
    if compiled:
        lines.append("compiled per device (GiB; XLA:CPU memory_analysis), total = program + the rest of the "
                     "resident state:")
    peak_compiled = 0
    for name, parts in paper.programs.items():
        entry = {"analytic_gib": round(paper.total(name) / 2 ** 30, 3),
                 "analytic_parts_gib": {k: round(v / 2 ** 30, 3) for k, v in parts.items()}}
        text = (f"  {name:22s} analytic {gib(paper.total(name)):>7s} = resident + "
                + " + ".join(f"{k} {gib(v)}" for k, v in parts.items() if v))
        program = measured.get(name)
        if program is not None:
            others = paper.resident_bytes - sum(paper.resident[k] for k in paper.resident_of[name])
            total = program.peak_bytes + others
            peak_compiled = max(peak_compiled, total)
            unit = 2 ** 30
            entry.update(compiled_total_gib=round(total / unit, 3),
                         argument_gib=round(program.argument_bytes / unit, 3),
                         output_gib=round(program.output_bytes / unit, 3), temp_gib=round(program.temp_bytes / unit, 3),
                         alias_gib=round(program.alias_bytes / unit, 3),
                         generated_code_gib=round(program.generated_code_bytes / unit, 6),
                         tflops=round(program.flops / 1e12, 3), layers_compiled=list(program.layers),
                         scanned=program.scanned,
                         compile_s=round(program.compile_s, 1))
            text += (f"\n  {'':22s} compiled {gib(total):>7s}: arguments {gib(program.argument_bytes)}, outputs "
                     f"{gib(program.output_bytes)} (aliased {gib(program.alias_bytes)}), temporaries "
                     f"{gib(program.temp_bytes)}, code {program.generated_code_bytes / 2 ** 20:.1f} MiB; "
                     f"{program.flops / 1e12:.1f} TFLOP; layers {'/'.join(map(str, program.layers))}"
                     f"{' extrapolated' if len(program.layers) == 2 else ''}"
                     f"{' (FLOPs), scanned at full depth (memory)' if program.scanned else ''}, "
                     f"{program.compile_s:.0f} s")
        lines.append(text)
        figures["programs"][name] = entry
    for name in measured.keys() - paper.programs.keys():   # the vision tower: one image through it
        program = measured[name]
        lines.append(f"  {name:22s} compiled {gib(program.peak_bytes)} (one image; arguments "
                     f"{gib(program.argument_bytes)}, temporaries {gib(program.temp_bytes)}), "
                     f"{program.flops / 1e12:.1f} TFLOP, {program.compile_s:.0f} s")
        figures["programs"][name] = {"compiled_gib": round(program.peak_bytes / 2 ** 30, 3),
                                     "tflops": round(program.flops / 1e12, 3)}
    worst, peak = paper.peak
    fits = peak <= budget and (not compiled or peak_compiled <= budget)
    verdict = (f"verdict: {'FITS' if fits else 'DOES NOT FIT'} in {args.device_memory_gib:g} GiB per device: "
               f"analytic peak {gib(peak)} GiB ({worst})"
               + (f", compiled peak {gib(peak_compiled)} GiB" if compiled else ""))
    lines.append(verdict)
    figures.update(fits=fits, analytic_peak_gib=round(peak / 2 ** 30, 3), analytic_peak_program=worst,
                   compiled_peak_gib=round(peak_compiled / 2 ** 30, 3) if compiled else None, suggestions=[])
    if peak > budget or (compiled and peak_compiled > budget):
        def reload(overrides):
            return load_config(cfg.config_file, list(args.overrides) + list(overrides))

        over_budget = {name for name in paper.programs if paper.total(name) > budget
                       or figures["programs"][name].get("compiled_total_gib", 0) * 2 ** 30 > budget}
        for s in suggest(cfg, reload, models, args.devices, budget, args.micro_batches, over_budget)[:6]:
            settings = " ".join(f"--config.{o}" for o in s.overrides) or "(same settings)"
            lines.append(f"  change: {settings} on {s.devices} devices -> analytic peak {gib(s.peak_bytes)} GiB "
                         f"({s.program}){' fits' if s.peak_bytes <= budget else ''}")
            figures["suggestions"].append({"overrides": list(s.overrides), "devices": s.devices,
                                           "analytic_peak_gib": round(s.peak_bytes / 2 ** 30, 3),
                                           "fits": s.peak_bytes <= budget})
        if not any(s["fits"] for s in figures["suggestions"]):
            lines.append("  no listed change fits: the largest program's per-row activations, KV cache and images "
                         "shrink only with the tensor axis (a row is not split over devices); fewer rollout rows at "
                         "once (rollout.max_live_episodes), shorter rows (train.*.max_prompt_tokens + "
                         "max_response_tokens) or devices with more memory are needed")
    lines.append(f"planned in {elapsed_s:.0f} s")
    figures["elapsed_s"] = round(elapsed_s, 1)
    return "\n".join(lines), figures


def main(argv: Sequence[str]) -> int:
    started = time.perf_counter()
    try:
        args = parse_args(argv)
        cfg = load_config(args.spec, list(args.overrides))
        from rlanything_jax.core import sharding

        sharding.mesh_axis_sizes(dict(cfg.mesh.shape), args.devices)   # the mesh must fit the devices
        from rlanything_jax.system.planning.estimate import uses_environment_model

        roles = ("policy", "reward") + (("environment",) if uses_environment_model(cfg) else ())
        archs = architectures(cfg, roles)
    except (ConfigError, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    use_cpu_devices(args.devices, argv)

    def log(message: str) -> None:
        print(f"[plan {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    models = _models(cfg, roles, archs)
    compiled = [] if args.analytic_only else compile_programs(cfg, models, args.devices, args.layers,
                                                              args.micro_batches, log)
    text, figures = report(cfg, args, models, compiled, time.perf_counter() - started)
    print(text)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
