"""TrainState pytree and the optimizer built from a config's train section."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.models.lora import merge_adapters
from rlanything_jax.core.rl.train_config import TrainConfig


class TrainState(struct.PyTreeNode):   # struct.dataclass with a typed `replace`
    step: jax.Array          # int32 []: optimizer updates taken
    params: nnx.State        # trained parameters (nnx.Param leaves of the model)
    opt_state: Any           # optax state, persisting across RL steps
    # Frozen parameters the KL term is taken against (`kl_reference="initial"`): the model the RL started
    # from. None: the KL is against the rollout's log-probabilities (the pre-update snapshot), as the
    # reference implementation does.
    reference: nnx.State | None = None
    # A float32 copy of low-precision parameters that updates apply to (`TrainConfig.master_copy`); the
    # optimizer's moments are then float32 too. None: updates apply to `params` in their own dtype.
    master: nnx.State | None = None
    # LoRA (`TrainConfig.lora`): `params` are the adapters, and `base` the frozen model they adapt, in its own
    # dtype, never in the optimizer (nor donated by the train step, nor checkpointed: it is the loaded model).
    # Roles that share one base (`model.reward.share_base`) hold the same arrays here. None: full fine-tuning.
    base: nnx.State | None = None
    lora_scale: float = struct.field(pytree_node=False, default=0.0)   # alpha / rank


def learning_rate_schedule(config: TrainConfig | Mapping[str, Any]) -> optax.Schedule:
    """Constant (the reference: its cosine has min_lr_scale 1) or linear warmup then cosine decay."""
    cfg = TrainConfig.of(config)
    if cfg.schedule == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
            decay_steps=cfg.decay_steps, end_value=cfg.learning_rate * cfg.min_lr_ratio)
    return optax.constant_schedule(cfg.learning_rate)  # TrainConfig admits no other schedule


def make_optimizer(config: TrainConfig | Mapping[str, Any]) -> optax.GradientTransformation:
    """AdamW with optional global-norm clipping (max_grad_norm 0 disables it). A mapping is read as
    a TrainConfig, its missing keys taking TrainConfig's defaults."""
    cfg = TrainConfig.of(config)
    adamw = optax.adamw(learning_rate_schedule(cfg), b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps,
                        weight_decay=cfg.weight_decay)
    if cfg.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
    return adamw


def init_train_state(params: nnx.State, tx: optax.GradientTransformation, frozen_reference: bool = False,
                     master_copy: bool = False, base: nnx.State | None = None, lora_scale: float = 0.0) -> TrainState:
    """A fresh state at `params`; with `frozen_reference`, a copy of them is kept as the KL's reference
    (a copy: the train step donates the state, and one buffer cannot be donated twice); with `master_copy`,
    a float32 copy of them if any is in a lower precision. With a frozen `base`, `params` are LoRA adapters
    of scale `lora_scale`."""
    reference = jax.tree.map(jnp.copy, params) if frozen_reference else None
    low_precision = any(leaf.dtype != jnp.float32 for leaf in jax.tree.leaves(params))
    master = jax.tree.map(lambda p: p.astype(jnp.float32), params) if master_copy and low_precision else None
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, reference=reference, master=master,
                      opt_state=tx.init(params if master is None else master), base=base, lora_scale=lora_scale)


def reset_optimizer(state: TrainState, tx: optax.GradientTransformation) -> TrainState:
    """Fresh optimizer moments, as the reference does at every RL step (an option here)."""
    return state.replace(opt_state=tx.init(state.params if state.master is None else state.master))


def train_state_shardings(state_shapes: TrainState, tx: optax.GradientTransformation, mesh: Mesh,
                          rules: sharding_lib.Rules) -> TrainState:
    """Shardings for a TrainState: params by the logical-axis rules, optimizer moments like their
    params, everything else (step, counts) replicated."""
    param_shardings = sharding_lib.state_shardings(state_shapes.params, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    # A transform that skips some parameters (`core/rl/vision.freeze_vision`'s multi_transform) holds an empty
    # MaskedNode in place of their moments: it stays one.
    opt_shardings = optax.tree_map_params(
        tx, lambda leaf, sharding: leaf if isinstance(leaf, optax.MaskedNode) else sharding,
        state_shapes.opt_state, param_shardings, transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, optax.MaskedNode))
    # A TrainState of shardings (the state's pytree structure), not of arrays.
    return TrainState(step=replicated, params=param_shardings, opt_state=opt_shardings,  # type: ignore[arg-type]
                      reference=None if state_shapes.reference is None else param_shardings,
                      master=None if state_shapes.master is None else param_shardings,
                      base=None if state_shapes.base is None else sharding_lib.state_shardings(
                          state_shapes.base, mesh, rules),
                      lora_scale=state_shapes.lora_scale)


@functools.partial(jax.jit, static_argnums=2)
def _merged(base: nnx.State, adapters: nnx.State, scale: float) -> nnx.State:
    return merge_adapters(base, adapters, scale)


def sampler_weights(state: TrainState) -> nnx.State:
    """The weights a sampler of this model decodes with: the parameters, or under LoRA the base with the
    adapters merged into its kernels (one merge per weight swap; decoding then costs what the base's does)."""
    return state.params if state.base is None else _merged(state.base, state.params, state.lora_scale)
