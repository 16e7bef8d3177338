"""Assembling a run from its config: tasks, models, samplers, learners, generator, loop settings.

Nothing here trains or plays; `run.py` drives what this builds.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import jinja2
from flax import nnx

from rlanything_jax import sft, sharding
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.rollout import RolloutConfig
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.envs.base import Task
from rlanything_jax.loop import LoopSettings
from rlanything_jax.rl.examples import SignalConfig
from rlanything_jax.rl.phase import Learner

EVAL_SEED_OFFSET = 1_000_000  # held-out tasks use seeds no training task uses
WARM_START_SEED_OFFSET = 2_000_000  # so do the expert games of the warm start


@dataclasses.dataclass(frozen=True)
class TaskSets:
    train: list[Task]       # the task pool's raw tasks
    eval: list[Task]        # held out
    warm_start: list[Task]  # the expert games the warm start learns from (none of the above)


# ---------------------------------------------------------------- tasks

def build_tasks(cfg, games_dir: Path) -> TaskSets:
    """Training, held-out and warm-start tasks for the configured environment, from disjoint seeds."""
    if cfg.env.kind == "osworld":
        raise ValueError("the OSWorld desktop environment is not implemented yet (../shared/design/OSWORLD.md); "
                         "use configs/alfworld.py, configs/coding.py or configs/default.py")
    kinds = [k.strip() for k in cfg.env.task_types.split(",") if k.strip()]
    knobs = dict(cfg.env.knobs)
    n_train, n_eval = cfg.env.num_train_tasks, cfg.env.num_eval_tasks

    if cfg.env.kind == "alfworld":
        from rlanything_jax.envs import alfworld
        from rlanything_jax.envs.alfworld_knobs import GameKnobs

        def make(seed):
            return alfworld.make_task(seed, kinds[seed % len(kinds)], GameKnobs(**knobs), str(games_dir))
    elif cfg.env.kind == "textworld":
        from rlanything_jax.envs import textworld

        def make(seed):
            return textworld.make_task(seed, textworld.TextWorldKnobs(kind=kinds[seed % len(kinds)], **knobs),
                                       str(games_dir))
    else:
        from rlanything_jax.envs import coding

        tasks = coding.builtin_stdio_tasks() if kinds == ["stdio"] else coding.humaneval_tasks()
        return TaskSets(tasks[:n_train], tasks[n_train:n_train + n_eval], [])
    n_warm = cfg.warm_start.num_tasks if cfg.warm_start.enabled else 0
    return TaskSets([make(seed) for seed in range(n_train)], [make(EVAL_SEED_OFFSET + s) for s in range(n_eval)],
                    [make(WARM_START_SEED_OFFSET + s) for s in range(n_warm)])


def expert_plan(task: Task) -> list[str]:
    if task.kind == "alfworld":
        from rlanything_jax.envs.alfworld import expert_actions
    elif task.kind == "textworld":
        from rlanything_jax.envs.textworld import expert_actions
    else:
        raise ValueError(f"no expert for {task.kind} tasks")
    return expert_actions(task)


@functools.lru_cache(maxsize=4096)
def _cached_plan(task_id: str, task: Task) -> tuple[str, ...]:
    return tuple(expert_plan(task))


def expert_step_label(episode: Episode, step_index: int, kind: str = "walkthrough") -> int | None:
    """Expert label of an episode's step (`sft.step_label`); None for tasks without an expert."""
    if episode.task.kind not in ("alfworld", "textworld"):
        return None
    plan = _cached_plan(episode.task.task_id, episode.task)
    step = episode.steps[step_index]
    return sft.step_label(kind, plan, [s.action for s in episode.steps[:step_index]], step.action,
                      step.observation.admissible_actions)


def build_scenario(cfg):
    """How the policy and the reward model see the configured tasks."""
    if cfg.env.kind == "coding":
        from rlanything_jax.agents.coding_scenario import CodingScenario
        return CodingScenario()
    if cfg.env.prompt_style == "compact":
        from rlanything_jax.agents.compact_game import CompactTextGameScenario
        return CompactTextGameScenario()
    if cfg.env.prompt_style == "compact_choice":
        from rlanything_jax.agents.compact_game import CompactChoiceScenario
        return CompactChoiceScenario()
    from rlanything_jax.agents.text_game import TextGameScenario
    return TextGameScenario()


# ---------------------------------------------------------------- models

def scratch_corpus(cfg, tasks: list[Task], env) -> list[str]:
    """Text a scratch tokenizer is fitted to: expert games and judge prompts, rendered as chats."""
    from rlanything_jax.models.scratch import CHATML_TEMPLATE

    template = jinja2.Template(CHATML_TEMPLATE)
    scenario = build_scenario(cfg)
    texts = []
    for task in tasks:
        steps = sft.play_expert(task, expert_plan(task), env)
        if not steps:
            continue
        episode = sft.expert_episode(task, steps, scenario)
        messages = scenario.initial_messages(task, steps[0].observation)
        for t, step in enumerate(episode.steps):
            if t:
                messages.append(scenario.turn_message(Episode(task, 0, episode.steps[:t]), step.observation))
            messages.append({"role": "assistant", "content": step.response_text})
        texts.append(template.render(messages=messages, add_generation_prompt=False))
        texts.append(template.render(messages=scenario.judge_messages(task, episode, len(steps) - 1),
                                     add_generation_prompt=True)
                     + scenario.judgment_text(1) + scenario.judgment_text(-1))
    return texts


def model_dir(cfg, role: str, workdir: Path, corpus_fn) -> Path:
    """The role's Hugging Face directory; "scratch" builds one in the workdir (once)."""
    from rlanything_jax.models.registry import resolve_model_dir
    from rlanything_jax.models.scratch import ScratchArchitecture, build_scratch_model_dir

    path = cfg.model[role].path
    if path != "scratch":
        return resolve_model_dir(path)
    out = workdir / "models" / f"scratch-{role}"
    if not (out / "config.json").is_file():
        arch = ScratchArchitecture(**dict(cfg.model.scratch))
        build_scratch_model_dir(out, corpus_fn(), arch, seed=cfg.seed + (0 if role == "policy" else 1))
    return out


def load_model(cfg, role: str, directory: Path, mesh):
    from rlanything_jax.models import load_pretrained
    from rlanything_jax.models.tokenizer import Tokenizer

    model = load_pretrained(directory, dtype=cfg.model[role].dtype, mesh=mesh, rules=cfg.sharding.logical_axis_rules,
                            compute_dtype=cfg.model[role].compute_dtype)
    return model, Tokenizer.from_dir(directory)


def sampler_for(cfg, model, tokenizer, mesh):
    """A sampler whose cache holds two turns' worth of the longest allowed history."""
    from rlanything_jax.sampling.sampler import Sampler, SamplerConfig

    max_cache = 2 * (cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens)
    return Sampler(model, tokenizer, mesh=mesh, rules=cfg.sharding.logical_axis_rules,
                   config=SamplerConfig(max_cache_length=max(max_cache, 1024), pad_token_id=tokenizer.pad_id))


def learner_for(cfg, role: str, model, tokenizer, mesh, learning_rate: float | None = None) -> Learner:
    train_config = dict(cfg.train[role])
    if learning_rate is not None:
        train_config["learning_rate"] = learning_rate
    graphdef, _ = nnx.split(model)
    return Learner(graphdef=graphdef, train_config=train_config, mesh=mesh, eos_id=tokenizer.eos_id,
                   pad_id=tokenizer.pad_id, rules=cfg.sharding.logical_axis_rules)


def build_mesh(cfg):
    return sharding.build_mesh(dict(cfg.mesh.shape))


# ---------------------------------------------------------------- settings

def loop_settings(cfg) -> LoopSettings:
    """The loop's constants, with the ablation switches of the paper's Table 1 and Fig. 1."""
    ablation = cfg.ablation
    signal = SignalConfig(num_judgments=cfg.reward.num_judgments, step_weight=cfg.reward.step_weight,
                          singleton=cfg.train.advantage_singleton, policy_acc_low=cfg.train.policy_acc_low,
                          policy_acc_high=cfg.train.policy_acc_high, rm_acc_low=cfg.reward.band_low,
                          rm_acc_high=cfg.reward.band_high, invalid_penalty=cfg.reward.invalid_judgment_reward,
                          fallback_penalty=cfg.reward.action_fallback_penalty,
                          balance_rm_labels=cfg.reward.balance_labels)
    judge_steps = cfg.env.kind != "coding" and ablation != "outcome_only"
    if ablation == "outcome_only":
        signal = dataclasses.replace(signal, step_weight=0.0)
    if ablation == "step_only":
        signal = dataclasses.replace(signal, outcome_weight=0.0)
    return LoopSettings(
        tasks_per_step=cfg.rollout.tasks_per_step,
        rollout=RolloutConfig(group_size=cfg.rollout.group_size, max_steps=cfg.rollout.max_turns,
                              max_new_tokens=cfg.rollout.max_new_tokens,
                              max_context_tokens=cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k),
        judge=JudgeConfig(num_judgments=cfg.reward.num_judgments, max_new_tokens=cfg.reward.max_new_tokens,
                          temperature=cfg.reward.temperature, top_p=cfg.reward.top_p,
                          max_prompt_tokens=cfg.train.reward.max_prompt_tokens),
        signal=signal,
        judge_steps=judge_steps,
        pack_turns=cfg.train.policy.pack_turns,
        train_reward_model=judge_steps and cfg.train.train_reward_model and ablation in ("rlanything", "policy_reward",
                                                                                       "step_only"),
        adapt_environment=cfg.curriculum.enabled and ablation == "rlanything",
        harder_at=cfg.curriculum.harder_at, easier_at=cfg.curriculum.easier_at,
        accept_low=cfg.curriculum.accept_low, accept_high=cfg.curriculum.accept_high)


def eval_rollout(cfg, settings: LoopSettings) -> RolloutConfig:
    return dataclasses.replace(settings.rollout, group_size=cfg.eval.group_size, max_steps=cfg.eval.max_turns,
                               temperature=cfg.eval.temperature, seed=cfg.seed)


def task_generator(cfg, workdir: Path, environment_sampler: Any | None):
    from rlanything_jax.curriculum.generators import EnvModelGenerator, GeneratorChain, ProceduralGenerator

    procedural = ProceduralGenerator(str(workdir / "games" / "candidates"))
    if cfg.curriculum.generator == "procedural" or environment_sampler is None:
        return procedural
    model = EnvModelGenerator(environment_sampler, str(workdir / "games" / "candidates"),
                              num_tries=cfg.curriculum.candidates_per_task, temperature=cfg.curriculum.temperature,
                              max_new_tokens=cfg.curriculum.max_new_tokens, seed=cfg.seed)
    return GeneratorChain([model])
