"""Pure, jitted train steps for the policy and the reward model.

`train_step(state, batch, spec) -> (state, metrics)` is a pure function: the model
structure, optimizer and loss settings travel in a hashable `TrainSpec`, the arrays in
`TrainState` and `TrainBatch`. `jit_train_step` compiles it with explicit shardings
and donates the state (MaxText's pattern); any JAX stack can call either.

A batch holds N sequences: `input_ids` [N, L] (left-padded prompt + response),
`targets` [N, L] (the next token at each position), `loss_mask` [N, L] (1 where the
target is a response token, or a positive per-token weight: see `rl/data.collate`),
`old_logp` [N, L] (the sampler's log-probabilities of the targets), `advantages` [N]
or [N, L], optional `ref_logp` [N, L].
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlanything_jax import sharding as sharding_lib
from rlanything_jax.rl.losses import ppo_clip_k3_loss
from rlanything_jax.rl.train_state import TrainState, train_state_shardings


@struct.dataclass
class TrainBatch:
    input_ids: jax.Array
    attention_mask: jax.Array
    targets: jax.Array
    loss_mask: jax.Array
    old_logp: jax.Array
    advantages: jax.Array
    ref_logp: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    graphdef: nnx.GraphDef
    tx: optax.GradientTransformation
    clip_eps: float = 0.2
    kl_beta: float = 0.01
    aggregation: str = "sequence_mean"
    num_micro_batches: int = 1


def token_logprobs(graphdef: nnx.GraphDef, params: nnx.State, input_ids: jax.Array, attention_mask: jax.Array,
                   targets: jax.Array) -> jax.Array:
    """log p(targets[t] | tokens up to t) for every position, float32 [N, L]."""
    logits = nnx.merge(graphdef, params)(input_ids, attention_mask)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]


def _micro_loss(params: nnx.State, micro: TrainBatch, spec: TrainSpec):
    logp = token_logprobs(spec.graphdef, params, micro.input_ids, micro.attention_mask, micro.targets)
    # NaN marks tokens the sampler never scored (an appended EOS): treat them as on-policy.
    on_policy = jax.lax.stop_gradient(logp)
    old_logp = jnp.where(jnp.isnan(micro.old_logp), on_policy, micro.old_logp)
    ref_logp = None if micro.ref_logp is None else jnp.where(jnp.isnan(micro.ref_logp), on_policy, micro.ref_logp)
    return ppo_clip_k3_loss(logp, old_logp, micro.advantages, micro.loss_mask, eps=spec.clip_eps,
                            beta=spec.kl_beta, ref_logp=ref_logp, aggregation=spec.aggregation)


def train_step(state: TrainState, batch: TrainBatch, spec: TrainSpec) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update from a batch split into `spec.num_micro_batches` equal micro-batches.

    Gradients and metrics are averaged over micro-batches (a `lax.scan`), so with
    sequence-mean aggregation k micro-batches of n give the update of one batch of k * n.
    """
    k = spec.num_micro_batches
    micro_batches = jax.tree.map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)
    grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)

    def accumulate(carry, micro):
        grads_sum, loss_sum, metrics_sum = carry
        (loss, metrics), grads = grad_fn(state.params, micro, spec)
        return (jax.tree.map(jnp.add, grads_sum, grads), loss_sum + loss,
                jax.tree.map(jnp.add, metrics_sum, metrics)), None

    zero_grads = jax.tree.map(jnp.zeros_like, state.params)
    metric_shapes = jax.eval_shape(lambda: _micro_loss(state.params, jax.tree.map(lambda x: x[0], micro_batches),
                                                       spec)[1])
    zero_metrics = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
    (grads, loss, metrics), _ = jax.lax.scan(accumulate, (zero_grads, jnp.zeros(()), zero_metrics), micro_batches)
    grads = jax.tree.map(lambda g: g / k, grads)
    updates, opt_state = spec.tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {name: value / k for name, value in metrics.items()}
    metrics.update(loss=loss / k, grad_norm=optax.tree.norm(grads))
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics


# The policy and the reward model share the loss; only their data and settings differ.
policy_train_step = train_step
reward_model_train_step = train_step


def batch_shardings(batch: TrainBatch, mesh: Mesh, rules: sharding_lib.Rules) -> TrainBatch:
    def leaf(x):
        axes = ("batch",) + ("length",) * (x.ndim - 1)
        return sharding_lib.named_sharding(mesh, axes, rules, x.shape)

    return jax.tree.map(leaf, batch)


def jit_train_step(spec: TrainSpec, state: TrainState, batch: TrainBatch, mesh: Mesh,
                   rules: sharding_lib.Rules = sharding_lib.DEFAULT_LOGICAL_AXIS_RULES) -> Any:
    """`train_step` compiled for these shapes with explicit in/out shardings, donating the state."""
    state_shardings = train_state_shardings(state, spec.tx, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.jit(lambda s, b: train_step(s, b, spec),
                   in_shardings=(state_shardings, batch_shardings(batch, mesh, rules)),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))
