"""The run's jitted programs lowered and compiled at its shapes, on abstract inputs, for their figures.

Each program is the run's own: the train step as `core/rl/phase.Learner` compiles it (its spec, shardings
and donation), and prefill, decode and the vision tower as `core/sampling/sampler.Sampler._compile` builds
them, over a sampler that holds abstract parameters. `compiled.memory_analysis()` gives per-device
buffer bytes and `compiled.cost_analysis()` the FLOPs (a while loop's body counted once: decode's
figure is one token step per window bucket).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.core.rl.train_step import TrainBatch
from rlanything_jax.core.rl.vision import ImageTraining
from rlanything_jax.core.sampling import decode as decode_lib
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig, bucket_length, window_buckets
from rlanything_jax.core.sampling.strategies import make_strategy
from rlanything_jax.system.config import RunConfig
from rlanything_jax.system.planning.architectures import Architecture, abstract_model
from rlanything_jax.system.planning.workload import SamplerShapes, TrainShapes

FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "flops")


@dataclasses.dataclass(frozen=True)
class ProgramFigures:
    """One compiled program's per-device figures (extrapolated to the model's depth when `layers` has two)."""

    name: str
    argument_bytes: float
    output_bytes: float
    alias_bytes: float
    temp_bytes: float
    generated_code_bytes: float
    flops: float
    compile_s: float
    layers: tuple[int, ...]       # the depths compiled unrolled (all figures, or the FLOPs of a scanned model)
    scanned: bool = False         # memory figures from the scanned program at the model's depth

    @property
    def peak_bytes(self) -> float:
        """Live at once while it runs: its inputs, its outputs that reuse no donated input, its temporaries."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.generated_code_bytes


def _figures(compiled) -> dict[str, float]:
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return dict(argument_bytes=memory.argument_size_in_bytes, output_bytes=memory.output_size_in_bytes,
                alias_bytes=memory.alias_size_in_bytes, temp_bytes=memory.temp_size_in_bytes,
                generated_code_bytes=memory.generated_code_size_in_bytes, flops=float((cost or {}).get("flops", 0.0)))


def measure(name: str, lower: Callable[[Architecture], object], arch: Architecture,
            layers: tuple[int, ...]) -> ProgramFigures:
    """Compiles `lower(arch at k layers)`, unrolled, for each k in `layers`; with two depths k1 < k2 every figure
    is extrapolated linearly to the model's depth L: f(L) = f(k2) + (f(k2) - f(k1)) / (k2 - k1) * (L - k2).

    A model whose layers are scanned (as its run compiles them) is also compiled as such at its full depth,
    in about the time of one layer, and its memory figures are that program's; its FLOPs stay the unrolled
    extrapolation's, because a loop's body counts once in `cost_analysis`."""
    started = time.perf_counter()
    unrolled = arch.with_scan(False)
    runs = [_figures(lower(unrolled.with_layers(k)).compile()) for k in layers]
    if len(runs) == 1:
        values = runs[0]
    else:
        (k1, k2), depth = layers, arch.text.num_layers
        values = {key: runs[1][key] + (runs[1][key] - runs[0][key]) / (k2 - k1) * (depth - k2) for key in FIELDS}
    if arch.text.scan_layers:
        values = dict(_figures(lower(arch).compile()), flops=values["flops"])
    return ProgramFigures(name=name, compile_s=time.perf_counter() - started, layers=layers,
                          scanned=arch.text.scan_layers, **values)


# ---------------------------------------------------------------- train step

def _abstract_batch(arch: Architecture, shapes: TrainShapes, freeze_vision: bool) -> TrainBatch:
    rows, length, window = shapes.rows * shapes.micro_batches, shapes.length, shapes.window
    i32, f32 = jnp.int32, jnp.float32
    sds = jax.ShapeDtypeStruct
    batch = TrainBatch(input_ids=sds((rows, length), i32), attention_mask=sds((rows, length), i32),
                       targets=sds((rows, window), i32), loss_mask=sds((rows, window), f32),
                       old_logp=sds((rows, window), f32), advantages=sds((rows, window), f32))
    if arch.vision is None or not shapes.image_patches:
        return batch
    # Frozen: the step reads the vision part's cached features (core/rl/vision.with_cached_image_features).
    return batch.replace(model_inputs=arch.vision.abstract_row_inputs(rows, length, shapes.image_patches,
                                                                      freeze_vision))


def lower_train_step(cfg: RunConfig, role: str, shapes: TrainShapes, mesh: Mesh) -> Callable[[Architecture], object]:
    model_cfg, train_cfg = getattr(cfg.model, role), getattr(cfg.train, role)

    def lower(arch: Architecture):
        graphdef, params = abstract_model(arch, model_cfg.dtype, model_cfg.compute_dtype)
        model = nnx.merge(graphdef, params)   # abstract: its image_inputs and vision_params, no arrays
        images = ImageTraining.of(model, cfg.model.freeze_vision)
        learner = Learner(graphdef=graphdef, train_config=train_cfg, mesh=mesh, eos_id=0, pad_id=0,
                          rules=cfg.sharding.logical_axis_rules, images=images)
        state = jax.eval_shape(lambda p: init_train_state(p, learner.tx, train_cfg.kl_reference == "initial",
                                                          train_cfg.master_copy), params)
        batch = _abstract_batch(arch, shapes, cfg.model.freeze_vision)
        return learner._step_fn(state, batch, shapes.micro_batches).lower(state, batch)

    return lower


# ---------------------------------------------------------------- sampler

def abstract_sampler(arch: Architecture, model_cfg, mesh: Mesh, rules, config: SamplerConfig) -> Sampler:
    """A `Sampler` over abstract parameters: its `_compile` builds the run's programs, which lower and compile
    here but are never called (nothing is placed on a device)."""
    graphdef, params = abstract_model(arch, model_cfg.dtype, model_cfg.compute_dtype)
    image_inputs = getattr(nnx.merge(graphdef, params), "image_inputs", None)   # a VisionLM's; static
    sampler = object.__new__(Sampler)
    sampler.__dict__.update(
        model_config=arch.text, tokenizer=None, config=config, mesh=mesh, rules=rules, graphdef=graphdef,
        _param_shardings=sharding_lib.state_shardings(params, mesh, rules), params=params,
        cache_dtype=jnp.dtype(model_cfg.compute_dtype), compilations=collections.Counter(),
        prefilled=collections.Counter(), _programs={}, image_inputs=image_inputs)
    return sampler


def _decode_state(sampler: Sampler, rows: int, shapes: SamplerShapes):
    return jax.eval_shape(lambda: decode_lib.init_decode_state(
        sampler.model_config, rows, shapes.cache_length, bucket_length(shapes.max_new_tokens, 16),
        sampler.cache_dtype))


def lower_prefill(cfg: RunConfig, role: str, shapes: SamplerShapes, mesh: Mesh) -> Callable[[Architecture], object]:
    model_cfg = getattr(cfg.model, role)

    def lower(arch: Architecture):
        sampler = abstract_sampler(arch, model_cfg, mesh, cfg.sharding.logical_axis_rules, SamplerConfig())
        state = _decode_state(sampler, shapes.prefill_rows, shapes)
        tokens = jax.ShapeDtypeStruct((shapes.prefill_rows, shapes.prompt_length), jnp.int32)
        window = next(w for w in window_buckets(shapes.cache_length, shapes.min_window) if w >= shapes.prompt_length)
        if arch.vision is not None and shapes.images_per_row:
            # Every row's images, as `VisionInputs.inputs` pads them.
            image_tokens = shapes.prefill_rows * shapes.images_per_row * shapes.image_tokens
            inputs = arch.vision.abstract_prompt_inputs(shapes.prefill_rows, shapes.prompt_length, image_tokens,
                                                        sampler.cache_dtype)
            shapes_key = tuple(x.shape for x in jax.tree.leaves(inputs))
            program = sampler._compile("prefill_images", state, window=window, input_shapes=shapes_key)
            return program.lower(sampler.params, state, tokens, tokens, inputs)
        return sampler._compile("prefill", state, window=window).lower(sampler.params, state, tokens, tokens)

    return lower


def lower_decode(cfg: RunConfig, role: str, shapes: SamplerShapes, mesh: Mesh) -> Callable[[Architecture], object]:
    model_cfg = getattr(cfg.model, role)
    temperature, top_p, top_k = ((cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k) if role == "policy"
                                 else (cfg.reward.temperature, cfg.reward.top_p, 0))

    def lower(arch: Architecture):
        sampler = abstract_sampler(arch, model_cfg, mesh, cfg.sharding.logical_axis_rules, SamplerConfig())
        state = _decode_state(sampler, shapes.decode_rows, shapes)
        eos = arch.text.eos_token_id
        stop_ids = tuple(eos) if isinstance(eos, tuple) else ((eos,) if eos is not None else ())
        spec = decode_lib.DecodeSpec(graphdef=sampler.graphdef, strategy=make_strategy(temperature, top_k, top_p),
                                     stop_token_ids=stop_ids,
                                     window_buckets=window_buckets(shapes.cache_length, shapes.min_window))
        budget = jax.ShapeDtypeStruct((), jnp.int32)   # the token budget and the step limit
        return sampler._compile("decode", state, spec=spec).lower(sampler.params, state, budget, budget)

    return lower


def lower_vision(cfg: RunConfig, role: str, shapes: SamplerShapes, mesh: Mesh) -> Callable[[Architecture], object]:
    """The sampler's vision program over one image's bucketed patches (`VisionInputs.features`)."""
    model_cfg = getattr(cfg.model, role)

    def lower(arch: Architecture):
        sampler = abstract_sampler(arch, model_cfg, mesh, cfg.sharding.logical_axis_rules, SamplerConfig())
        graphdef = sampler.graphdef

        def program(params, tower_input):
            return nnx.merge(graphdef, params).encode_image(tower_input)

        tower_input = arch.vision.abstract_tower_input(shapes.patches_per_image)
        return jax.jit(program, in_shardings=(sampler._param_shardings, None)).lower(sampler.params, tower_input)

    return lower


def layer_counts(arch: Architecture, layers: int) -> tuple[int, ...]:
    """The depths to compile: the model's own (layers 0 or at least its depth), else k and 2k layers (k at
    least past the first layers that differ from the rest, `VisionPlan.distinct_layers`)."""
    depth = arch.text.num_layers
    if layers <= 0 or 2 * layers >= depth:
        return (depth,)
    distinct = 0 if arch.vision is None else arch.vision.distinct_layers
    k = max(layers, distinct + 1)
    return (k, 2 * k) if 2 * k < depth else (depth,)
