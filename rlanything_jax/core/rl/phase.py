"""One training phase: a step's examples -> about `updates_per_step` optimizer updates.

As in the reference, a phase makes one pass over its examples in `updates_per_step`
updates (fewer when it has fewer examples). Unlike it, every example is trained: they are split
evenly over the updates (33 examples in 4 updates: 9, 8, 8, 8; the reference steps 8, 8, 8, 8 and
drops the last one), so no update is a full Adam step on a lone leftover example. Each update's
batch is filled with empty rows to a bucketed size (micro-batches per update to a power of two,
sequence width by `data.collate`), so a run compiles a few train steps, which `Learner.compiled`
keeps; empty rows carry no loss and no weight (the step divides its summed loss once by the
update's total weight), and an all-empty micro-batch is skipped (see `core/rl/train_step`).

The configured aggregation is applied by the data (`DataConfig.aggregation`: per-token
advantages and loss weights), and the step always takes the weighted token mean over the
whole update, however it is split into micro-batches. So turn-packed examples, which hold
several steps' responses in one row, train exactly as their per-step examples would.

With `share_prompts`, an update whose examples repeat a prompt is laid out by `core/rl/shared_prompts.collate_update`
(the same examples per update; its micro-batch count comes from the batch, bucketed the same way): each prompt
runs once as a shared prefix, the update and its metrics unchanged. A vision-language learner's batches stay plain.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from rlanything_jax.core import multihost
from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.models.lora import add_adapters, split_adapters
from rlanything_jax.core.progress import Progress
from rlanything_jax.core.rl.data import BatchIterator, DataConfig, Example, collate
from rlanything_jax.core.rl.shared_prompts import collate_update, sharing_counts
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.rl.train_state import (
    TrainState,
    init_train_state,
    make_optimizer,
    reset_optimizer,
    train_state_shardings,
)
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, batch_shardings, jit_train_step
from rlanything_jax.core.rl.vision import ImageTraining, freeze_vision, with_cached_image_features
from rlanything_jax.core.seeds import derive_seed

# How the phase combines its updates' metrics: means weighted by each update's loss weight or trained
# tokens (as one update of all the phase's rows would weigh them); the weights themselves are totals.
_WEIGHTED_BY = {"loss": "loss_weight", "policy_loss": "loss_weight", "kl": "loss_weight",
                "clip_fraction": "trained_tokens", "entropy": "trained_tokens", "ratio_mean": "trained_tokens"}
_TOTALS = ("loss_weight", "trained_tokens")


@dataclasses.dataclass
class Learner:
    """What one model's phases need: its graph, optimizer, data rules and compiled steps."""

    graphdef: nnx.GraphDef
    # A config's train.policy / train.reward section; a mapping is converted (its keys are TrainConfig's) by
    # __post_init__, so the field is a TrainConfig from then on.
    train_config: TrainConfig
    mesh: Mesh
    eos_id: int
    pad_id: int
    stop_ids: tuple[int, ...] = ()   # the other tokens its sampler stops on (no EOS is appended after them)
    rules: sharding_lib.Rules = sharding_lib.DEFAULT_LOGICAL_AXIS_RULES
    # A vision-language model's: examples may carry images; with `freeze_vision` the tower is not trained.
    images: ImageTraining | None = None
    compiled: dict = dataclasses.field(default_factory=dict)
    # Under LoRA, the graph of the model with its adapters (the train step's); set by the first `fresh_state`.
    train_graphdef: nnx.GraphDef | None = None

    def __post_init__(self):
        self.train_config = TrainConfig.of(self.train_config)
        self.tx = make_optimizer(self.train_config)
        if self.images is not None and self.images.freeze_vision:
            if self.train_config.lora.enabled:
                raise ValueError("LoRA with model.freeze_vision is not supported")
            self.tx = freeze_vision(self.tx, self.images.vision_params)

    def fresh_state(self, params, adapters=None, seed: int = 0) -> TrainState:
        """A new train state at `params` for this learner: its optimizer, and a frozen copy of `params` as
        the KL's reference when `kl_reference="initial"`. Under LoRA (`train_config.lora`), `params` is the
        frozen base (kept as it is: the same arrays) and the state trains `adapters` (fresh ones: B = 0, A drawn
        from `seed`)."""
        lora_cfg, base = self.train_config.lora, None
        if lora_cfg.enabled:
            model = add_adapters(nnx.merge(self.graphdef, params), lora_cfg, seed)
            self.train_graphdef, fresh, base = split_adapters(model)
            params = fresh if adapters is None else adapters
        state = init_train_state(params, self.tx, frozen_reference=self.train_config.kl_reference == "initial",
                                 master_copy=self.train_config.master_copy, base=base,
                                 lora_scale=lora_cfg.scale if lora_cfg.enabled else 0.0)
        # Laid out as the train step wants it (global arrays, also for the counts a multi-process save reads).
        return multihost.to_device(state, train_state_shardings(state, self.tx, self.mesh, self.rules))

    def place(self, batch: TrainBatch) -> TrainBatch:
        """A host batch (every process holds all of it) as global arrays on the train step's shardings."""
        return multihost.to_device(batch, batch_shardings(batch, self.mesh, self.rules))

    def _step_fn(self, state: TrainState, batch: TrainBatch, num_micro: int):
        # A vision-language batch's own inputs: images through the vision part, or cached features.
        images = tuple(x.shape for x in jax.tree.leaves(batch.model_inputs))
        prefixes = None if batch.prefix_ids is None else tuple(batch.prefix_ids.shape)
        key = (num_micro,) + tuple(batch.input_ids.shape) + (batch.targets.shape[1], batch.ref_logp is None,
                                                              state.reference is None, images, prefixes)
        if key not in self.compiled:
            cfg = self.train_config
            # The batch's loss weights carry cfg.aggregation (see the module docstring).
            graphdef = self.graphdef if state.base is None else self.train_graphdef
            assert graphdef is not None   # fresh_state sets train_graphdef with the LoRA base
            spec = TrainSpec(graphdef=graphdef, tx=self.tx, clip_eps=cfg.clip_eps, kl_beta=cfg.kl_beta,
                             aggregation="token_mean", num_micro_batches=num_micro, remat=cfg.remat)
            self.compiled[key] = jit_train_step(spec, state, batch, self.mesh, self.rules)
        return self.compiled[key]

    def with_frozen_features(self, params, batch: TrainBatch) -> TrainBatch:
        """With a frozen tower, the batch's images replaced by their features (one tower forward, no
        gradient): the step then never runs the tower. Otherwise the batch as it is."""
        if self.images is None or not self.images.freeze_vision or batch.model_inputs is None:
            return batch
        key = ("vision_features",) + tuple(x.shape for x in jax.tree.leaves(batch.model_inputs))
        if key not in self.compiled:
            self.compiled[key] = jax.jit(lambda p, b: with_cached_image_features(self.graphdef, p, b))
        return self.compiled[key](params, batch)

    def train(self, state: TrainState, examples: Sequence[Example], seed: int,
              prefix: str) -> tuple[TrainState, dict[str, float]]:
        """One phase (`train_phase`): the loop's `Trainer`."""
        return train_phase(self, state, examples, seed=seed, prefix=prefix)


def update_plan(num_examples: int, updates_per_step: int, micro_batch_size: int) -> tuple[int, int]:
    """(updates, micro-batches per update) for a phase of `num_examples` examples: `updates_per_step`
    updates (at most one per example), each with enough micro-batches for the largest even share,
    rounded up to a power of two."""
    updates = max(1, min(updates_per_step, num_examples))
    micro = math.ceil(math.ceil(num_examples / updates) / micro_batch_size)
    return updates, 1 << (max(micro, 1) - 1).bit_length()


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of PPO epoch `epoch` of a phase seeded `seed`, by the run's one seed scheme: keyed by
    both, so no two (seed, epoch) pairs share a shuffle by arithmetic coincidence (as `seed + p * epoch` can)."""
    return derive_seed(seed, "ppo_epoch", epoch)


def _phase_metrics(updates: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The updates' metrics combined (see `_WEIGHTED_BY`); any other metric is the mean over updates."""
    totals = {name: sum(u[name] for u in updates) for name in _TOTALS}
    combined = {}
    for name in updates[0]:
        if name in _TOTALS:
            combined[name] = totals[name]
        elif name in _WEIGHTED_BY:
            weight = _WEIGHTED_BY[name]
            combined[name] = sum(u[name] * u[weight] for u in updates) / max(totals[weight], 1e-30)
        else:
            combined[name] = sum(u[name] for u in updates) / len(updates)
    return combined


def train_phase(learner: Learner, state: TrainState, examples: Sequence[Example], seed: int,
                prefix: str = "policy") -> tuple[TrainState, dict[str, float]]:
    """Trains `state` on one pass over `examples` per PPO epoch; returns the new state and the
    phase's metrics: the loss and diagnostics weighted over every update's trained rows, and its counts
    (`<prefix>/updates`, reported as 0 when there is nothing to train on, and `<prefix>_data/...`)."""
    counts: dict[str, float] = {}
    cfg = learner.train_config
    if cfg.reset_optimizer_each_step:
        state = reset_optimizer(state, learner.tx)
    data_cfg = DataConfig(batch_size=1, max_prompt_tokens=cfg.max_prompt_tokens,
                          max_response_tokens=cfg.max_response_tokens, eos_id=learner.eos_id,
                          stop_ids=tuple(learner.stop_ids),
                          pad_id=learner.pad_id, overlong_prompt=cfg.overlong_prompt,
                          append_eos=cfg.append_eos, aggregation=cfg.aggregation, seed=seed,
                          images=None if learner.images is None else learner.images.inputs)
    probe = BatchIterator(examples, data_cfg)  # applies the length rules once, for the counts
    for name, count in probe.counts.items():
        counts[f"{prefix}_data/{name}"] = count
    kept = probe.examples
    if not kept:
        return state, {**counts, f"{prefix}/updates": 0}
    updates, num_micro = update_plan(len(kept), cfg.updates_per_step, cfg.micro_batch_size)
    update_metrics = []
    lines = Progress(f"{prefix} training", updates * cfg.ppo_epochs, "updates")
    # A vision-language model's batches stay plain, text-only ones too (its prefix path is not checked against M-RoPE).
    share = cfg.share_prompts and learner.images is None
    collate_fn = functools.partial(collate_update, micro_batch_size=cfg.micro_batch_size) if share else collate
    if share:
        counts.update({f"{prefix}_data/shared_prompt_rows": 0, f"{prefix}_data/shared_prompts": 0})
    # PPO epochs: each pass reshuffles the same examples; the clip keeps later passes near the sampler's policy.
    for epoch in range(cfg.ppo_epochs):
        batches = BatchIterator(kept, dataclasses.replace(data_cfg, batch_size=num_micro * cfg.micro_batch_size,
                                                          seed=epoch_seed(seed, epoch)), num_batches=updates,
                                collate_fn=collate_fn)
        for batch in batches:
            micro = num_micro
            if batch.prefix_ids is not None:   # a shared-prompt layout: its own micro-batch count
                micro = batch.prefix_ids.shape[0] // cfg.micro_batch_size
                for name, count in sharing_counts(batch).items():
                    counts[f"{prefix}_data/{name}"] += count
            batch = learner.with_frozen_features(state.params, learner.place(batch))
            step_fn = learner._step_fn(state, batch, micro)
            state, step_metrics = step_fn(state, batch)
            update_metrics.append({name: float(np.asarray(value))
                                   for name, value in jax.device_get(step_metrics).items()})
            lines.update(len(update_metrics))
    figures = {f"{prefix}/{name}": value for name, value in _phase_metrics(update_metrics).items()}
    return state, {**counts, f"{prefix}/updates": len(update_metrics), **figures}
