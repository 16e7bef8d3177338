"""The ablation rows switch exactly the components the paper's Table 1 and Fig. 1 name; the scenario's
reward-model use and expert reach the loop."""

from pathlib import Path

import pytest

from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.reward_models.step_judging import JUDGE_STEPS
from rlanything_jax.agents.reward_models.unit_test_writing import WRITE_UNIT_TESTS
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.system.assemble import build_scenario, loop_settings, reward_model_role
from rlanything_jax.system.config import load_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("row, judge, train_rm, adapt, outcome_w, step_w", [
    ("outcome_only", False, False, False, 1.0, 0.0),
    ("fixed_reward_model", True, False, False, 1.0, 1.0),
    ("policy_reward", True, True, False, 1.0, 1.0),
    ("rlanything", True, True, True, 1.0, 1.0),
    ("step_only", True, True, False, 0.0, 1.0),
])
def test_ablation_rows(row, judge, train_rm, adapt, outcome_w, step_w):
    cfg = load_config(str(ROOT / "configs/alfworld.py:scratch"), [f"ablation={row}"])
    settings = loop_settings(cfg, build_scenario(cfg))
    judges = settings.use_reward_model and reward_model_role(cfg, build_scenario(cfg)).name == JUDGE_STEPS
    assert (judges, settings.train_reward_model, settings.adapt_environment) == (judge, train_rm, adapt)
    assert (settings.signal.outcome_weight, settings.signal.step_weight) == (outcome_w, step_w)
    assert settings.signal.reward_model_outcome_weight == 1.0   # the reward model's label keeps O in every row
    assert settings.rollout.group_size == cfg.rollout.group_size and settings.judge.num_judgments == 3


def test_coding_asks_for_an_easier_task_below_its_threshold_only():
    """The reference's coding rewrites easier at accuracy < 0.2; its text games and desktops at <= 0.2."""
    for config, inclusive in (("coding.py:paper", False), ("coding.py:cpu", False), ("alfworld.py:paper", True)):
        cfg = load_config(str(ROOT / "configs" / config))
        assert loop_settings(cfg, build_scenario(cfg)).easier_inclusive is inclusive, config
    assert load_config(str(ROOT / "configs/osworld.py:paper")).curriculum.easier_inclusive


def test_coding_reward_model_writes_unit_tests_unless_outcome_only():
    cfg = load_config(str(ROOT / "configs/coding.py:cpu"))
    assert loop_settings(cfg, build_scenario(cfg)).use_reward_model
    assert reward_model_role(cfg, build_scenario(cfg)).name == WRITE_UNIT_TESTS
    cfg = load_config(str(ROOT / "configs/coding.py:cpu"), ["ablation=outcome_only"])
    assert not loop_settings(cfg, build_scenario(cfg)).use_reward_model
    cfg = load_config(str(ROOT / "configs/alfworld.py:cpu"))
    assert loop_settings(cfg, build_scenario(cfg)).use_reward_model
    assert reward_model_role(cfg, build_scenario(cfg)).name == JUDGE_STEPS


def test_expert_step_labels(tmp_path):
    from rlanything_jax.scenarios.alfworld import env as alfworld
    from rlanything_jax.scenarios.alfworld.knobs import GameKnobs

    walkthrough_expert = make_scenario("alfworld", {"step_labels": "walkthrough"}).expert
    search_expert = make_scenario("alfworld", {"step_labels": "search"}).expert

    task = alfworld.make_task(0, "pick_and_place_simple", GameKnobs(num_receptacles=4, num_distractors=0), tmp_path)
    plan = alfworld.expert_actions(task)
    actions = [plan[0], "look", plan[0], plan[1]]   # progress, no progress, a repeat, progress
    steps = [StepRecord(Observation("o"), [], [], [], "", "stop", action, "ok") for action in actions]
    episode = Episode(task=task, group_index=0, steps=steps)
    assert [walkthrough_expert.step_label(episode, t) for t in range(4)] == [1, -1, -1, 1]
    # The goal receptacle first: a wrong guess for the walkthrough's expert, a fair look for the searcher.
    goal = next(a for a in plan[1:] if a.startswith("go to "))
    steps = [StepRecord(Observation("o"), [], [], [], "", "stop", action, "ok") for action in
             [goal, "look", goal, plan[0]]]
    episode = Episode(task=task, group_index=0, steps=steps)
    assert [walkthrough_expert.step_label(episode, t) for t in range(4)] == [-1, -1, -1, 1]
    assert [search_expert.step_label(episode, t) for t in range(4)] == [1, -1, -1, 1]
    assert make_scenario("coding").expert.step_label(episode, 0) is None   # its reward model judges no steps
