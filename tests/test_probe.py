"""The reward model's fixed probe: expert-labelled steps of a real generated game, and its accuracy."""

import re

import pytest

from rlanything_jax.agents.envs.base import make_env
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models.probe import build_judge_probe, probe_accuracy
from rlanything_jax.core.sampling.stops import Completion
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.env import GameKnobs
from rlanything_jax.scenarios.text_games import expert as text_expert

SCENARIO = make_scenario("alfworld", {"prompt_style": "compact", "demonstrations": "search",
                                      "step_labels": "walkthrough"})
PROMPTS = SCENARIO.prompts


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("probe_games"))
    tasks = [alfworld.make_task(seed, "pick_and_place_simple", GameKnobs(num_receptacles=4, num_distractors=0),
                                directory) for seed in (11, 12)]
    return tasks, [alfworld.expert_actions(t) for t in tasks], make_env("alfworld")


def _said(prompt_text):
    """(earlier actions, judged action) as the judge prompt shows them."""
    done = re.search(r"done: (.*)", prompt_text).group(1)
    action = re.search(r"action: (.*)", prompt_text).group(1)
    return ([] if done == "nothing" else done.split("; ")), action


def test_probe_prompts_carry_the_expert_label_of_the_step_they_show(game, qwen25_tokenizer):
    tasks, plans, env = game
    probe = build_judge_probe(tasks, SCENARIO, qwen25_tokenizer, env, seed=5)
    assert probe == build_judge_probe(tasks, SCENARIO, qwen25_tokenizer, env, seed=5)   # deterministic
    assert set(probe.labels) == {1, -1}
    first = build_judge_probe(tasks[:1], SCENARIO, qwen25_tokenizer, env, seed=5)
    assert len(first.prompts) >= 2 * len(plans[0])   # the expert's steps (a search, then the walkthrough) and others
    for prompt, label in zip(first.prompts, first.labels):
        earlier, action = _said(qwen25_tokenizer.decode(list(prompt)))
        assert label == text_expert.progress_label(plans[0], earlier, action), (earlier, action)


class _RuleJudge:
    """A stand-in reward model answering by a rule on the prompt's text (the probe's accounting is under
    test, not a model): `rule(earlier, action) -> answer text`, the same answer for each of the m samples
    except where `invalid_every` makes every such sample unparsable."""

    def __init__(self, tokenizer, rule, invalid_every=0):
        self.tokenizer, self.rule, self.invalid_every = tokenizer, rule, invalid_every

    def generate(self, prompts, max_new_tokens, strategy, seed, num_samples):
        out = []
        for prompt in prompts:
            answer = self.rule(*_said(self.tokenizer.decode(list(prompt))))
            for sample in range(num_samples):
                text = "no idea" if self.invalid_every and sample % self.invalid_every == 1 else answer
                out.append(Completion([1], [0.0], text, "stop"))
        return out


def test_probe_accuracy_counts_each_judgment_against_its_label(game, qwen25_tokenizer):
    tasks, plans, env = game
    probe = build_judge_probe(tasks[:1], SCENARIO, qwen25_tokenizer, env, seed=5)
    config = JudgeConfig(continuous_batching=True,
                         num_judgments=2, batch_size=5)   # 2 prompts a call: results come back sorted by length
    perfect = _RuleJudge(qwen25_tokenizer, lambda earlier, action:
                         "\\boxed{%d}" % text_expert.progress_label(plans[0], earlier, action))
    result = probe_accuracy(perfect, PROMPTS, probe, config, 0)
    assert result.pop("time/judge_probe_s") >= 0
    assert result == {"reward_model/probe_step_accuracy": 1.0, "reward_model/probe_valid": 1.0,
                      "reward_model/probe_accuracy_good": 1.0, "reward_model/probe_accuracy_bad": 1.0}
    half_invalid = _RuleJudge(perfect.tokenizer, perfect.rule, invalid_every=2)
    result = probe_accuracy(half_invalid, PROMPTS, probe, config, 0)
    assert result["reward_model/probe_step_accuracy"] == 0.5 and result["reward_model/probe_valid"] == 0.5
    good_share = probe.labels.count(1) / len(probe.labels)
    always_good = probe_accuracy(_RuleJudge(qwen25_tokenizer, lambda *_: "\\boxed{1}"), PROMPTS, probe, config, 0)
    assert always_good["reward_model/probe_step_accuracy"] == pytest.approx(good_share)
    assert always_good["reward_model/probe_accuracy_good"] == 1.0
    assert always_good["reward_model/probe_accuracy_bad"] == 0.0
