"""The typed settings of one model's training (a config's train.policy / train.reward section)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rlanything_jax.core import validation as v
from rlanything_jax.core.models.decoder import REMAT_POLICIES
from rlanything_jax.core.models.lora import LoRAConfig
from rlanything_jax.core.rl.losses import AGGREGATIONS

SCHEDULES = ("constant", "warmup_cosine")
KL_REFERENCES = ("rollout", "initial")
OVERLONG_PROMPT_POLICIES = ("truncate_left", "drop")


def _unit_interval_open_above(key: str, value: Any) -> None:
    v.check(key, v.is_number(value) and 0 <= value < 1, "must be in [0, 1)", value)


def _open_unit_interval(key: str, value: Any) -> None:
    v.check(key, v.is_number(value) and 0 < value < 1, "must be in (0, 1)", value)


def _choice(choices: tuple[str, ...]):
    return lambda key, value: v.one_of(key, value, choices)


_CHECKS = (
    ("learning_rate", v.positive),
    ("adam_b1", _unit_interval_open_above),
    ("adam_b2", _unit_interval_open_above),
    ("adam_eps", v.positive),
    ("weight_decay", v.non_negative),
    ("max_grad_norm", v.non_negative),
    ("clip_eps", _open_unit_interval),
    ("kl_beta", v.non_negative),
    ("kl_reference", _choice(KL_REFERENCES)),
    ("updates_per_step", v.positive_int),
    ("ppo_epochs", v.positive_int),
    ("micro_batch_size", v.positive_int),
    ("max_prompt_tokens", v.positive_int),
    ("max_response_tokens", v.positive_int),
    ("schedule", _choice(SCHEDULES)),
    ("warmup_steps", v.non_negative_int),
    ("decay_steps", v.positive_int),
    ("min_lr_ratio", v.fraction),
    ("aggregation", _choice(AGGREGATIONS)),
    ("reset_optimizer_each_step", v.boolean),
    ("overlong_prompt", _choice(OVERLONG_PROMPT_POLICIES)),
    ("append_eos", v.boolean),
    ("pack_turns", v.boolean),
    ("remat", _choice(tuple(REMAT_POLICIES))),
    ("master_copy", v.boolean),
    ("share_prompts", v.boolean),
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The keys and defaults of configs/common.train_config (updates_per_step: the value both roles use)."""

    learning_rate: float = 1e-6
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0            # 0: no clipping
    clip_eps: float = 0.2
    kl_beta: float = 0.01
    # The KL's base: "rollout" (the sampler's log-probs, i.e. the pre-update snapshot: the reference's; there
    # is no reference model) or "initial" (the frozen model the RL started from, a forward pass per update).
    kl_reference: str = "rollout"
    updates_per_step: int = 4             # optimizer updates per pass over a step's data
    ppo_epochs: int = 1                   # passes over a step's data, all against the sampler's log-probs
    micro_batch_size: int = 1
    max_prompt_tokens: int = 2048
    max_response_tokens: int = 2048
    schedule: str = "constant"            # or "warmup_cosine" (warmup_steps, decay_steps, min_lr_ratio)
    warmup_steps: int = 0
    decay_steps: int = 1000
    min_lr_ratio: float = 0.0
    aggregation: str = "sequence_mean"    # or "token_mean"
    reset_optimizer_each_step: bool = False  # the reference rebuilds AdamW every RL step
    overlong_prompt: str = "drop"         # the reference drops them; or "truncate_left"
    append_eos: bool = True
    pack_turns: bool = True               # one example per multi-turn episode (core/rl/data.pack_turns)
    # Activation checkpointing of each decoder layer in the train step (core/models/decoder.REMAT_POLICIES):
    # "none" (keep every activation: fastest, most memory), "dots" (keep the projections' outputs),
    # "full" (keep each layer's input only; about one more forward pass of compute).
    remat: str = "none"
    # Low-precision (bfloat16) parameters get a float32 master copy: the optimizer's moments and updates live
    # in float32 and the parameters are the copy rounded, so that updates far below a bfloat16 ulp (a 1e-6
    # learning rate on weights near 1) are not lost, as in the reference's FSDP mixed precision. 4 more bytes
    # per parameter and float32 moments; nothing for float32 parameters (the CPU configs').
    master_copy: bool = True
    # Examples of one update whose prompts are identical (text only: the reward model's m judgments of a step,
    # a group's rollouts) share one micro-batch and train their prompt once, as a shared prefix: its forward and
    # backward run once per group. The same update, loss and metrics; a micro-batch then holds up to
    # micro_batch_size prompts with their response rows (`core/rl/shared_prompts`). Which examples go into which
    # update does not change: a prompt's examples that the shuffle puts into different updates share per update.
    # A vision-language model's batches stay plain.
    share_prompts: bool = False
    # LoRA adapters (core/models/lora.LoRAConfig: rank, alpha, dropout, targets): rank 0 trains every parameter;
    # rank > 0 trains adapters on the target projections only, the base frozen in its own dtype.
    lora: LoRAConfig = LoRAConfig()

    def __post_init__(self):
        v.fields_checked(_CHECKS, self)
        if not isinstance(self.lora, LoRAConfig):
            object.__setattr__(self, "lora", LoRAConfig.of(self.lora))

    @classmethod
    def of(cls, config: TrainConfig | Mapping[str, Any]) -> TrainConfig:
        """`config` itself, or a TrainConfig of a mapping's keys (unknown keys are a TypeError)."""
        return config if isinstance(config, TrainConfig) else cls(**config)
