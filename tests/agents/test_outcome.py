"""The outcome O a rollout hands on: +1 won / -1 lost whatever score the environment reports (OSWorld's
evaluator score, TextWorld's points), the graded outcome only where the task grades it (coding), as the
reference computes it (ALGORITHM.md 2.1, 5.3)."""


import numpy as np
import pytest

from rlanything_jax.agents.envs.base import InProcessRunner, Observation, StepResult, Task, register_env
from rlanything_jax.agents.examples import SignalConfig, reward_model_examples
from rlanything_jax.agents.rollout import RolloutConfig, play_episodes
from rlanything_jax.agents.trajectory import JudgedEpisode, StepJudgments
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.scenarios.text_games.reference import ReferencePrompts
from rlanything_jax.scenarios.textworld.env import TextWorldKnobs, expert_actions, make_task
from tests import hf_reference


class ScoredEnv:
    """Ends at its first step with the payload's score, as `OsWorldEnv` reports its evaluator's: won iff
    the score is > 0 (the reference's success), the 0-1 score itself in `info`. With "graded", the score is
    also the step's graded outcome, as the coding environment reports its pass fraction."""

    def reset(self, task: Task) -> Observation:
        self.task = task
        return Observation("Your task is to: finish.", ("finish",))

    def step(self, action: str) -> StepResult:
        score = float(self.task.payload["score"])
        return StepResult(Observation("done", ("finish",)), done=True, won=score > 0, info={"score": score},
                          graded_outcome=score if self.task.payload.get("graded") else None)

    def close(self) -> None:
        pass


register_env("scored_for_outcome_test", ScoredEnv)


@pytest.fixture(scope="module")
def sampler(tmp_path_factory, qwen25_tokenizer):
    path = tmp_path_factory.mktemp("outcome_model")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size, tie_word_embeddings=True)
    return Sampler(load_pretrained(path), tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=4096))


def _play(sampler, tasks, override=None, max_turns=2):
    config = RolloutConfig(continuous_batching=True,
                           group_size=1, max_turns=max_turns, max_new_tokens=4, max_prompt_tokens=4092)
    return play_episodes(sampler, InProcessRunner(), ReferencePrompts(), tasks, config, 0, action_override=override)[0]


def test_reported_scores_give_plus_or_minus_one_and_graded_outcomes_stay(sampler):
    tasks = [Task(f"s{i}", "scored_for_outcome_test", "finish", {"score": score, "graded": graded})
             for i, (score, graded) in enumerate([(0.0, False), (0.5, False), (1.0, False), (0.25, True)])]
    episodes = _play(sampler, tasks)
    assert [e.won for e in episodes] == [False, True, True, True]
    assert [e.outcome for e in episodes] == [-1.0, 1.0, 1.0, 0.25]


def test_a_lost_step_trains_the_reward_model_towards_the_outcome(sampler):
    """A lost episode (score 0) whose step the votes call (+1, +1, -1): R = -1 + 1/3 and the consistency
    advantages are [-0.707, -0.707, 1.414]. With O = the score (0), R = +1/3 and the signs flipped."""
    lost, won = _play(sampler, [Task("lost", "scored_for_outcome_test", "finish", {"score": 0.0}),
                                Task("won", "scored_for_outcome_test", "finish", {"score": 0.5})])
    judged = []
    for episode, votes in ((lost, [1, 1, -1]), (won, [1, 1, 1])):
        scores = np.asarray([votes], np.int8)
        judged.append(JudgedEpisode(episode, StepJudgments(
            scores=scores, valid=np.ones_like(scores, bool), texts=(("",) * 3,), prompts=((1,),),
            samples=(tuple(((2 + j,), (-0.1,)) for j in range(3)),))))
    examples = reward_model_examples({"t": judged}, SignalConfig(band_low=0.0, band_high=1.0))[0]
    r2 = np.sqrt(2)
    assert [e.advantage for e in examples[:3]] == pytest.approx([-1 / r2, -1 / r2, r2])


@pytest.mark.slow   # generates a TextWorld game (3-6 s)
def test_a_textworld_game_won_for_points_has_outcome_plus_one(sampler, tmp_path):
    task = make_task(3, TextWorldKnobs("custom", nb_rooms=2, nb_objects=3, quest_length=2), tmp_path)
    plan = expert_actions(task)

    def expert(episode, observation):
        return plan[len(episode.steps) - 1]

    (episode,) = _play(sampler, [task], expert, max_turns=len(plan))
    assert episode.won and episode.outcome == 1.0
    assert episode.graded_outcome is None
