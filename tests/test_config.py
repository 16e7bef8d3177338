"""Config files, command-line overrides, validation errors, and the main entry point."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlanything_jax.config import DEFAULT_CONFIG, ConfigError, load_config, validate

ROOT = Path(__file__).resolve().parent.parent
SPECS = ["configs/default.py", "configs/default.py:cpu", "configs/alfworld.py", "configs/alfworld.py:cpu",
         "configs/alfworld.py:tpu_v5e_64", "configs/osworld.py", "configs/osworld.py:cpu", "configs/coding.py",
         "configs/coding.py:cpu"]


@pytest.mark.parametrize("spec", SPECS)
def test_every_config_and_variant_validates(spec):
    cfg = load_config(str(ROOT / spec))
    assert cfg.scenario == Path(spec.split(":")[0]).stem


def test_reference_constants():
    alf = load_config(str(ROOT / "configs/alfworld.py"))
    assert (alf.rollout.group_size, alf.reward.num_judgments, alf.reward.step_weight) == (8, 3, 1.0)
    assert (alf.train.policy.clip_eps, alf.train.policy.kl_beta, alf.train.policy.learning_rate) == (0.2, 0.01, 1e-6)
    assert (alf.curriculum.harder_at, alf.curriculum.easier_at) == (0.8, 0.2)
    assert (alf.train.policy_acc_low, alf.train.policy_acc_high) == (1 / 8, 7 / 8)
    osw = load_config(str(ROOT / "configs/osworld.py"))
    assert (osw.rollout.max_turns, osw.train.reward.updates_per_step, osw.train.policy_acc_low) == (30, 2, 0.0)
    code = load_config(str(ROOT / "configs/coding.py"))
    assert (code.rollout.group_size, code.reward.num_judgments) == (32, 16)


def test_overrides_reach_nested_keys():
    cfg = load_config(str(ROOT / "configs/alfworld.py:cpu"),
                      ["rollout.group_size=5", "train.reward.kl_beta=0.0", "mesh.shape.tensor=2"])
    assert (cfg.rollout.group_size, cfg.train.reward.kl_beta, cfg.mesh.shape.tensor) == (5, 0.0, 2)


@pytest.mark.parametrize("override,key", [
    ("rollout.group_size=1", "config.rollout.group_size"),
    ("reward.band_low=0.9", "config.reward.band_low"),
    ("train.policy.clip_eps=1.5", "config.train.policy.clip_eps"),
    ("model.policy.dtype=float16", "config.model.policy.dtype"),
    ("mesh.shape.fsdp=0", "config.mesh.shape.fsdp"),
    ("rollout.top_p=0.0", "config.rollout.top_p"),
    ("warm_start.step_labels=oracle", "config.warm_start.step_labels"),
    ("reward.action_fallback_penalty=-1.0", "config.reward.action_fallback_penalty"),
])
def test_invalid_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(str(ROOT / "configs/alfworld.py"), [override])


def test_rules_table_is_validated():
    cfg = load_config(DEFAULT_CONFIG)
    cfg.sharding.logical_axis_rules = (("embed", "model"),)
    with pytest.raises(ConfigError, match="logical_axis_rules.*'model'"):
        validate(cfg)


def test_unknown_variant_and_misspelt_key_fail():
    with pytest.raises(Exception, match="variant 'nope'"):
        load_config(str(ROOT / "configs/alfworld.py:nope"))
    with pytest.raises(Exception, match="group_size"):
        load_config(str(ROOT / "configs/alfworld.py"), ["rollout.gruop_size=3"])


def _main(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", XLA_FLAGS="", JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "rlanything_jax.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_main_prints_the_resolved_config():
    result = _main("--config=configs/coding.py", "--config.rollout.group_size=12", "--dry_run")
    assert result.returncode == 0, result.stderr
    assert "group_size: 12" in result.stdout and "scenario: coding" in result.stdout


def test_main_reports_an_invalid_key_without_a_traceback():
    result = _main("--config=configs/alfworld.py", "--config.reward.num_judgments=0")
    assert result.returncode == 2
    assert "config.reward.num_judgments" in result.stderr and "Traceback" not in result.stderr


def test_main_reports_a_missing_model_directory():
    result = _main("--config=configs/alfworld.py", "--config.demo.prompt=hi")
    assert result.returncode == 1
    assert "checkpoints/Qwen2.5-7B-Instruct" in result.stderr and "Traceback" not in result.stderr
    result = _main("--config=configs/coding.py", "--config.env.num_train_tasks=2", "--config.env.num_eval_tasks=1",
                   "--config.workdir=" + str(ROOT / "runs" / "missing-model-test"))
    assert result.returncode == 1
    assert "checkpoints/Qwen2.5-7B-Instruct" in result.stderr and "Traceback" not in result.stderr


def test_main_says_osworld_is_not_there_yet():
    result = _main("--config=configs/osworld.py", "--config.workdir=" + str(ROOT / "runs" / "osworld-test"))
    assert result.returncode == 1
    assert "OSWorld" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_main_demo_answers_with_the_packaged_model():
    result = _main("--config=configs/alfworld.py:cpu", "--config.demo.max_new_tokens=12",
                   "--config.demo.prompt=What is the capital of France? Answer in one sentence.")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "assistant: " in result.stdout
    answer = result.stdout.split("assistant: ", 1)[1]
    assert "Paris" in answer


def test_train_options_are_validated():
    cfg = load_config(str(ROOT / "configs/alfworld.py"), ["train.policy.schedule=warmup_cosine",
                                                            "train.reward.aggregation=token_mean"])
    assert cfg.train.policy.schedule == "warmup_cosine" and cfg.train.reward.aggregation == "token_mean"
    with pytest.raises(ConfigError, match=r"config\.train\.policy\.overlong_prompt"):
        load_config(str(ROOT / "configs/alfworld.py"), ["train.policy.overlong_prompt=keep"])


def test_optimizer_follows_the_config():
    from rlanything_jax.rl.train_state import learning_rate_schedule, make_optimizer

    cfg = load_config(str(ROOT / "configs/alfworld.py"))
    assert float(learning_rate_schedule(cfg.train.policy)(500)) == pytest.approx(1e-6)  # constant, as the reference
    warm = dict(cfg.train.policy.to_dict(), schedule="warmup_cosine", warmup_steps=10, decay_steps=110)
    schedule = learning_rate_schedule(warm)
    assert float(schedule(0)) == 0.0 and float(schedule(10)) == pytest.approx(1e-6) and float(schedule(110)) == 0.0
    make_optimizer(cfg.train.reward)  # builds from the config section as it is
