"""The numbers the README reports, on hand-made inputs whose right answers are worked out by hand below:
the reward model's step and outcome accuracy (`loop.episode_metrics`), held-out success (`loop.evaluate`)
and the reward model's fixed probe (`probe.probe_accuracy`) on a real generated ALFWorld game."""

import dataclasses
import re

import numpy as np
import pytest

from rlanything_jax.agents.envs.base import TASK_GROUP, Observation, Task, make_env
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models.probe import JudgeProbe, build_judge_probe, probe_accuracy
from rlanything_jax.agents.rollout import RolloutConfig
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepJudgments, StepRecord
from rlanything_jax.core.sampling.stops import Completion
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.text_games.expert import TextGameExpert
from rlanything_jax.system.evaluation import held_out, loop_metrics
from rlanything_jax.system.loop import EnvironmentFailure, episode_metrics

# ---------------------------------------------------------------- reward-model accuracy on episodes

PLANS = {"pen": ["go to desk 1", "take pen 1 from desk 1", "go to shelf 1", "move pen 1 to shelf 1"],
         "egg": ["open fridge 1", "take egg 1 from fridge 1"]}
T, F = True, False


def _episode(task_id, actions, won):
    task = Task(task_id, "text", f"the {task_id} task")
    steps = [StepRecord(observation=Observation(f"before {a}", tuple(PLANS[task_id]) + ("look",)), prompt_tokens=(),
                        response_tokens=(1,), logprobs=(0.0,), response_text=a, finish_reason="stop", action=a,
                        parse_status="ok")
             for a in actions]
    return Episode(task, 0, tuple(steps), won=won, end_reason="won" if won else "max_steps")


def _judgments(scores, valid):
    scores, valid = np.array(scores, np.int8), np.array(valid, bool)
    n, m = scores.shape
    return StepJudgments(scores=scores, valid=valid, texts=(("",) * m,) * n, prompts=((),) * n,
                         samples=((((), ()),) * m,) * n)


# An invalid judgment counts as 0 (wrong against either label) whatever score it carries: the 1s marked F below.
JUDGED = [
    # pen, won, the walkthrough itself: labels +1 +1 +1 +1.
    # hits [1,1,0] [1,0,1] [0,0,1] [1,1,1] = 8/12; mean votes (1/3 + 2/3 - 1/3 + 1) / 4 = 5/12 > 0: says won, right.
    JudgedEpisode(_episode("pen", PLANS["pen"], won=True),
                  _judgments([[1, 1, -1], [1, 1, 1], [-1, -1, 1], [1, 1, 1]],
                             [[T, T, T], [T, F, T], [T, T, T], [T, T, T]])),
    # pen, lost: "look" -1 (the next step is "go to desk 1"), "go to shelf 1" -1 (not the next step),
    # "go to desk 1" +1. hits [1,1,0] [0,1,1] [1,1,0] = 6/9; mean votes (-1/3 - 2/3 + 1/3) / 3 = -2/9: says lost, right.
    JudgedEpisode(_episode("pen", ["look", "go to shelf 1", "go to desk 1"], won=False),
                  _judgments([[-1, -1, 1], [1, -1, -1], [1, 1, -1]], [[T, T, T], [F, T, T], [T, T, T]])),
    # egg, won: labels +1 +1. hits [0,0,1] [1,0,0] = 2/6; mean votes (-1/3 - 1/3) / 2 < 0: says lost, wrong.
    JudgedEpisode(_episode("egg", PLANS["egg"], won=True),
                  _judgments([[-1, -1, 1], [1, -1, -1]], [[T, T, T], [T, T, T]])),
    # egg, lost, not judged: counts for success and steps only.
    JudgedEpisode(_episode("egg", ["look"], won=False), None),
    # egg, lost: "take egg 1 from fridge 1" -1 (the fridge is not open yet), then "open fridge 1" +1.
    # masked votes [1,-1,0] [-1,1,0]: hits vs -1 [0,1,0], vs +1 [0,1,0] = 2/6; mean votes exactly 0: not "> 0",
    # says lost, right.
    JudgedEpisode(_episode("egg", ["take egg 1 from fridge 1", "open fridge 1"], won=False),
                  _judgments([[1, -1, 1], [-1, 1, 1]], [[T, T, F], [T, T, F]])),
]


def _walkthrough_expert():
    return TextGameExpert(walkthrough=lambda task: PLANS[task.task_id], step_labels="walkthrough")


def test_episode_metrics_against_the_walkthrough_expert():
    metrics = episode_metrics(JUDGED, _walkthrough_expert().step_label)
    assert metrics == pytest.approx({
        "rollout/success_rate": 0.4,              # 2 of 5 won
        "rollout/mean_steps": 2.4,                # (4 + 3 + 2 + 1 + 2) / 5
        "reward_model/step_accuracy": 18 / 33,    # (8 + 6 + 2 + 2) / (12 + 9 + 6 + 6) judgments
        "reward_model/outcome_accuracy": 0.75,    # 3 of the 4 judged episodes
    }, abs=1e-12)


def test_steps_without_an_expert_label_are_left_out():
    expert = _walkthrough_expert()

    def first_step_unknown(episode, t):
        return None if t == 0 else expert.step_label(episode, t)

    metrics = episode_metrics(JUDGED, first_step_unknown)
    # Without every first step: (8 - 2) + (6 - 2) + (2 - 1) + (2 - 1) hits of 9 + 6 + 3 + 3 judgments.
    assert metrics["reward_model/step_accuracy"] == pytest.approx(12 / 21, abs=1e-12)
    assert "reward_model/step_accuracy" not in episode_metrics(JUDGED, None)
    assert episode_metrics([], expert.step_label) == {}


# ---------------------------------------------------------------- held-out evaluation


@dataclasses.dataclass
class ScriptedRollouts:
    """`loop.Rollouts` playing scripted outcomes: per task, (won, environment error) of each rollout."""

    outcomes: dict[str, list[tuple[bool, str | None]]]
    calls: list[list[str]] = dataclasses.field(default_factory=list)

    def play(self, tasks, config, seed):
        self.calls.append([t.task_id for t in tasks])
        step = _episode("pen", ["look"], won=False).steps
        return [Episode(t, g, () if error else step, won=won, end_reason="env_error" if error else "done",
                        env_error=error)
                for t in tasks for g, (won, error) in enumerate(self.outcomes[t.task_id][:config.group_size])], {}

    def update_params(self, params):
        pass


def evaluate(policy, tasks, rollout, tasks_per_call=0):
    """The training loop's held-out figures (`run._evaluate`)."""
    return loop_metrics(held_out(policy, tasks, rollout, 0, tasks_per_call)[1])


def test_held_out_success_counts_played_episodes_in_chunks():
    W, L, E = (True, None), (False, None), (False, "worker died")
    outcomes = {"t0": [W, L], "t1": [L, L], "t2": [W, W], "t3": [W, E], "t4": [L, W]}
    tasks = [Task(name, "text", "") for name in outcomes]
    policy = ScriptedRollouts(outcomes)
    result = evaluate(policy, tasks, RolloutConfig(continuous_batching=True, group_size=2), tasks_per_call=2)
    # 10 rollouts, one failed in the environment (not played): 5 wins (t0 1, t2 2, t3 1, t4 1) of 9.
    assert result == {"eval/success_rate": pytest.approx(5 / 9, abs=1e-12), "eval/episodes": 9}
    assert policy.calls == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert evaluate(ScriptedRollouts(outcomes), tasks, RolloutConfig(continuous_batching=True,
                                                                     group_size=1))["eval/success_rate"] == 0.6
    with pytest.raises(EnvironmentFailure, match="worker died"):
        evaluate(ScriptedRollouts({"t": [E, E]}), [Task("t", "text", "")], RolloutConfig(continuous_batching=True,
                                                                                         group_size=2))


def test_held_out_success_per_task_group():
    W, L, E = (True, None), (False, None), (False, "worker died")
    outcomes = {"a1": [W, L], "a2": [W, W], "b1": [L, E], "c1": [W, W]}
    groups = {"a1": "os", "a2": "os", "b1": "vlc"}   # c1 names no group
    tasks = [Task(name, "text", "", {TASK_GROUP: groups[name]} if name in groups else {}) for name in outcomes]
    result = loop_metrics(held_out(ScriptedRollouts(outcomes), tasks, RolloutConfig(continuous_batching=True,
                                                                                    group_size=2), 0)[1])
    # os: 3 wins of 4; vlc: 0 of 1 played (one environment error); c1 counts only in the total: 5 wins of 7.
    assert result == {"eval/success_rate": pytest.approx(5 / 7, abs=1e-12), "eval/episodes": 7,
                      "eval/success_rate/os": 0.75, "eval/success_rate/vlc": 0.0}


# ---------------------------------------------------------------- the reward model's probe

# The README's run: easy pick-and-place games, compact prompts, searching demonstrations and search labels.
SCENARIO = make_scenario("alfworld", {"prompt_style": "compact", "demonstrations": "search", "step_labels": "search"})
KNOBS = alfworld.GameKnobs(num_receptacles=4, num_distractors=0, target_instances=1)
# Game 11: "put some keychain on drawer"; a cabinet 1, a drawer 2, a drawer 1 and a sidetable 1. The keychain is
# on the sidetable; both drawers start closed.
WALKTHROUGH = ["go to sidetable 1", "take keychain 1 from sidetable 1", "go to drawer 2", "open drawer 2",
               "move keychain 1 to drawer 2"]
SEARCH = ["go to drawer 1", "open drawer 1", "go to drawer 2", "open drawer 2"]   # the expert's detour (probe seed 5)
# Each probe prompt: (actions done before, the judged action, its label written from the walkthrough). The search
# expert's rubric: until the keychain's receptacle is reached, going somewhere not visited yet is good, and so is
# opening the closed receptacle one stands at (then the only good step); once it is found, the walkthrough's next
# step not yet done is good (and going back to where it happens); everything else is bad.
PROBE_STEPS = [
    ([], "go to drawer 1", 1),                        # searching: a receptacle not visited yet
    ([], "look", -1),
    (SEARCH[:1], "open drawer 1", 1),                 # at a closed drawer: opening it is the only good step
    (SEARCH[:1], "examine drawer 1", -1),
    (SEARCH[:2], "go to drawer 2", 1),                # not visited yet
    (SEARCH[:2], "look", -1),
    (SEARCH[:3], "open drawer 2", 1),                 # at a closed drawer
    (SEARCH[:3], "examine drawer 2", -1),
    (SEARCH, "go to sidetable 1", 1),                 # not visited yet (and the keychain is there)
    (SEARCH, "help", -1),
    (SEARCH + WALKTHROUGH[:1], "take keychain 1 from sidetable 1", 1),   # found: the walkthrough's next step
    (SEARCH + WALKTHROUGH[:1], "examine sidetable 1", -1),
    (SEARCH + WALKTHROUGH[:2], "go to drawer 2", 1),                     # the walkthrough's next step
    (SEARCH + WALKTHROUGH[:2], "move keychain 1 to sidetable 1", -1),    # puts it back
    # drawer 2 was opened during the search and is still open: this move wins the game.
    (SEARCH + WALKTHROUGH[:3], "move keychain 1 to drawer 2", 1),
    (SEARCH + WALKTHROUGH[:3], "go to drawer 1", -1),                    # away from the goal
]
HAND_LABELS = tuple(label for _, _, label in PROBE_STEPS)


def _shown(tokenizer, prompt):
    """(earlier actions, judged action) as the compact judge prompt writes them."""
    text = tokenizer.decode(list(prompt))
    done = re.search(r"done: (.*)", text).group(1)
    return ([] if done == "nothing" else done.split("; ")), re.search(r"action: (.*)", text).group(1)


class GoingIsGood:
    """A stand-in reward model (the probe's accounting is under test, not a model): "go to" steps are good,
    "open" steps get one good and one unparsable answer, everything else is bad, for each of the m = 2 samples."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, max_new_tokens, strategy, seed, num_samples):
        assert num_samples == 2
        out = []
        for prompt in prompts:
            _, action = _shown(self.tokenizer, prompt)
            answers = {"go to": ["\\boxed{1}"] * 2, "open ": ["\\boxed{1}", "no idea"]}.get(
                next((k for k in ("go to", "open ") if action.startswith(k)), ""), ["\\boxed{-1}"] * 2)
            out += [Completion([1], [0.0], text, "stop") for text in answers]
        return out


# Per prompt, the share of the 2 answers equal to the hand label (an unparsable one is wrong):
#   go to drawer 1 +1: 1    look -1: 1    open drawer 1 +1: 1/2    examine -1: 1    go to drawer 2 +1: 1
#   look -1: 1    open drawer 2 +1: 1/2    examine -1: 1    go to sidetable 1 +1: 1    help -1: 1
#   take keychain +1: 0    examine -1: 1    go to drawer 2 +1: 1    move to sidetable -1: 1
#   move to drawer 2 +1: 0    go to drawer 1 -1: 0
EXPECTED_PROBE = {
    "reward_model/probe_step_accuracy": 12 / 16,
    "reward_model/probe_valid": 30 / 32,           # the two "open" prompts have one unparsable answer each
    "reward_model/probe_accuracy_good": 5 / 8,     # 1 + 1/2 + 1 + 1/2 + 1 + 0 + 1 + 0 over the 8 good steps
    "reward_model/probe_accuracy_bad": 7 / 8,      # all but "go to drawer 1" after the keychain is in hand
}
PROBE_CONFIG = JudgeConfig(continuous_batching=True,
                           num_judgments=2, batch_size=6)   # 3 prompts a call, sorted by length inside


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    task = alfworld.make_task(11, "pick_and_place_simple", KNOBS, str(tmp_path_factory.mktemp("probe_game")))
    return task, make_env("alfworld")


@pytest.fixture(scope="module")
def probe(game, qwen25_tokenizer):
    task, env = game
    return build_judge_probe([task], SCENARIO, qwen25_tokenizer, env, seed=5)


def test_the_probe_shows_the_steps_written_above(game, probe, qwen25_tokenizer):
    task, _ = game
    assert task.goal == "put some keychain on drawer." and alfworld.expert_actions(task) == WALKTHROUGH
    assert [_shown(qwen25_tokenizer, p) for p in probe.prompts] == [(done, a) for done, a, _ in PROBE_STEPS]


def test_probe_accuracy_against_the_hand_written_labels(probe, qwen25_tokenizer):
    hand_labelled = JudgeProbe(probe.prompts, HAND_LABELS)
    result = probe_accuracy(GoingIsGood(qwen25_tokenizer), SCENARIO.prompts, hand_labelled, PROBE_CONFIG, 0)
    assert result.pop("time/judge_probe_s") >= 0
    assert result == pytest.approx(EXPECTED_PROBE, abs=1e-12)


def test_the_reported_probe_uses_the_hand_written_labels(probe, qwen25_tokenizer):
    assert probe.labels == HAND_LABELS
    result = probe_accuracy(GoingIsGood(qwen25_tokenizer), SCENARIO.prompts, probe, PROBE_CONFIG, 0)
    result.pop("time/judge_probe_s")
    assert result == pytest.approx(EXPECTED_PROBE, abs=1e-12)
