"""Audit of `configs/alfworld.py:paper`: its first RL step at the reference's lengths.

Tiny random stand-in models read and write the real Qwen2.5 tokenizer's ids; the tasks are the real
generator's games and every rollout plays the expert's plan while its responses are 163 tokens long
(the length the reference's Qwen2.5-7B writes). Everything else is the paper config: the reference's
prompt (the whole trajectory every turn), its context, its judge and its training limits. The step must
hold every expert plan (7- and 8-step games included) without `context_full`, judge every step from its
whole prompt, and train on every example without dropping or cutting one.
"""

import dataclasses
import zlib

import jax
import pytest

from rlanything_jax.agents.curriculum.task_pool import TaskPool
from rlanything_jax.agents.envs.base import InProcessRunner
from rlanything_jax.agents.examples import episode_examples
from rlanything_jax.agents.reward_models import RewardModel
from rlanything_jax.agents.reward_models.step_judging import StepJudging
from rlanything_jax.agents.rollout import RolloutEngine
from rlanything_jax.agents.trajectory import ParsedJudgment
from rlanything_jax.core import sharding
from rlanything_jax.core.rl.data import DataConfig, prepare_examples
from rlanything_jax.scenarios.alfworld import env as alfworld_env
from rlanything_jax.scenarios.text_games import prompts as text_prompts
from rlanything_jax.system import assemble
from rlanything_jax.system.config import load_config
from rlanything_jax.system.loop import Services, SystemState, rl_step
from tests.audit.stand_ins import stand_in_model_dir

pytestmark = pytest.mark.slow   # about three minutes on 2 CPU cores

LONGEST_GAMES = 2   # the 7- and 8-step plans of the six task types
RESPONSE_TOKENS = 163   # a Qwen2.5-7B-Instruct answer's typical length on these games (issue 29)


@dataclasses.dataclass(frozen=True)
class HashedVotes:
    """The scenario's judge prompts; a random model's judgments never parse, so each is read as a vote
    hashed from its text (the step then has examples with nonzero advantages to train on)."""

    inner: object
    name: str = "text_game"

    def __getattr__(self, attribute):
        return getattr(self.inner, attribute)

    def parse_judgment(self, text: str) -> ParsedJudgment:
        return ParsedJudgment(score=(1, -1)[zlib.crc32(text.encode()) % 2], valid=True, status="hashed")


class Recorder:
    """Keeps the episodes and judgments of the step (the real collaborators do the work)."""

    def __init__(self, engine, judge):
        self.engine, self.judge_impl, self.episodes, self.judgments = engine, judge, [], []

    def play(self, tasks, config, seed):
        self.episodes, counts = self.engine.play(tasks, config, seed)
        return self.episodes, counts

    def __getattr__(self, name):   # the rest of the reward model's role: the real one's
        return getattr(self.judge_impl, name)

    def judge(self, reward_model, episodes, config, seed):
        judgments, counts = self.judge_impl.judge(reward_model, episodes, config, seed)
        self.judgments = list(judgments.steps)
        return judgments, counts

    def update_params(self, params):
        pass


def test_the_paper_configs_first_step_holds_and_trains_on_every_expert_step(tmp_path, qwen25_tokenizer_dir,
                                                                          qwen25_tokenizer):
    model_dir = stand_in_model_dir(tmp_path / "stand_in", qwen25_tokenizer_dir, len(qwen25_tokenizer.hf))
    cfg = load_config("configs/alfworld.py:paper", [
        f"workdir={tmp_path}", *(f"model.{role}.{key}={value}" for role in ("policy", "reward") for key, value in
                                 (("path", model_dir), ("dtype", "float32"), ("compute_dtype", "float32"))),
        # one game of each of the six task types (the last one's plan has 8 steps); the two longest are played
        # twice each (the step's cost is its tokens: every game more adds about a minute on 2 CPU cores)
        "env.num_train_tasks=6", "env.num_eval_tasks=0", f"rollout.tasks_per_step={LONGEST_GAMES}",
        "rollout.group_size=2",
        # lengths do not depend on sampling; top-p over a 151,936-token vocabulary costs minutes on a CPU
        "rollout.temperature=0.0", "reward.top_p=1.0",
        # every rollout wins (the expert plays): the accuracy bands are opened so that the step trains at all
        "train.policy_acc_low=0.0", "train.policy_acc_high=1.0", "reward.band_low=0.0", "reward.band_high=1.0"])
    mesh = sharding.build_mesh(dict(cfg.mesh.shape), devices=jax.devices()[:1])
    scenario = assemble.build_scenario(cfg)
    tasks = assemble.build_tasks(cfg, scenario, tmp_path / "games")
    plans = {task.task_id: alfworld_env.expert_actions(task) for task in tasks.train}
    longest_games = sorted(tasks.train, key=lambda task: len(plans[task.task_id]))[-LONGEST_GAMES:]
    assert [len(plans[task.task_id]) for task in longest_games] == [7, 8]

    samplers, learners = {}, {}
    for role in ("policy", "reward"):
        model, tokenizer = assemble.load_model(cfg, role, model_dir, mesh)
        samplers[role] = assemble.sampler_for(cfg, role, model, tokenizer, mesh)
        learners[role] = assemble.learner_for(cfg, role, model, tokenizer, mesh)

    def expert(episode, observation):
        return plans[episode.task.task_id][len(episode.steps) - 1]

    paper = assemble.loop_settings(cfg, scenario)
    # Responses of 163 tokens: the stand-in model never writes an end of turn, so each turn is cut there. The
    # context (max_prompt_tokens + max_new_tokens) stays the paper's: the tokens the responses give up go to the
    # prompts (it is checked against the paper's 2000-token answers below); the judgments are kept short (their
    # length is checked against the training limit below).
    context = paper.rollout.max_prompt_tokens + paper.rollout.max_new_tokens
    rollout = dataclasses.replace(paper.rollout, max_new_tokens=RESPONSE_TOKENS,
                                  max_prompt_tokens=context - RESPONSE_TOKENS)
    settings = dataclasses.replace(paper, rollout=rollout, judge=dataclasses.replace(paper.judge, max_new_tokens=16))
    recorder = Recorder(RolloutEngine(samplers["policy"], InProcessRunner(), scenario.prompts, expert),
                        StepJudging(HashedVotes(scenario.prompts)))
    services = Services(policy=recorder, policy_trainer=learners["policy"], reward_trainer=learners["reward"],
                        reward_model=RewardModel(recorder, samplers["reward"]), generator=None, seed=cfg.seed,
                        log=lambda _: None)
    state = SystemState(step=0, policy=learners["policy"].fresh_state(samplers["policy"].params),
                        reward=learners["reward"].fresh_state(samplers["reward"].params),
                        pool=TaskPool.from_tasks(longest_games))
    _, metrics = rl_step(state, services, dataclasses.replace(settings, adapt_environment=False))

    # Every expert plan fits, at the paper's 2000-token answers too.
    episodes = recorder.episodes
    assert len(episodes) == 2 * LONGEST_GAMES and metrics.get("episodes/context_full", 0) == 0
    assert all(e.won and len(e.steps) == len(plans[e.task.task_id]) for e in episodes)
    for episode in episodes:
        for step in episode.steps:
            assert len(step.response_tokens) == RESPONSE_TOKENS
            assert len(step.prompt_tokens) + cfg.rollout.max_new_tokens <= context
    longest = max(episodes, key=lambda e: len(e.steps))
    # The reference's prompt: built afresh each turn from the trajectory, without earlier responses.
    last = longest.steps[-1]
    observations = [s.observation.text for s in longest.steps]
    assert list(last.prompt_tokens) == qwen25_tokenizer.encode_chat(text_prompts.policy_messages_full_history(
        observations, [s.action for s in longest.steps[:-1]], last.observation.admissible_actions))
    assert len(last.prompt_tokens) < 1000   # the dialogue form: 2357 tokens at turn 7

    # No judge prompt loses its start: each is the whole judge chat, rubric first.
    for episode, judged in zip(episodes, recorder.judgments, strict=True):
        for t, prompt in enumerate(judged.prompts):
            expected = qwen25_tokenizer.encode_chat(scenario.prompts.judge_messages(episode.task, episode, t))
            assert list(prompt) == expected
            assert text_prompts.JUDGE_INSTRUCTIONS.split("\n")[0] in qwen25_tokenizer.decode(list(prompt)[:40])
    assert metrics.get("judge/prompts_over_limit", 0) == 0

    # Nothing dropped or cut in training; the judgments' sampling limit fits the reward model's training.
    assert metrics["policy_data/kept"] > 0 and metrics["reward_model_data/kept"] > 0
    for role in ("policy_data", "reward_model_data"):
        for count in ("prompts_dropped", "prompts_truncated", "responses_truncated"):
            assert metrics[f"{role}/{count}"] == 0, f"{role}/{count}"
    assert cfg.reward.max_new_tokens <= cfg.train.reward.max_response_tokens
    assert cfg.rollout.max_new_tokens <= cfg.train.policy.max_response_tokens

    # A step whose prompt is over the training limit is kept out of training and counted, as the reference
    # drops it; its episode has gone on (here: a limit of 400 tokens, which the games' late turns pass).
    examples = [ex for e in episodes for ex in episode_examples(e, [1.0] * len(e.steps), pack_turns=False)[0]]
    tight = DataConfig(batch_size=1, max_prompt_tokens=400, max_response_tokens=2048, eos_id=0, overlong_prompt="drop")
    kept, counts = prepare_examples(examples, tight)
    over = sum(len(s.prompt_tokens) > 400 for e in episodes for s in e.steps)
    assert 0 < over < len(examples) and counts["prompts_dropped"] == over and len(kept) == len(examples) - over
