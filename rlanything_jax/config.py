"""Loading and validating run configurations.

Configs are ml_collections files under `configs/` (`--config=configs/x.py[:variant]`,
overrides `--config.a.b=v`). `validate` runs at start-up and raises `ConfigError`
naming the offending key, so a typo in a constant fails before any model loads.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import ml_collections
from absl import flags
from ml_collections import config_flags

from rlanything_jax import sharding

DTYPES = ("float32", "bfloat16")
SCENARIOS = ("default", "alfworld", "osworld", "coding")
DEFAULT_CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "default.py")


class ConfigError(ValueError):
    """A config value is missing or invalid; the message starts with the key."""


def load_config(spec: str = DEFAULT_CONFIG, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """Loads `path[:variant]` with `a.b=v` overrides exactly as the command line would, then validates."""
    argv = ["rlanything_jax", f"--config={spec}", *(f"--config.{o}" for o in overrides)]
    flag_values = flags.FlagValues()
    # config_flags defines one flag per override it finds in argv, so it must see them.
    holder = config_flags.DEFINE_config_file("config", default=spec, flag_values=flag_values, sys_argv=argv)
    flag_values(argv)
    cfg = holder.value
    validate(cfg)
    return cfg


def _get(cfg: ml_collections.ConfigDict, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        try:
            node = node[part]
        except (KeyError, AttributeError):
            raise ConfigError(f"config.{key}: missing") from None
    return node


def _fail(key: str, message: str, value: Any) -> None:
    raise ConfigError(f"config.{key}: {message} (got {value!r})")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _non_negative_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fraction(value) -> bool:
    return _number(value) and 0.0 <= value <= 1.0


def _positive(value) -> bool:
    return _number(value) and value > 0


ABLATIONS = ("rlanything", "outcome_only", "fixed_reward_model", "policy_reward", "step_only")

_SCALAR_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("scenario", lambda v: v in SCENARIOS, f"must be one of {SCENARIOS}"),
    ("seed", _non_negative_int, "must be a non-negative integer"),
    ("workdir", lambda v: isinstance(v, str) and bool(v), "must be a non-empty path"),
    ("loop.total_steps", _non_negative_int, "must be a non-negative integer"),
    ("loop.save_every", _positive_int, "must be a positive integer"),
    ("loop.eval_every", _positive_int, "must be a positive integer"),
    ("rollout.tasks_per_step", _positive_int, "must be a positive integer"),
    ("rollout.group_size", lambda v: _positive_int(v) and v >= 2,
     "must be an integer >= 2 (group-normalised advantages need at least two rollouts)"),
    ("rollout.max_turns", _positive_int, "must be a positive integer"),
    ("rollout.temperature", lambda v: _number(v) and v >= 0, "must be >= 0 (0 = greedy)"),
    ("rollout.top_p", lambda v: _number(v) and 0 < v <= 1, "must be in (0, 1]"),
    ("rollout.top_k", _non_negative_int, "must be a non-negative integer (0 = off)"),
    ("rollout.max_new_tokens", _positive_int, "must be a positive integer"),
    ("rollout.max_prompt_tokens", _positive_int, "must be a positive integer"),
    ("reward.num_judgments", _positive_int, "must be a positive integer"),
    ("reward.step_weight", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("reward.temperature", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("reward.top_p", lambda v: _number(v) and 0 < v <= 1, "must be in (0, 1]"),
    ("reward.max_new_tokens", _positive_int, "must be a positive integer"),
    ("reward.invalid_judgment_reward", _number, "must be a number"),
    ("reward.action_fallback_penalty", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("reward.balance_labels", lambda v: isinstance(v, bool), "must be true or false"),
    ("reward.band_low", _fraction, "must be in [0, 1]"),
    ("reward.band_high", _fraction, "must be in [0, 1]"),
    ("curriculum.enabled", lambda v: isinstance(v, bool), "must be true or false"),
    ("curriculum.harder_at", _fraction, "must be in [0, 1]"),
    ("curriculum.easier_at", _fraction, "must be in [0, 1]"),
    ("curriculum.accept_low", _fraction, "must be in [0, 1]"),
    ("curriculum.accept_high", _fraction, "must be in [0, 1]"),
    ("curriculum.candidates_per_task", _positive_int, "must be a positive integer"),
    ("curriculum.temperature", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("curriculum.max_new_tokens", _positive_int, "must be a positive integer"),
    ("train.train_reward_model", lambda v: isinstance(v, bool), "must be true or false"),
    ("train.advantage_singleton", lambda v: v in ("raw", "zero"), "must be 'raw' or 'zero'"),
    ("train.policy_acc_low", _fraction, "must be in [0, 1]"),
    ("train.policy_acc_high", _fraction, "must be in [0, 1]"),
    ("ablation", lambda v: v in ABLATIONS, f"must be one of {ABLATIONS}"),
    ("env.kind", lambda v: v in ("alfworld", "textworld", "coding", "osworld"),
     "must be alfworld, textworld, coding or osworld"),
    ("env.num_train_tasks", _positive_int, "must be a positive integer"),
    ("env.num_eval_tasks", _non_negative_int, "must be a non-negative integer"),
    ("env.workers", _non_negative_int, "must be a non-negative integer (0 = one per core)"),
    ("env.step_timeout_s", _positive, "must be > 0"),
    ("env.prompt_style", lambda v: v in ("reference", "compact", "compact_choice"),
     "must be 'reference', 'compact' or 'compact_choice'"),
    ("eval.group_size", _positive_int, "must be a positive integer"),
    ("eval.temperature", lambda v: _number(v) and v >= 0, "must be >= 0 (0 = greedy)"),
    ("eval.max_turns", _positive_int, "must be a positive integer"),
    ("eval.judge_probe_tasks", _non_negative_int, "must be a non-negative integer (0 = no probe)"),
    ("warm_start.enabled", lambda v: isinstance(v, bool), "must be true or false"),
    ("warm_start.num_tasks", _positive_int, "must be a positive integer"),
    ("warm_start.policy_epochs", _non_negative_int, "must be a non-negative integer"),
    ("warm_start.reward_epochs", _non_negative_int, "must be a non-negative integer"),
    ("warm_start.learning_rate", _positive, "must be > 0"),
    ("warm_start.batch_size", _positive_int, "must be a positive integer"),
    ("warm_start.demonstrations", lambda v: v in ("walkthrough", "search"), "must be 'walkthrough' or 'search'"),
    ("warm_start.step_labels", lambda v: v in ("walkthrough", "search"), "must be 'walkthrough' or 'search'"),
    ("curriculum.generator", lambda v: v in ("env_model", "procedural"), "must be 'env_model' or 'procedural'"),
    ("demo.prompt", lambda v: isinstance(v, str), "must be a string"),
    ("demo.max_new_tokens", _positive_int, "must be a positive integer"),
)

_TRAIN_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("learning_rate", _positive, "must be > 0"),
    ("adam_b1", lambda v: _number(v) and 0 <= v < 1, "must be in [0, 1)"),
    ("adam_b2", lambda v: _number(v) and 0 <= v < 1, "must be in [0, 1)"),
    ("adam_eps", _positive, "must be > 0"),
    ("weight_decay", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("max_grad_norm", lambda v: _number(v) and v >= 0, "must be >= 0 (0 = no clipping)"),
    ("clip_eps", lambda v: _number(v) and 0 < v < 1, "must be in (0, 1)"),
    ("kl_beta", lambda v: _number(v) and v >= 0, "must be >= 0"),
    ("updates_per_step", _positive_int, "must be a positive integer"),
    ("ppo_epochs", _positive_int, "must be a positive integer"),
    ("micro_batch_size", _positive_int, "must be a positive integer"),
    ("max_prompt_tokens", _positive_int, "must be a positive integer"),
    ("max_response_tokens", _positive_int, "must be a positive integer"),
    ("schedule", lambda v: v in ("constant", "warmup_cosine"), "must be 'constant' or 'warmup_cosine'"),
    ("warmup_steps", _non_negative_int, "must be a non-negative integer"),
    ("decay_steps", _positive_int, "must be a positive integer"),
    ("min_lr_ratio", _fraction, "must be in [0, 1]"),
    ("aggregation", lambda v: v in ("sequence_mean", "token_mean"), "must be 'sequence_mean' or 'token_mean'"),
    ("reset_optimizer_each_step", lambda v: isinstance(v, bool), "must be true or false"),
    ("overlong_prompt", lambda v: v in ("drop", "truncate_left"), "must be 'drop' or 'truncate_left'"),
    ("append_eos", lambda v: isinstance(v, bool), "must be true or false"),
    ("pack_turns", lambda v: isinstance(v, bool), "must be true or false"),
)

_ORDERED_PAIRS = (
    ("reward.band_low", "reward.band_high"),
    ("curriculum.easier_at", "curriculum.harder_at"),
    ("curriculum.accept_low", "curriculum.accept_high"),
    ("train.policy_acc_low", "train.policy_acc_high"),
)


def _validate_models(cfg: ml_collections.ConfigDict) -> None:
    for role in ("policy", "reward", "environment"):
        for field in ("dtype", "compute_dtype"):
            key = f"model.{role}.{field}"
            if _get(cfg, key) not in DTYPES:
                _fail(key, f"must be one of {DTYPES}", _get(cfg, key))
        path = _get(cfg, f"model.{role}.path")
        if not isinstance(path, str) or not path:
            _fail(f"model.{role}.path", "must be a local Hugging Face directory, 'package:NAME' or 'scratch'", path)


def _validate_mesh(cfg: ml_collections.ConfigDict) -> None:
    shape = dict(_get(cfg, "mesh.shape"))
    for axis, size in shape.items():
        if axis not in sharding.MESH_AXES:
            _fail(f"mesh.shape.{axis}", f"unknown mesh axis; axes are {sharding.MESH_AXES}", size)
        if not (isinstance(size, int) and (size > 0 or size == -1)):
            _fail(f"mesh.shape.{axis}", "must be a positive integer or -1 (all remaining devices)", size)
    if list(shape.values()).count(-1) > 1:
        _fail("mesh.shape", "at most one axis may be -1", shape)
    try:
        sharding.validate_rules(_get(cfg, "sharding.logical_axis_rules"))
    except ValueError as error:
        raise ConfigError(f"config.{error}") from None


def validate(cfg: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the first invalid key."""
    for key, check, message in _SCALAR_CHECKS:
        value = _get(cfg, key)
        if not check(value):
            _fail(key, message, value)
    for role in ("policy", "reward"):
        for field, check, message in _TRAIN_CHECKS:
            key = f"train.{role}.{field}"
            value = _get(cfg, key)
            if not check(value):
                _fail(key, message, value)
    for low_key, high_key in _ORDERED_PAIRS:
        if _get(cfg, low_key) > _get(cfg, high_key):
            _fail(low_key, f"must not exceed config.{high_key} ({_get(cfg, high_key)!r})", _get(cfg, low_key))
    _validate_models(cfg)
    _validate_mesh(cfg)
