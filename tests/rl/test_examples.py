"""Judged rollouts -> policy and reward-model examples, against hand-computed advantages."""


import numpy as np
import pytest

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.examples import SignalConfig, policy_examples, reward_model_examples
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepJudgments, StepRecord

TASK = Task("t", "alfworld", "goal")


def _episode(g, won, judgments, error=None, fallback_steps=()):
    steps = [StepRecord(observation=Observation("o"), prompt_tokens=[g, t], response_tokens=[10 + t],
                        logprobs=[-0.5], response_text="r", finish_reason="stop", action="a",
                        parse_status="closest" if t in fallback_steps else "ok")
             for t in range(len(judgments))]
    scores = np.asarray(judgments, np.int8)
    n = len(judgments)
    return JudgedEpisode(
        Episode(task=TASK, group_index=g, steps=steps, won=won, env_error=error),
        StepJudgments(scores=scores, valid=np.ones_like(scores, bool), texts=(("",) * 3,) * n,
                      prompts=tuple((100 + t,) for t in range(n)),
                      samples=tuple(tuple(((200 + j,), (-0.1,)) for j in range(3)) for _ in range(n))))


@pytest.fixture
def groups():
    won = _episode(0, True, [[1, 1, -1], [1, 1, 1]])
    lost = _episode(1, False, [[-1, -1, -1]])
    crashed = _episode(2, False, [[1, 1, 1]], error="worker died")  # never trained on
    return {"t": [won, lost, crashed]}


def test_policy_advantages_per_step_index(groups):
    # R: won [1 + 1/3, 2], lost [-2]. Step 0: z-score of [4/3, -2] = [1, -1]; step 1: one rollout, raw 2.
    examples, metrics = policy_examples(groups, SignalConfig())
    got = {tuple(e.prompt_ids): e.advantage for e in examples}
    assert got == {(0, 0): pytest.approx(1.0), (0, 1): pytest.approx(2.0), (1, 0): pytest.approx(-1.0)}
    assert metrics["policy_data/examples"] == 3
    # Without the judgments: step 0 z [1, -1], step 1 raw 1; the judgments change no sign.
    assert (metrics["policy_data/steps"], metrics["policy_data/judgment_sign_changes"]) == (3, 0)


def test_the_steps_whose_advantage_sign_the_judgments_decide_are_counted():
    # One step each, R = O + mean(S): won 1 - 1 = 0, lost -1 + 1 = 0, lost -1 - 1 = -2. With judgments the
    # z-scores are [1/sqrt2, 1/sqrt2, -sqrt2]; without, O alone gives [sqrt2, -1/sqrt2, -1/sqrt2]: the second
    # rollout's sign is reversed. A third step that only the last rollout reaches keeps its raw R: -1 + 1 = 0
    # with, -1 without (changed).
    rows = {"t": [_episode(0, True, [[-1, -1, -1], [1, 1, -1]]), _episode(1, False, [[1, 1, 1]]),
                  _episode(2, False, [[-1, -1, -1], [-1, -1, -1], [1, 1, 1]])]}
    examples, metrics = policy_examples(rows, SignalConfig())
    assert [e.advantage for e in examples][:1] == pytest.approx([1 / np.sqrt(2)])
    assert metrics["policy_data/steps"] == 6
    # Step 1: won 4/3 and lost -2 with, 1 and -1 without: the same signs. Step 2: only the lost one, 0 vs -1.
    assert metrics["policy_data/judgment_sign_changes"] == 2
    assert metrics["policy_data/judgment_sign_reversals"] == 1


def test_outcome_only_and_step_only_ablations(groups):
    outcome_only = policy_examples(groups, SignalConfig(step_weight=0.0))[0]
    assert sorted(e.advantage for e in outcome_only) == pytest.approx([-1.0, 1.0, 1.0])   # step 1 raw O = 1
    step_only = policy_examples(groups, SignalConfig(outcome_weight=0.0))[0]
    # R: won [1/3, 1], lost [-1] -> step 0 z-score [1, -1], step 1 raw 1.
    assert sorted(e.advantage for e in step_only) == pytest.approx([-1.0, 1.0, 1.0])


def test_step_only_keeps_the_outcome_in_the_reward_models_label(groups):
    """Fig. 1(2)'s "optimized step-wise reward" row drops O from the policy's reward only: the reward model
    is still trained on R = O + mean(S) (without O it would learn to agree with its own majority)."""
    step_only = SignalConfig(outcome_weight=0.0)
    full = [e.advantage for e in reward_model_examples(groups, SignalConfig())[0]]
    assert [e.advantage for e in reward_model_examples(groups, step_only)[0]] == pytest.approx(full)
    # Step (won, 0) with its label's outcome removed too: R = 1/3 > 0 still, same z-scores; the lost step
    # ([-1, -1, -1]) also agrees: so check a lost step whose votes split, where the sign of R flips.
    lost = _episode(1, False, [[1, 1, -1]])
    rows = {"t": [_episode(0, True, [[1, 1, 1]]), lost]}
    with_outcome = [e.advantage for e in reward_model_examples(rows, SignalConfig())[0]][3:]
    without = [e.advantage for e in reward_model_examples(rows, SignalConfig(reward_model_outcome_weight=0.0))[0]][3:]
    # R = -1 + 1/3 = -2/3: R*S = [-2/3, -2/3, 2/3] -> z [-1/sqrt2, -1/sqrt2, sqrt2]; without O, R = +1/3.
    r2 = np.sqrt(2)
    assert with_outcome == pytest.approx([-1 / r2, -1 / r2, r2])
    assert without == pytest.approx([1 / r2, 1 / r2, -r2])


def test_tasks_out_of_the_accuracy_band_are_skipped(groups):
    all_won = {"t": [_episode(0, True, [[1, 1, 1]]), _episode(1, True, [[1, 1, -1]])]}
    policy, policy_counts = policy_examples(all_won, SignalConfig())
    reward_model, reward_model_counts = reward_model_examples(all_won, SignalConfig())
    assert policy == [] and reward_model == []
    assert policy_counts["policy_data/tasks_out_of_band"] == 1
    assert reward_model_counts["reward_model_data/tasks_out_of_band"] == 1


def test_reward_model_consistency_advantages(groups):
    examples = reward_model_examples(groups, SignalConfig())[0]
    # Step (won, 0): R = 4/3, S = [1, 1, -1] -> R*S z-scored = [1/sqrt2, 1/sqrt2, -sqrt2];
    # the other steps' judgments all agree (zero variance) -> 0.
    nonzero = sorted(e.advantage for e in examples if e.advantage != 0)
    assert nonzero == pytest.approx([-np.sqrt(2), 1 / np.sqrt(2), 1 / np.sqrt(2)])
    assert len(examples) == 9  # 3 judged steps x m = 3 (zero advantages are dropped later, in prepare_examples)
    assert all(list(e.old_logprobs) == [-0.1] for e in examples)


def test_balanced_reward_model_labels_weigh_both_signs_equally():
    # A won rollout (R = 1 + 1/3 > 0 at its first step) and a lost one of 3 steps (R < 0 each; its first step's
    # votes disagree). n+ = 1, n- = 3, n = 4: the positive step weighs 4/2 = 2, the negative ones 4/6 = 2/3.
    won = _episode(0, True, [[1, 1, -1]])
    lost = _episode(1, False, [[1, -1, -1], [-1, -1, -1], [-1, -1, -1]])
    plain = [e.advantage for e in reward_model_examples({"t": [won, lost]}, SignalConfig())[0]]
    balanced = [e.advantage for e in reward_model_examples({"t": [won, lost]}, SignalConfig(balance_labels=True))[0]]
    np.testing.assert_allclose(balanced, np.array(plain) * np.repeat([2.0, 2 / 3, 2 / 3, 2 / 3], 3), atol=1e-6)
    # won step: R*S = 4/3 * [1, 1, -1] -> z [1/sqrt2, 1/sqrt2, -sqrt2]; lost step 0: R = -1 - 1/3, R*S = [-4/3, 4/3,
    # 4/3] -> z [-sqrt2, 1/sqrt2, 1/sqrt2]
    r2 = np.sqrt(2)
    np.testing.assert_allclose(balanced[:6], [2 / r2, 2 / r2, -2 * r2, -2 / 3 * r2, 2 / 3 / r2, 2 / 3 / r2], atol=1e-5)


def test_action_fallback_penalty_lowers_the_policy_reward_of_that_step_only():
    # A parser fallback chose b's action.
    a, b, c = (_episode(0, True, [[1, 1, 1]]), _episode(1, True, [[1, 1, -1]], fallback_steps=(0,)),
               _episode(2, False, [[-1, -1, -1]]))
    groups = {"t": [a, b, c]}

    def zscore(r):
        r = np.asarray(r)
        return list((r - r.mean()) / r.std())

    plain = {e.prompt_ids[0]: e.advantage for e in policy_examples(groups, SignalConfig())[0]}
    assert [plain[g] for g in range(3)] == pytest.approx(zscore([2, 1 + 1 / 3, -2]), rel=1e-5)
    penalised = {e.prompt_ids[0]: e.advantage
                 for e in policy_examples(groups, SignalConfig(action_fallback_penalty=0.5))[0]}
    assert [penalised[g] for g in range(3)] == pytest.approx(zscore([2, 1 + 1 / 3 - 0.5, -2]), rel=1e-5)
    # The reward model's consistency reward keeps the reference's R (no penalty): b's step, R = 4/3.
    rm, _ = reward_model_examples(groups, SignalConfig(action_fallback_penalty=0.5))
    rm = [e.advantage for e in rm if e.advantage]
    assert rm == pytest.approx([1 / np.sqrt(2), 1 / np.sqrt(2), -np.sqrt(2)], rel=1e-5)
