"""TrainState pytree and the optimizer built from a config's train section."""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlanything_jax import sharding as sharding_lib

SCHEDULES = ("constant", "warmup_cosine")


@struct.dataclass
class TrainState:
    step: jax.Array          # int32 []: optimizer updates taken
    params: nnx.State        # trained parameters (nnx.Param leaves of the model)
    opt_state: Any           # optax state, persisting across RL steps


def learning_rate_schedule(cfg: Mapping[str, Any]) -> optax.Schedule:
    """Constant (the reference: its cosine has min_lr_scale 1) or linear warmup then cosine decay."""
    kind = cfg.get("schedule", "constant")
    lr = cfg["learning_rate"]
    if kind == "constant":
        return optax.constant_schedule(lr)
    if kind == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=lr, warmup_steps=int(cfg.get("warmup_steps", 0)),
            decay_steps=max(int(cfg.get("decay_steps", 1)), 1), end_value=lr * float(cfg.get("min_lr_ratio", 0.0)))
    raise ValueError(f"train.schedule must be one of {SCHEDULES}, got {kind!r}")


def make_optimizer(cfg: Mapping[str, Any]) -> optax.GradientTransformation:
    """AdamW with optional global-norm clipping (max_grad_norm 0 disables it)."""
    adamw = optax.adamw(learning_rate_schedule(cfg), b1=cfg["adam_b1"], b2=cfg["adam_b2"], eps=cfg["adam_eps"],
                        weight_decay=cfg["weight_decay"])
    if cfg.get("max_grad_norm", 0.0) > 0:
        return optax.chain(optax.clip_by_global_norm(cfg["max_grad_norm"]), adamw)
    return adamw


def init_train_state(params: nnx.State, tx: optax.GradientTransformation) -> TrainState:
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def reset_optimizer(state: TrainState, tx: optax.GradientTransformation) -> TrainState:
    """Fresh optimizer moments, as the reference does at every RL step (an option here)."""
    return state.replace(opt_state=tx.init(state.params))


def train_state_shardings(state_shapes: TrainState, tx: optax.GradientTransformation, mesh: Mesh,
                          rules: sharding_lib.Rules) -> TrainState:
    """Shardings for a TrainState: params by the logical-axis rules, optimizer moments like their
    params, everything else (step, counts) replicated."""
    param_shardings = sharding_lib.state_shardings(state_shapes.params, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_shardings = optax.tree_map_params(tx, lambda _, sharding: sharding, state_shapes.opt_state,
                                          param_shardings, transform_non_params=lambda _: replicated)
    return TrainState(step=replicated, params=param_shardings, opt_state=opt_shardings)
