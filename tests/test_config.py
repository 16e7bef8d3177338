"""Config files, command-line overrides, validation errors that name the key, and the main entry point's
one-line errors for every bad input a newcomer meets."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import DEFAULT_CONFIG, RunConfig, load_config, run_config

ROOT = Path(__file__).resolve().parent.parent
SPECS = {"configs/default.py": "alfworld", "configs/default.py:cpu": "alfworld", "configs/default.py:smoke": "alfworld",
         "configs/alfworld.py": "alfworld", "configs/alfworld.py:cpu": "alfworld",
         "configs/alfworld.py:tpu_v5e_64": "alfworld", "configs/alfworld.py:scratch": "alfworld",
         "configs/alfworld.py:smoke": "alfworld", "configs/coding.py": "coding", "configs/coding.py:cpu": "coding",
         "configs/coding.py:smoke": "coding", "configs/textworld.py": "textworld",
         "configs/textworld.py:smoke": "textworld", "configs/learn.py": "textworld",
         "configs/learn.py:smoke": "textworld"}


@pytest.mark.parametrize("spec", SPECS)
def test_every_config_and_variant_is_typed_and_valid(spec):
    cfg = load_config(str(ROOT / spec))
    assert isinstance(cfg, RunConfig) and cfg.scenario == SPECS[spec]
    assert isinstance(cfg.train.policy, TrainConfig) and cfg.config_file.endswith(spec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 1


def test_reference_constants():
    alf = load_config(str(ROOT / "configs/alfworld.py"))
    assert (alf.rollout.group_size, alf.reward.num_judgments, alf.reward.step_weight) == (8, 3, 1.0)
    assert (alf.train.policy.clip_eps, alf.train.policy.kl_beta, alf.train.policy.learning_rate) == (0.2, 0.01, 1e-6)
    assert alf.train.policy.kl_reference == "rollout"   # no reference model: the KL's base is the rollout's
    assert (alf.curriculum.harder_at, alf.curriculum.easier_at) == (0.8, 0.2)
    assert (alf.train.policy_acc_low, alf.train.policy_acc_high) == (1 / 8, 7 / 8)
    assert (alf.reward.band_low, alf.reward.band_high, alf.reward.invalid_judgment_reward) == (0.2, 0.8, -2.0)
    code = load_config(str(ROOT / "configs/coding.py"))
    assert (code.rollout.group_size, code.reward.num_judgments, code.tasks.source) == (32, 16, "humaneval")
    assert code.reward.unit_tests_in_policy_reward is False   # the reference's policy reward: GT tests only


def test_overrides_reach_nested_keys_with_their_types():
    cfg = load_config(str(ROOT / "configs/alfworld.py:cpu"),
                      ["rollout.group_size=5", "train.reward.kl_beta=0", "mesh.shape.tensor=2",
                       "tasks.knobs.num_receptacles=6", "warm_start.enabled=true", "tasks.prompt_style=compact"])
    assert (cfg.rollout.group_size, cfg.train.reward.kl_beta, cfg.mesh.shape["tensor"]) == (5, 0.0, 2)
    assert isinstance(cfg.train.reward.kl_beta, float)
    assert cfg.tasks.knobs["num_receptacles"] == 6 and cfg.warm_start.enabled is True
    assert cfg.tasks.prompt_style == "compact"


@pytest.mark.parametrize("override,key", [
    ("rollout.group_size=1", "config.rollout.group_size"),
    ("reward.band_low=0.9", "config.reward.band_low"),
    ("train.policy.clip_eps=1.5", "config.train.policy.clip_eps"),
    ("train.policy.overlong_prompt=keep", "config.train.policy.overlong_prompt"),
    ("train.reward.kl_reference=sft", "config.train.reward.kl_reference"),
    ("model.policy.dtype=float16", "config.model.policy.dtype"),
    ("mesh.shape.fsdp=0", "config.mesh.shape.fsdp"),
    ("rollout.top_p=0.0", "config.rollout.top_p"),
    ("tasks.step_labels=oracle", "config.tasks.step_labels"),
    ("tasks.task_types=juggle", "config.tasks.task_types"),
    ("tasks.knobs={'rooms': 3}", "config.tasks.knobs.rooms"),
    ("reward.action_fallback_penalty=-1.0", "config.reward.action_fallback_penalty"),
    ("no_such_key=1", "config.no_such_key"),
    ("rollout.gruop_size=3", "config.rollout.gruop_size"),
    ("seed=abc", "config.seed"),
    ("warm_start.enabled=maybe", "config.warm_start.enabled"),
    ("scenario=chess", "config.scenario"),
])
def test_invalid_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match="^" + key.replace(".", r"\.") + ":"):
        load_config(str(ROOT / "configs/alfworld.py"), [override])


def test_unknown_keys_in_a_config_dict_are_named():
    with pytest.raises(ConfigError, match=r"^config\.loop\.total_stepz: unknown key"):
        run_config({"scenario": "alfworld", "loop": {"total_stepz": 3}})


def test_rules_table_is_validated():
    with pytest.raises(ConfigError, match="logical_axis_rules.*'model'"):
        load_config(DEFAULT_CONFIG, ["sharding.logical_axis_rules=(('embed', 'model'),)"])


def test_unknown_variant_fails_with_the_variants():
    with pytest.raises(ConfigError, match="variant.*scratch"):
        load_config(str(ROOT / "configs/alfworld.py:nope"))


def test_optimizer_follows_the_config():
    from rlanything_jax.core.rl.train_state import learning_rate_schedule, make_optimizer

    cfg = load_config(str(ROOT / "configs/alfworld.py"))
    assert float(learning_rate_schedule(cfg.train.policy)(500)) == pytest.approx(1e-6)  # constant, as the reference
    warm = dataclasses.replace(cfg.train.policy, schedule="warmup_cosine", warmup_steps=10, decay_steps=110)
    schedule = learning_rate_schedule(warm)
    assert float(schedule(0)) == 0.0 and float(schedule(10)) == pytest.approx(1e-6) and float(schedule(110)) == 0.0
    make_optimizer(cfg.train.reward)  # builds from the config section as it is


# ---------------------------------------------------------------- the command line


def _main(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", XLA_FLAGS="", JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "rlanything_jax.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_main_prints_the_resolved_config_as_json():
    result = _main("--config=configs/coding.py", "--config.rollout.group_size=12", "--dry_run")
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    assert resolved["rollout"]["group_size"] == 12 and resolved["scenario"] == "coding"
    assert "!!python" not in result.stdout


@pytest.mark.parametrize("args, needles", [
    (("--config.reward.num_judgments=0",), ("config.reward.num_judgments",)),
    (("--config.no_such_key=1",), ("config.no_such_key", "unknown key")),
    (("--config=configs/alfworld.py:nope",), ("variant", "paper")),
    (("--config=configs/nope.py",), ("config.file", "configs/nope.py")),
    (("--config=configs/osworld.py",), ("OSWorld",)),
    (("--confg=x",), ("unknown argument",)),
])
def test_main_reports_bad_input_in_one_line(args, needles):
    _one_line_error(_main(*args), *needles)


def test_main_reports_a_bad_workdir_and_a_missing_model_before_any_work(tmp_path):
    result = _main("--config=configs/alfworld.py:smoke", "--config.workdir=/proc/nope")
    _one_line_error(result, "config.workdir", "/proc/nope")
    result = _main("--config=configs/alfworld.py", f"--config.workdir={tmp_path / 'run'}")
    _one_line_error(result, "checkpoints/Qwen2.5-7B-Instruct")
    assert not (tmp_path / "run" / "games").exists()   # checked before the games are built


@pytest.mark.parametrize("value, episodes_on_cpu, rows", [("auto", False, True), ("true", True, True),
                                                          ("false", False, False)])
def test_rollout_schedule_is_chosen_per_platform(value, episodes_on_cpu, rows):
    """"auto" (the default): episode slots go in waves on CPUs (measured faster there) and refill on
    accelerators; judgment rows refill everywhere. true/false force both."""
    from rlanything_jax.system.assemble import build_scenario, loop_settings

    cfg = load_config(str(ROOT / "configs/default.py:smoke"), [f"rollout.continuous_batching={value}"])
    assert cfg.rollout.refills_episodes("cpu") is episodes_on_cpu
    assert cfg.rollout.refills_episodes("gpu") is (value != "false")
    settings = loop_settings(cfg, build_scenario(cfg))   # these tests run on the CPU backend
    assert settings.rollout.continuous_batching is episodes_on_cpu
    assert settings.judge.continuous_batching is rows
    with pytest.raises(ConfigError, match="continuous_batching: must be true, false or auto"):
        load_config(str(ROOT / "configs/default.py:smoke"), ["rollout.continuous_batching=sometimes"])
