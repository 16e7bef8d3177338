"""judge_episodes: each step's prompt is prefilled once, its m judgments land in the right slots."""


import pytest

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.judging import JudgeConfig, judge_episodes
from rlanything_jax.agents.trajectory import Episode, ParsedJudgment, StepRecord
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler
from tests import hf_reference


class _Tokenizer:
    """Token ids as text: a message's characters mod the vocabulary; ids printed back."""

    stop_token_ids = ()

    def encode_chat(self, messages):
        return [1 + ord(ch) % 250 for m in messages for ch in m["content"]]

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


class _Scenario:
    name = "toy"

    def judge_messages(self, task, episode, step_index):
        return [{"role": "user", "content": f"{task.goal} step {step_index} " + "x" * (7 * step_index)}]

    def parse_judgment(self, text):
        if not text:
            return ParsedJudgment(0, False, "empty")
        first = int(text.split()[0])
        return ParsedJudgment(first % 3 - 1, first % 5 != 0, "ok" if first % 5 else "invalid")


def _episode(goal, num_steps, env_error=None):
    steps = [StepRecord(Observation("o"), [1], [2], [-0.1], "r", "stop", "a", "ok") for _ in range(num_steps)]
    return Episode(Task(goal, "toy", goal), 0, steps=steps, env_error=env_error)


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("judge_model")
    hf_reference.build("qwen2", path)
    return Sampler(load_pretrained(path), tokenizer=_Tokenizer())


@pytest.mark.parametrize("continuous_batching", [True, False])   # rows refilled as judgments end, or chunks
@pytest.mark.parametrize("batch_size", [4, 7])  # one prompt (3 rows) at once, then two (6 rows)
def test_judgments_fill_every_slot_from_one_prefill_per_step(reward_model, batch_size, continuous_batching):
    episodes = [_episode("fetch the cup", 3), _episode("open door", 2), _episode("broken", 2, env_error="crash")]
    config = JudgeConfig(num_judgments=3, max_new_tokens=5, temperature=0.0, batch_size=batch_size,
                         continuous_batching=continuous_batching)
    rows_before = reward_model.prefilled["rows"]
    judgments, metrics = judge_episodes(reward_model, _Scenario(), episodes, config, 0)
    assert reward_model.prefilled["rows"] - rows_before == 5  # one per judged step, not per judgment

    assert len(judgments) == 3 and judgments[2] is None   # the crashed episode is not judged
    scenario = _Scenario()
    for episode, judged in zip(episodes[:2], judgments):
        steps = len(episode.steps)
        assert judged.scores.shape == judged.valid.shape == (steps, 3)
        assert len(judged.prompts) == steps
        for t, prompt in enumerate(judged.prompts):
            # Greedy: every judgment of a step is that step's own prompt's continuation.
            [alone] = reward_model.generate([list(prompt)], 5)
            for j in range(3):
                tokens, logprobs = judged.samples[t][j]
                assert list(tokens) == alone.token_ids and len(logprobs) == len(tokens)
                assert judged.texts[t][j] == alone.text
                parsed = scenario.parse_judgment(alone.text)
                assert (judged.scores[t, j], judged.valid[t, j]) == (parsed.score, parsed.valid)
    assert sum(v for k, v in metrics.items() if k.startswith("parse/toy_judgment/")) == 15
    assert metrics["judge/tokens"] == 15 * 5
    assert ("judge/slot_occupancy" in metrics) == continuous_batching
    if continuous_batching:   # every judgment runs 5 tokens: rows end together and the next prompts start afresh
        assert metrics["judge/busy_slot_steps"] == 15 * 5 and metrics.get("judge/joined_rows", 0) == 0


def test_sampled_judgments_of_one_step_differ(reward_model):
    episodes = [_episode("look around", 1)]
    [judged], _ = judge_episodes(reward_model, _Scenario(), episodes, JudgeConfig(continuous_batching=True,
                                                                                  num_judgments=4, max_new_tokens=6,
                                                                                  temperature=1.0, top_p=1.0), 0)
    assert len({tuple(tokens) for tokens, _ in judged.samples[0]}) > 1
