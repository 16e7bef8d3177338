"""Audit of `configs/coding.py:paper` and `configs/osworld.py:paper` at the reference's lengths, with the
real tokenizers and task sets: every prompt the first RL step builds fits its sampler and its training
limit, and the judge and unit-test prompts are whole. (`test_alfworld_paper.py` runs ALFWorld's whole
first step; these scenarios' prompts do not grow with a model's answers as ALFWorld's dialogue did, so
their prompts are built directly, by the code the step builds them with.)"""

import numpy as np
import pytest

from rlanything_jax.agents.chat_tokens import first_prompt
from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.judging import fits_sampler
from rlanything_jax.agents.prompt_tokens import encode_prompt
from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.core.models.qwen3_vl.images import Qwen3VLImages
from rlanything_jax.core.models.qwen_tokenizer_io import convert_qwen_tokenizer
from rlanything_jax.core.models.tokenizer import Tokenizer
from rlanything_jax.core.sampling.sampler import SamplerConfig
from rlanything_jax.system import assemble
from rlanything_jax.system.config import load_config


class SamplerLimit:
    """What `fits_sampler` reads of a sampler: its cache limit."""

    def __init__(self, max_cache_length: int):
        self.config = SamplerConfig(max_cache_length=max_cache_length)


def test_coding_paper_prompts_fit_and_unit_test_prompts_are_whole(qwen25_tokenizer):
    cfg = load_config("configs/coding.py:paper")
    scenario = assemble.build_scenario(cfg)
    sets = scenario.build_tasks(TaskCounts(train=cfg.env.num_train_tasks, eval=cfg.env.num_eval_tasks,
                                           warm_start=0), None)
    reward_sampler = SamplerLimit(assemble.max_cache_length(cfg, "reward"))
    context = cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens
    longest = 0
    for task in sets.train + sets.eval:
        policy = first_prompt(qwen25_tokenizer, scenario.prompts.initial_messages(task, Observation(task.goal)))
        assert len(policy) + cfg.rollout.max_new_tokens <= context
        assert len(policy) <= cfg.train.policy.max_prompt_tokens   # no policy example dropped
        unit_tests = qwen25_tokenizer.encode_chat(scenario.prompts.unit_test_messages(task))
        assert fits_sampler(reward_sampler, len(unit_tests), cfg.reward.max_new_tokens)
        assert len(unit_tests) <= cfg.train.reward.max_prompt_tokens   # no reward-model example dropped
        longest = max(longest, len(policy), len(unit_tests))
    assert len(sets.train) == 128 and len(sets.eval) == 36 and longest > 300
    assert cfg.rollout.max_new_tokens <= cfg.train.policy.max_response_tokens
    assert cfg.reward.max_new_tokens <= cfg.train.reward.max_response_tokens


@pytest.fixture(scope="module")
def qwen3_vl_tokenizer(tmp_path_factory):
    return Tokenizer.from_dir(convert_qwen_tokenizer(tmp_path_factory.mktemp("qwen3_vl_tokenizer"), "qwen3-vl"))


@pytest.mark.slow   # preprocesses 1920x1080 screenshots: about 20 s
def test_osworld_paper_prompts_fit_and_judge_prompts_are_whole(qwen3_vl_tokenizer):
    cfg = load_config("configs/osworld.py:paper", ["tasks.provider=local"])   # prompts do not depend on it
    scenario = assemble.build_scenario(cfg)
    prompts, tok = scenario.prompts, qwen3_vl_tokenizer
    task = scenario.build_tasks(TaskCounts(train=1, eval=0, warm_start=0), None).train[0]
    rng = np.random.default_rng(0)

    def screenshot():   # the reference's VMs: 1920x1080
        return Observation("", images=(rng.integers(0, 255, (1080, 1920, 3), np.uint8),))

    def played(answers):
        steps = []
        for answer in answers:
            steps.append(StepRecord(screenshot(), (), (), (), answer, "stop", "pyautogui.press('enter')", "ok",
                                    next_observation=screenshot()))
        return Episode(task, 0, tuple(steps))

    # The expert's answers over the paper's 30 steps: nothing dropped from training, judge prompts whole.
    expert_answer = prompts.answer_text(screenshot(), scenario.expert.plan(task)[0])
    episode = played([expert_answer] * cfg.rollout.max_turns)
    reward_sampler = SamplerLimit(assemble.max_cache_length(cfg, "reward"))
    images_of = Qwen3VLImages(tok.token_to_id("<|image_pad|>"))   # the Qwen3-VL policy's and judge's
    for t in (0, 1, 2, cfg.rollout.max_turns - 1):
        policy, _ = encode_prompt(tok, prompts.step_messages(task, played([expert_answer] * t),
                                                             episode.steps[t].observation), image_inputs=images_of)
        assert len(policy) <= cfg.train.policy.max_prompt_tokens
        judge, images = encode_prompt(tok, prompts.judge_messages(task, episode, t), image_inputs=images_of)
        assert len(images) == 2 and len(judge) <= cfg.train.reward.max_prompt_tokens
        assert fits_sampler(reward_sampler, len(judge), cfg.reward.max_new_tokens)
        assert tok.decode(judge[:60]).startswith("<|im_start|>system\nYou are an evaluator")
    # Two previous answers of the whole 4,096 tokens still leave room for the turn: no context_full.
    long_answer = "Action: wait\n" + "think " * 4300
    long_answer = tok.decode(tok.encode(long_answer)[:cfg.rollout.max_new_tokens])
    longest, _ = encode_prompt(tok, prompts.step_messages(task, played([long_answer] * 29), screenshot()),
                               image_inputs=images_of)
    assert len(longest) <= cfg.rollout.max_prompt_tokens
