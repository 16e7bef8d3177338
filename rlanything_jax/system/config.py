"""The run's configuration: `RunConfig`, one frozen section of each kind, loaded from ml_collections files.

Config files (`configs/<name>.py[:variant]`) start from `default_config_dict(scenario)`,
which is these dataclasses' defaults, and change what differs; `--config.a.b=v` overrides
any key from the command line. `load_config` turns the result into a `RunConfig`: every
section validates itself in `__post_init__`, an unknown key or a bad value raises
`ConfigError` naming the key (`config.train.policy.learning_rate: must be > 0 (got -1)`),
and each key keeps its name from the file to the code that reads it. The sections are in
`system/config_sections.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from rlanything_jax.core import validation
from rlanything_jax.core.distributed import DistributedConfig
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import scenario_names, scenario_options
from rlanything_jax.system.config_sections import (
    CurriculumConfig,
    EnvConfig,
    EvalConfig,
    LoopConfig,
    MeshConfig,
    ModelsConfig,
    RewardConfig,
    RolloutSection,
    ShardingConfig,
    TrainSection,
    WarmStartConfig,
)

ROOT = Path(__file__).resolve().parents[2]   # the checkout: rlanything_jax/system/config.py
DEFAULT_CONFIG = str(ROOT / "configs" / "default.py")


@dataclasses.dataclass(frozen=True)
class Ablation:
    """One row of the paper's Table 1 / Fig. 1 as switches: what of RLAnything a run keeps."""

    use_reward_model: bool = True          # False: nothing is judged, the policy learns from outcomes only
    outcome_in_policy_reward: bool = True  # False: the policy's reward is the step-wise term only
    train_reward_model: bool = True        # False: the reward model stays as warm-started
    adapt_environment: bool = True         # False: the tasks stay as built


# `config.ablation` -> its switches: decoded here once (the loop's settings and the planner read them).
ABLATIONS = {
    "rlanything": Ablation(),
    "outcome_only": Ablation(use_reward_model=False, train_reward_model=False, adapt_environment=False),
    "fixed_reward_model": Ablation(train_reward_model=False, adapt_environment=False),
    "policy_reward": Ablation(adapt_environment=False),
    "step_only": Ablation(outcome_in_policy_reward=False, adapt_environment=False),
}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    scenario: str                    # a registered scenario (rlanything_jax.scenarios)
    seed: int = 10086
    workdir: str = "runs/run"
    ablation: str = "rlanything"     # or outcome_only, fixed_reward_model, policy_reward, step_only (Table 1, Fig. 1)
    model: ModelsConfig = ModelsConfig()
    mesh: MeshConfig = MeshConfig()
    sharding: ShardingConfig = ShardingConfig()
    loop: LoopConfig = LoopConfig()
    rollout: RolloutSection = RolloutSection()
    reward: RewardConfig = RewardConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    train: TrainSection = TrainSection()
    env: EnvConfig = EnvConfig()
    tasks: Any = None                # the scenario's own options dataclass (scenarios.scenario_options)
    eval: EvalConfig = EvalConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    distributed: DistributedConfig = DistributedConfig()   # several processes (hosts): rlanything_jax.core.distributed
    config_file: str = ""            # where the config came from (`path[:variant]`), for the run's summary

    @property
    def ablation_switches(self) -> Ablation:
        return ABLATIONS[self.ablation]

    def __post_init__(self):
        validation.check("scenario", isinstance(self.scenario, str) and self.scenario in scenario_names(),
                         f"must be a registered scenario ({', '.join(scenario_names())})", self.scenario)
        validation.non_negative_int("seed", self.seed)
        validation.check("workdir", isinstance(self.workdir, str) and bool(self.workdir), "must be a non-empty path",
                         self.workdir)
        validation.one_of("ablation", self.ablation, ABLATIONS)
        if self.model.reward.share_base:
            policy, reward = self.model.policy, self.model.reward
            same = dataclasses.replace(reward, share_base=False) == policy and not reward.path.startswith("scratch")
            validation.check("model.reward.share_base",
                             same and self.train.policy.lora.enabled and self.train.reward.lora.enabled,
                             "needs model.reward equal to model.policy (a pretrained path, not scratch) and "
                             "train.policy.lora.rank, train.reward.lora.rank > 0", True)
        if self.tasks is None:
            object.__setattr__(self, "tasks", scenario_options(self.scenario))


# ---------------------------------------------------------------- ConfigDict <-> RunConfig


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def default_config_dict(scenario: str) -> ml_collections.ConfigDict:
    """Every section's defaults, with the scenario's task options: what config files start from."""
    plain = _to_plain(RunConfig(scenario=scenario, workdir=f"runs/{scenario}"))
    return ml_collections.ConfigDict(plain)


def _build(cls: type, values: Mapping[str, Any], path: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{path}{key}", f"unknown key; keys here: {', '.join(sorted(known))}", values[key])
    kwargs = {}
    for name, value in values.items():
        kind = hints.get(name)
        if dataclasses.is_dataclass(kind) and isinstance(value, Mapping):
            value = _build(kind, value, f"{path}{name}.")
        elif kind is tuple and isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise error.within(path.rstrip(".")) from None


def run_config(cfg: ml_collections.ConfigDict | Mapping[str, Any], config_file: str = "") -> RunConfig:
    """The typed config of a ConfigDict (as a config file and overrides left it); raises ConfigError."""
    values = cfg.to_dict() if isinstance(cfg, ml_collections.ConfigDict) else dict(cfg)
    tasks = values.pop("tasks", None)
    scenario = values.get("scenario")
    if not (isinstance(scenario, str) and scenario in scenario_names()):
        raise ConfigError("scenario", f"must be a registered scenario ({', '.join(scenario_names())})", scenario)
    values["tasks"] = scenario_options(scenario, tasks)
    if config_file:
        values["config_file"] = config_file
    return _build(RunConfig, values, "")


# ---------------------------------------------------------------- files and overrides


def load_config_dict(spec: str = DEFAULT_CONFIG) -> ml_collections.ConfigDict:
    """Runs `get_config(variant)` of the file in `path[:variant]`."""
    path_text, _, variant = spec.partition(":")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError("file", "no such config file", path_text)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))   # config files import the `configs` package beside this one
    module_spec = importlib.util.spec_from_file_location(f"_rlanything_config_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(variant) if variant else module.get_config()


def _parse_value(key: str, text: str, current: Any) -> Any:
    if isinstance(current, bool):
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ConfigError(key, "must be true or false", text)
    if isinstance(current, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ConfigError(key, f"cannot read {text!r} as a {type(current).__name__}", show_value=False) from None
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


def apply_override(cfg: ml_collections.ConfigDict, override: str) -> None:
    """`a.b=v`: sets an existing key, reading v as the type of its current value."""
    key, sep, text = override.partition("=")
    if not sep:
        raise ConfigError(key, "an override needs a value: --config.KEY=VALUE", show_value=False)
    node: Any = cfg
    parts = key.split(".")
    for depth, part in enumerate(parts):
        container_keys = list(node.keys()) if hasattr(node, "keys") else []
        if part not in container_keys:
            where = ".".join(parts[:depth]) or "the config"
            raise ConfigError(key, f"unknown key ({where} has: {', '.join(sorted(map(str, container_keys)))})",
                              show_value=False)
        if depth < len(parts) - 1:
            node = node[part]
    current = node[parts[-1]]
    value = _parse_value(key, text, current)
    if isinstance(node, ml_collections.ConfigDict):
        with node.ignore_type():
            node[parts[-1]] = value
    else:
        node[parts[-1]] = value


def load_config(spec: str = DEFAULT_CONFIG, overrides: Sequence[str] = ()) -> RunConfig:
    """`path[:variant]` with `a.b=v` overrides, as the command line gives them, validated."""
    cfg = load_config_dict(spec)
    for override in overrides:
        apply_override(cfg, override)
    return run_config(cfg, config_file=spec)
