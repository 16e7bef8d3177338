"""The planner (`python -m rlanything_jax.plan`): its analytic state bytes against a compiled train step's
arguments, the fit verdict, and one-line errors. Runs on the session's 8 fake CPU devices."""

import json
import subprocess
import sys

import jax
import pytest

from rlanything_jax import plan
from rlanything_jax.core import sharding
from rlanything_jax.system.config import DEFAULT_CONFIG, ROOT, load_config
from rlanything_jax.system.planning import analytic, programs
from rlanything_jax.system.planning.architectures import KNOWN_ARCHITECTURES, role_architecture
from rlanything_jax.system.planning.estimate import estimate
from rlanything_jax.system.planning.workload import workload

TINY = ["model.policy.path=scratch", "model.reward.path=scratch", "model.scratch.num_layers=2",
        "model.scratch.hidden_size=64", "model.scratch.intermediate_size=128", "model.scratch.vocab_size=512",
        "mesh.shape={'data': 2, 'fsdp': 4, 'tensor': 1}", "train.policy.micro_batch_size=4",
        "train.policy.max_prompt_tokens=48", "train.policy.max_response_tokens=16"]
# The parameter + optimizer bytes are exact per device; the compiled arguments add the batch and a few
# replicated scalars (step, Adam's count), so they may exceed the analytic state by at most this much.
TOLERANCE = 0.10


def _devices_needed(count: int):
    if jax.device_count() < count:
        pytest.skip(f"needs {count} CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count={count})")


# float32 parameters and two Adam moments; bfloat16 parameters (2 bytes), their float32 master copy (4) and
# float32 moments (8); stacked, scanned layers hold the same state
@pytest.mark.parametrize("dtype, state_per_parameter_byte, scan", [("float32", 3, False), ("bfloat16", 7, False),
                                                                   ("float32", 3, True)])
def test_analytic_state_bytes_match_the_compiled_train_step(dtype, state_per_parameter_byte, scan):
    _devices_needed(8)
    cfg = load_config(DEFAULT_CONFIG, TINY + [f"model.policy.dtype={dtype}", f"model.policy.scan_layers={scan}"])
    models = plan._models(cfg, ("policy", "reward"))
    paper = estimate(cfg, models, 8, micro_batches=2)
    state = sum(paper.resident[k] for k in paper.resident_of["policy train step"])
    assert state == paper.resident["policy parameters"] * state_per_parameter_byte

    mesh = sharding.build_mesh(dict(cfg.mesh.shape))
    load = workload(cfg, {"policy": None, "reward": None}, micro_batches=2)   # text models: no VisionPlan
    arch = models["policy"].arch
    figures = programs.measure("policy train step",
                               programs.lower_train_step(cfg, "policy", load.train["policy"], mesh), arch,
                               programs.layer_counts(arch, 0))
    assert state <= figures.argument_bytes <= state * (1 + TOLERANCE)
    assert figures.alias_bytes >= 0.9 * state   # the state is donated: the new one reuses its buffers
    assert figures.flops > 0
    assert figures.scanned == scan and arch.text.scan_layers == scan
    if scan:   # memory from the scanned program; FLOPs from the unrolled one (a loop body counts once)
        unrolled = programs.measure("policy train step", programs.lower_train_step(cfg, "policy", load.train["policy"],
                                                                                   mesh), arch.with_scan(False), (2,))
        assert figures.flops == unrolled.flops and figures.argument_bytes == unrolled.argument_bytes


def test_parameters_shard_over_the_mesh():
    cfg = load_config(DEFAULT_CONFIG, TINY)
    params = plan._models(cfg, ("policy",))["policy"].params
    whole = analytic.per_device_bytes(params, analytic.Mesh({"data": 1, "fsdp": 1, "tensor": 1}, tuple(
        cfg.sharding.logical_axis_rules)))
    split = analytic.per_device_bytes(params, analytic.Mesh({"data": 1, "fsdp": 4, "tensor": 1}, tuple(
        cfg.sharding.logical_axis_rules)))
    assert whole / 4 <= split < whole / 2   # norms and head_dim-only leaves stay whole


def test_known_architectures_have_their_released_sizes():
    qwen25 = role_architecture("checkpoints/Qwen2.5-7B-Instruct", load_config(DEFAULT_CONFIG).model.scratch)
    assert (qwen25.text.num_layers, qwen25.text.hidden_size, qwen25.text.qkv_bias) == (28, 3584, True)
    vl = role_architecture("checkpoints/Qwen3-VL-8B-Thinking", load_config(DEFAULT_CONFIG).model.scratch)
    assert vl.vision is not None and (vl.text.num_layers, vl.config.vision.depth) == (36, 27)
    assert "qwen3-8b" in KNOWN_ARCHITECTURES


def test_the_verdict_flips_when_the_device_is_tiny(capsys):
    _devices_needed(8)
    args = ["--config=configs/default.py", "--devices=8", "--analytic_only", "--json"] + [f"--config.{o}" for o in TINY]
    assert plan.main(args + ["--device_memory_gib=64"]) == 0
    roomy = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert roomy["fits"] and roomy["suggestions"] == []
    assert plan.main(args + ["--device_memory_gib=0.0001"]) == 0
    out = capsys.readouterr().out
    tight = json.loads(out.strip().splitlines()[-1])
    assert not tight["fits"] and "DOES NOT FIT" in out
    assert any(s["overrides"] for s in tight["suggestions"])   # settings to change, with their figures
    assert tight["analytic_peak_gib"] == roomy["analytic_peak_gib"]


def test_every_program_of_the_run_compiles_scanned_and_unrolled(capsys):
    """The whole compiled report (train steps, prefill, decode) of a tiny config whose policy scans its layers:
    the scanned policy's programs keep the unrolled FLOPs and take their memory from the scanned program."""
    _devices_needed(8)
    args = ["--config=configs/default.py", "--devices=8", "--layers=1", "--json",
            "--config.model.policy.scan_layers=True"] + [f"--config.{o}" for o in TINY]
    assert plan.main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["programs"]
    for role in ("policy", "reward"):
        for program in ("train step", "prefill", "decode"):
            figures = report[f"{role} {program}"]
            assert figures["tflops"] >= 0 and figures["compiled_total_gib"] > 0, (role, program)
            assert figures["scanned"] == (role == "policy")


@pytest.mark.parametrize("argv,message", [
    (["--config=configs/nope.py", "--devices=8"], "config.file: no such config file"),
    (["--config=configs/default.py", "--devices=8", "--config.train.policy.remat=most"], "train.policy.remat"),
    (["--config=configs/default.py", "--devices=6", "--config.mesh.shape={'data': 1, 'fsdp': 4, 'tensor': 1}"],
     "needs 4 devices"),
    (["--config=configs/default.py"], "--devices=N"),
    (["--config=configs/default.py", "--devices=8", "--config.model.policy.path=/no/such/model"],
     "no known architecture"),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert plan.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_the_command_line_exits_2_on_a_bad_config():
    done = subprocess.run([sys.executable, "-m", "rlanything_jax.plan", "--config=configs/nope.py", "--devices=4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: config.file: no such config file (got 'configs/nope.py')"]
