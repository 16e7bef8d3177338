"""Pure, jitted train steps for the policy and the reward model.

`train_step(state, batch, spec) -> (state, metrics)` is a pure function: the model
structure, optimizer and loss settings travel in a hashable `TrainSpec`, the arrays in
`TrainState` and `TrainBatch`. `jit_train_step` compiles it with explicit shardings
and donates the state (MaxText's pattern); any JAX stack can call either.

A batch holds N sequences: `input_ids` and `attention_mask` [N, L] (left-padded prompt +
response) and, for the last W <= L positions (the loss window; W = L covers every
position), `targets` [N, W] (the next token at each position), `loss_mask` [N, W] (1
where the target is a response token, or a positive per-token weight: see
`core/rl/data.collate`), `old_logp` [N, W] (the sampler's log-probabilities of the targets),
`advantages` [N] or [N, W], optional `ref_logp` [N, W] (the KL's base; a state with frozen
`reference` parameters computes it instead). Logits are computed for the window only.

Micro-batches accumulate as MaxText does: each gives its loss as a weighted sum and its
weight (`core/rl/losses.PPOSums`), the gradients of the sums add up, and the update divides once
by the whole batch's weight. So any split (rows of unequal weight, empty filler rows or
micro-batches) gives the update, loss and diagnostics of the batch taken at once; a
micro-batch of filler rows only is skipped (`lax.cond`), so filling a batch up costs nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import MutableMapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.rl.losses import PPOSums, ppo_clip_k3_sums, ppo_loss_from_sums
from rlanything_jax.core.rl.train_state import TrainState, train_state_shardings


class TrainBatch(struct.PyTreeNode):   # struct.dataclass with a typed `replace`
    input_ids: jax.Array
    attention_mask: jax.Array
    targets: jax.Array
    loss_mask: jax.Array
    old_logp: jax.Array
    advantages: jax.Array
    ref_logp: jax.Array | None = None
    # Optional shared prefixes (see `share_prompt_prefixes`): row i continues prefix_ids[prefix_index[i]].
    prefix_ids: jax.Array | None = None
    prefix_mask: jax.Array | None = None
    prefix_index: jax.Array | None = None
    # A vision-language model's own inputs for these rows (`interfaces.ImageInputs.batch_inputs`; `core/rl/data.collate`
    # builds them): a pytree read only by the model, every leaf with the rows first.
    model_inputs: Any = None


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    graphdef: nnx.GraphDef
    tx: optax.GradientTransformation
    clip_eps: float = 0.2
    kl_beta: float = 0.01
    aggregation: str = "sequence_mean"
    num_micro_batches: int = 1
    remat: str = "none"     # the decoder layers' activation checkpointing (core/models/decoder.REMAT_POLICIES)


def token_logprobs(graphdef: nnx.GraphDef, params: nnx.State | tuple[nnx.State, ...], input_ids: jax.Array,
                   attention_mask: jax.Array, targets: jax.Array,
                   prefixes: tuple[jax.Array, jax.Array, jax.Array] | None = None,
                   images: TrainBatch | None = None, remat: str = "none") -> jax.Array:
    """log p(targets[:, j] | tokens up to position L - W + j), float32 [N, W], for input_ids [N, L] and
    targets [N, W] with W <= L: the targets cover the last W positions (all of them when W = L).
    `remat` checkpoints each layer under that policy (an argument of the model's `hidden_states`).
    `params` may be a tuple of states that together make the model (LoRA: the frozen base and the adapters).

    The output layer and the last decoder layer run on those W positions only: responses sit
    at the end of a row, so a batch whose prompt columns carry no loss skips their logits
    (the largest array of the step) and their final-layer queries and MLP.
    """
    window = targets.shape[-1]
    if window > input_ids.shape[1]:
        raise ValueError(f"targets cover {window} positions but the rows have {input_ids.shape[1]}")
    model = nnx.merge(graphdef, *params) if isinstance(params, tuple) else nnx.merge(graphdef, params)
    if images is not None and images.model_inputs is not None:   # a vision-language batch
        if prefixes is not None:
            raise ValueError("shared prefixes are not supported for rows with images")
        inputs = model.batch_model_inputs(input_ids, images.model_inputs, remat)
        hidden = model.hidden_states(input_ids, attention_mask, last=window, inputs=inputs, remat=remat)
    elif prefixes is None:
        hidden = model.hidden_states(input_ids, attention_mask, last=window, remat=remat)
    else:  # (prefix_ids, prefix_mask, prefix_index): the rows continue shared prefixes
        hidden = model.hidden_states_after_prefixes(*prefixes, input_ids, attention_mask, last=window, remat=remat)
    return model.target_logprobs(hidden, targets)


def _micro_objective(params: nnx.State | tuple[nnx.State, Any], micro: TrainBatch, spec: TrainSpec,
                     reference: nnx.State | tuple[nnx.State, Any] | None = None,
                     base: nnx.State | None = None) -> tuple[jax.Array, PPOSums]:
    """The micro-batch's summed loss (to differentiate) and its sums. With frozen `reference` parameters,
    the KL is taken against their log-probabilities (a forward pass, no gradient), not the batch's. With a
    frozen LoRA `base`, `params` (and `reference`) are adapters of it: only they get gradients."""
    prefixes = None if micro.prefix_ids is None else cast(   # the three prefix fields are set together
        tuple[jax.Array, jax.Array, jax.Array], (micro.prefix_ids, micro.prefix_mask, micro.prefix_index))
    if base is not None:
        base = jax.lax.stop_gradient(base)
        params, reference = (base, params), None if reference is None else (base, reference)
    logp = token_logprobs(spec.graphdef, params, micro.input_ids, micro.attention_mask, micro.targets, prefixes,
                          micro, remat=spec.remat)
    # NaN marks tokens the sampler never scored (an appended EOS): treat them as on-policy.
    on_policy = jax.lax.stop_gradient(logp)
    old_logp = jnp.where(jnp.isnan(micro.old_logp), on_policy, micro.old_logp)
    ref_logp: jax.Array | None
    if reference is not None:
        ref_logp = jax.lax.stop_gradient(token_logprobs(spec.graphdef, reference, micro.input_ids,
                                                        micro.attention_mask, micro.targets, prefixes,
                                                        micro))
    else:
        ref_logp = None if micro.ref_logp is None else jnp.where(jnp.isnan(micro.ref_logp), on_policy,
                                                                 micro.ref_logp)
    sums = ppo_clip_k3_sums(logp, old_logp, micro.advantages, micro.loss_mask, eps=spec.clip_eps,
                            ref_logp=ref_logp, aggregation=spec.aggregation)
    return sums.objective(spec.kl_beta), sums


def train_step(state: TrainState, batch: TrainBatch, spec: TrainSpec) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update from a batch split into `spec.num_micro_batches` equal micro-batches
    (a batch with shared prefixes splits them too: the rows of micro-batch j must continue
    prefixes of chunk j, as consecutive groups do when the group size divides the micro-batch).

    The gradients of the micro-batches' summed losses add up (a `lax.scan`) and are divided once
    by the batch's total weight, so k micro-batches of n rows give the update of one batch of
    k * n rows, with either aggregation and whatever the rows' weights; so do the loss and the
    diagnostics (token-weighted over the batch's trained tokens).
    """
    k = spec.num_micro_batches
    grad_fn = jax.value_and_grad(_micro_objective, has_aux=True)
    if k == 1:  # no scan: XLA then sees one straight-line program (no loop-carried gradient buffers)
        (_, sums), grads = grad_fn(state.params, batch, spec, state.reference, state.base)
        return _apply(state, grads, sums, spec)
    micro_batches = jax.tree.map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)
    if batch.prefix_index is not None:  # indices into each micro-batch's own chunk of prefixes
        assert batch.prefix_ids is not None   # set together with prefix_index
        chunk = batch.prefix_ids.shape[0] // k
        micro_batches = micro_batches.replace(
            prefix_index=micro_batches.prefix_index - (jnp.arange(k, dtype=jnp.int32) * chunk)[:, None])

    def add_micro(carry, micro):
        grads_sum, sums_total = carry
        (_, sums), grads = grad_fn(state.params, micro, spec, state.reference, state.base)
        grads_sum = jax.tree.map(lambda total, g: total + g.astype(total.dtype), grads_sum, grads)
        return grads_sum, jax.tree.map(jnp.add, sums_total, sums)

    def accumulate(carry, micro):
        # A micro-batch of filler rows only (an update's batch filled up to its bucketed size) adds nothing:
        # skip its forward and backward passes.
        return jax.lax.cond(jnp.any(micro.loss_mask > 0), add_micro, lambda c, _: c, carry, micro), None

    # Summed in float32 when a float32 master copy takes the update (bfloat16 sums would round each term).
    zero_grads = jax.tree.map(jnp.zeros_like, state.params if state.master is None else state.master)
    sums_shapes = jax.eval_shape(lambda: _micro_objective(state.params, jax.tree.map(lambda x: x[0], micro_batches),
                                                          spec, state.reference, state.base)[1])
    zero_sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), sums_shapes)
    (grads, sums), _ = jax.lax.scan(accumulate, (zero_grads, zero_sums), micro_batches)
    return _apply(state, grads, sums, spec)


def _apply(state: TrainState, grad_sums, sums: PPOSums, spec: TrainSpec) -> tuple[TrainState, dict[str, jax.Array]]:
    """The update from the summed gradients of a whole batch: divided once by its weight (a batch that
    trains nothing has zero gradients)."""
    weight = jnp.where(sums.weight > 0, sums.weight, 1.0)
    master = state.master
    if master is None:
        grads = jax.tree.map(lambda g: (g / weight).astype(g.dtype), grad_sums)
        updates, opt_state = spec.tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
    else:   # the update in float32 on the master copy; the parameters are its rounding
        grads = jax.tree.map(lambda g: g.astype(jnp.float32) / weight, grad_sums)
        updates, opt_state = spec.tx.update(grads, state.opt_state, master)
        master = optax.apply_updates(master, updates)
        params = jax.tree.map(lambda m, p: m.astype(p.dtype), master, state.params)
    loss, metrics = ppo_loss_from_sums(sums, spec.kl_beta)
    metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads), loss_weight=sums.weight,
                   trained_tokens=sums.trained_tokens)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state, master=master), metrics


# The policy and the reward model share the loss; only their data and settings differ.
policy_train_step = train_step
reward_model_train_step = train_step


def share_prompt_prefixes(batch: TrainBatch, group_size: int, prefix_length: int,
                          counts: MutableMapping[str, int] | None = None) -> TrainBatch:
    """The same batch with each group of `group_size` consecutive rows sharing its first `prefix_length`
    columns as one prefix (a GRPO group: G rollouts of one prompt), so the train step runs that part
    of the forward and backward once per group. The per-token arrays must lie in the remaining
    columns (`targets.shape[1] <= L - prefix_length`). Host-side (numpy) arrays in and out.

    The training loop lays out its own prefixes (`core/rl/shared_prompts.collate_update`, under
    `TrainConfig.share_prompts`); bench/train_step.py measures what this saves.

    Switched off for a vision-language batch (its rows' model inputs, e.g. image features and positions, would have
    to be split between prefix and rows): the batch comes back unchanged and `counts` gets its rows
    under "prefix_sharing_off_images".
    """
    if batch.model_inputs is not None:
        if counts is not None:
            counts["prefix_sharing_off_images"] = counts.get("prefix_sharing_off_images", 0) + batch.input_ids.shape[0]
        return batch
    ids, mask = np.asarray(batch.input_ids), np.asarray(batch.attention_mask)
    rows, length = ids.shape
    if rows % group_size or not 0 < prefix_length < length:
        raise ValueError(f"{rows} rows in groups of {group_size} with a {prefix_length}-column prefix of {length}")
    if batch.targets.shape[1] > length - prefix_length:
        raise ValueError(f"the loss window ({batch.targets.shape[1]} columns) reaches into the prefix")
    if batch.prefix_ids is not None:
        raise ValueError("the batch already has prefixes")
    heads = (ids[:, :prefix_length] * mask[:, :prefix_length]).reshape(rows // group_size, group_size, -1)
    head_masks = mask[:, :prefix_length].reshape(rows // group_size, group_size, -1)
    if (heads != heads[:, :1]).any() or (head_masks != head_masks[:, :1]).any():
        raise ValueError("rows of a group differ in their first prefix_length columns")
    return batch.replace(input_ids=ids[:, prefix_length:], attention_mask=mask[:, prefix_length:],
                         prefix_ids=ids[::group_size, :prefix_length], prefix_mask=mask[::group_size, :prefix_length],
                         prefix_index=(np.arange(rows) // group_size).astype(np.int32))


def batch_shardings(batch: TrainBatch, mesh: Mesh, rules: sharding_lib.Rules) -> TrainBatch:
    def leaf(x):
        axes = ("batch",) + ("length",) * (x.ndim - 1)
        return sharding_lib.named_sharding(mesh, axes, rules, x.shape)

    return jax.tree.map(leaf, batch)


def jit_train_step(spec: TrainSpec, state: TrainState, batch: TrainBatch, mesh: Mesh,
                   rules: sharding_lib.Rules = sharding_lib.DEFAULT_LOGICAL_AXIS_RULES) -> Any:
    """`train_step` compiled for these shapes with explicit in/out shardings, donating the state (a LoRA base
    is a separate, undonated argument: it stays valid for whatever else holds it, e.g. another role)."""
    state_shardings = train_state_shardings(state, spec.tx, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    base_shardings, state_shardings = state_shardings.base, state_shardings.replace(base=None)
    step = jax.jit(lambda s, base, b: _without_base(train_step(s.replace(base=base), b, spec)),
                   in_shardings=(state_shardings, base_shardings, batch_shardings(batch, mesh, rules)),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))

    def run(state: TrainState, batch: TrainBatch) -> tuple[TrainState, dict[str, jax.Array]]:
        new, metrics = step(state.replace(base=None), state.base, batch)
        return new.replace(base=state.base), metrics

    # planner, benches (a function attribute, as jit's own `.lower`)
    run.lower = lambda s, b: _LoweredStep(step.lower(s.replace(base=None), s.base, b))  # type: ignore[attr-defined]
    return run


class _LoweredStep:
    """The lowered step, whose `compile()` is called as the step is: (state, batch) -> (state, metrics)."""

    def __init__(self, lowered):
        self._lowered = lowered

    def __getattr__(self, name):   # as_text, cost_analysis, ...: the lowered program's
        return getattr(self._lowered, name)

    def compile(self) -> "_CompiledStep":
        return _CompiledStep(self._lowered.compile())


class _CompiledStep:
    def __init__(self, compiled):
        self._compiled = compiled

    def __getattr__(self, name):   # memory_analysis, cost_analysis, ...: the compiled program's
        return getattr(self._compiled, name)

    def __call__(self, state: TrainState, batch: TrainBatch) -> tuple[TrainState, dict[str, jax.Array]]:
        new, metrics = self._compiled(state.replace(base=None), state.base, batch)
        return new.replace(base=state.base), metrics


def _without_base(out: tuple[TrainState, Any]) -> tuple[TrainState, Any]:
    return out[0].replace(base=None), out[1]
