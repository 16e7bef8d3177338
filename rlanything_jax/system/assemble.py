"""Assembling a run from its config: scenario, tasks, models, samplers, learners, generator, loop settings.

Nothing here trains or plays; `system/run.py` drives what this builds. Nothing here names a
scenario: the configured one comes from the registry (`scenarios.make_scenario`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import jax
import jinja2
from flax import nnx

from rlanything_jax.agents import sft
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.prompt_tokens import text_only
from rlanything_jax.agents.reward_models import RewardModelRole, make_role
from rlanything_jax.agents.rollout_config import RolloutConfig
from rlanything_jax.agents.scenario import GeneratorContext, Scenario, TaskCounts, TaskSets
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.core import multihost
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.attention_kernels import resolve_attention
from rlanything_jax.core.models.families import build_scratch_model
from rlanything_jax.core.models.registry import resolve_model_dir
from rlanything_jax.core.models.scratch import CHATML_TEMPLATE
from rlanything_jax.core.models.tokenizer import Tokenizer
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.vision import ImageTraining
from rlanything_jax.core.sampling.buckets import bucket_length
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.core.seeds import derive_rng, derive_seed
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.system import placement
from rlanything_jax.system.config import RunConfig
from rlanything_jax.system.loop import LoopSettings

ROLES = ("policy", "reward")
# Model paths the run builds itself from its own text: a small random decoder, or a small random Qwen3-VL.
SCRATCH = "scratch"
SCRATCH_VL = "scratch_vl"
SCRATCH_PATHS = (SCRATCH, SCRATCH_VL)


def build_scenario(cfg: RunConfig) -> Scenario:
    return make_scenario(cfg.scenario, cfg.tasks)


def reward_model_role(cfg: RunConfig | None, scenario: Scenario) -> RewardModelRole:
    """How the scenario's reward model is used: the role it names, over its reward prompts."""
    return make_role(scenario.reward_model_role, scenario.reward_prompts, cfg)


def build_tasks(cfg: RunConfig, scenario: Scenario, games_dir: Path) -> TaskSets:
    """Training, held-out and warm-start tasks, disjoint (the scenario's seeds)."""
    warm = cfg.warm_start.num_tasks if cfg.warm_start.enabled and scenario.expert is not None else 0
    counts = TaskCounts(train=cfg.env.num_train_tasks, eval=cfg.env.num_eval_tasks, warm_start=warm)
    return scenario.build_tasks(counts, games_dir)


# ---------------------------------------------------------------- models

def scratch_corpus(scenario: Scenario, tasks: list[Task], env: Env) -> list[str]:
    """Text a scratch tokenizer is fitted to: expert demonstrations and their reward-model prompts,
    rendered as chats (what the models will read and write)."""
    template = jinja2.Template(CHATML_TEMPLATE)
    prompts, role = scenario.prompts, reward_model_role(None, scenario)

    def render(messages, add_generation_prompt: bool) -> str:
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt)
    texts = []
    for task in tasks:
        steps = [] if scenario.expert is None else scenario.expert.demonstration(task, env, derive_rng(0, "corpus"))
        if not steps:
            messages = text_only(prompts.initial_messages(task, _first_observation(env, task)))
            texts.append(template.render(messages=messages, add_generation_prompt=True))
            continue
        episode = sft.expert_episode(task, steps, prompts)
        if getattr(prompts, "rebuilds_history", False):   # each turn's prompt is whole: the last one has most
            messages = list(prompts.step_messages(task, Episode(task, 0, episode.steps[:-1]), steps[-1].observation))
            messages.append({"role": "assistant", "content": episode.steps[-1].response_text})
        else:
            messages = list(prompts.initial_messages(task, steps[0].observation))
            for t, step in enumerate(episode.steps):
                if t:
                    messages.append(prompts.turn_message(Episode(task, 0, episode.steps[:t]), step.observation))
                messages.append({"role": "assistant", "content": step.response_text})
        texts.append(template.render(messages=text_only(messages), add_generation_prompt=False))
        texts += role.corpus_texts(render, task, episode)
    return texts


def _first_observation(env: Env, task: Task):
    observation = env.reset(task)
    env.close()
    return observation


def model_dir(cfg: RunConfig, role: str, workdir: Path, corpus_fn) -> Path:
    """The role's Hugging Face directory; "scratch" builds one in the workdir (once)."""
    path = getattr(cfg.model, role).path
    if path not in SCRATCH_PATHS:
        return resolve_model_dir(path)
    out = workdir / "models" / f"{path.replace('_', '-')}-{role}"
    # Process 0 builds it (the others wait): save_pretrained writes from process 0 only. Built aside and
    # renamed into place, so that a run killed mid-build leaves no half model behind.
    if multihost.is_primary() and not (out / "config.json").is_file():
        scratch = out.with_name(f".{out.name}.building")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        build_scratch_model(path, scratch, corpus_fn(), cfg.model.scratch, seed=derive_seed(cfg.seed, "scratch", role))
        os.rename(scratch, out)
    multihost.barrier(f"scratch model {role}")
    return out


def load_model(cfg: RunConfig, role: str, directory: Path, mesh):
    model_cfg = getattr(cfg.model, role)
    # Resolved once here: the model keeps the kernel, so its samplers and learners run the same one.
    attention = resolve_attention(model_cfg.attention_impl, key=f"model.{role}.attention_impl")
    model = load_pretrained(directory, dtype=model_cfg.dtype, mesh=mesh, rules=cfg.sharding.logical_axis_rules,
                            compute_dtype=model_cfg.compute_dtype, attention=attention,
                            scan_layers=model_cfg.scan_layers)
    return model, Tokenizer.from_dir(directory)


def max_cache_length(cfg: RunConfig, role: str) -> int:
    """The longest sequence a role's sampler holds. The policy: two turns' worth of the longest allowed
    prompt and response (room to extend before a repack). The reward model: that, plus its own answer,
    because a judge prompt holds the policy's whole prompt and response (it is never cut). Rounded up to
    a cache bucket, so that a prompt bucket plus new tokens that fits is also a cache length allowed."""
    turns = max(2 * (cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens), 1024)
    return bucket_length(turns + (cfg.reward.max_new_tokens if role == "reward" else 0), 16)


def sampler_for(cfg: RunConfig, role: str, model, tokenizer, mesh) -> Sampler:
    return Sampler(model, tokenizer, mesh=mesh, rules=cfg.sharding.logical_axis_rules,
                   config=SamplerConfig(max_cache_length=max_cache_length(cfg, role), pad_token_id=tokenizer.pad_id))


def learner_for(cfg: RunConfig, role: str, model, tokenizer, mesh) -> Learner:
    graphdef, _ = nnx.split(model)
    return Learner(graphdef=graphdef, train_config=getattr(cfg.train, role), mesh=mesh, eos_id=tokenizer.eos_id,
                   pad_id=tokenizer.pad_id, stop_ids=tuple(tokenizer.stop_token_ids),
                   rules=cfg.sharding.logical_axis_rules,
                   images=ImageTraining.of(model, freeze_vision=cfg.model.freeze_vision))


def build_meshes(cfg: RunConfig) -> placement.Meshes:
    """The learners' and the samplers' meshes (one and the same unless `mesh.placement=split`), their device
    groups connected across processes (`multihost.form_collective_groups`)."""
    meshes = placement.build_meshes(dict(cfg.mesh.shape), cfg.mesh.placement)
    multihost.form_collective_groups((meshes.learner, meshes.sampler))
    return meshes


# ---------------------------------------------------------------- settings

def view(record: type, *sections, **resolved):
    """`record` made of the keys of the same names in `sections` (config sections), and `resolved` values
    (what the config leaves to the platform or combines with switches). Nothing is renamed on the way: a
    key has one name from the config file to the code that reads it, and a key two sections both hold is
    an error, not a silent choice."""
    names = {field.name for field in dataclasses.fields(record)} - set(resolved)
    values: dict = {}
    for section in sections:
        shared = names & {field.name for field in dataclasses.fields(section)}
        if clash := shared & set(values):
            raise ValueError(f"{record.__name__}: {sorted(clash)} in more than one section")
        values.update({name: getattr(section, name) for name in shared})
    return record(**values, **resolved)


def rollout_config(cfg: RunConfig) -> RolloutConfig:
    return view(RolloutConfig, cfg.rollout,
                continuous_batching=cfg.rollout.refills_episodes(jax.default_backend()))


def judge_config(cfg: RunConfig) -> JudgeConfig:
    return view(JudgeConfig, cfg.reward, continuous_batching=cfg.rollout.refills_rows())


def signal_config(cfg: RunConfig) -> SignalConfig:
    """The rewards' weights and bands, with the ablation switches of the paper's Table 1 and Fig. 1."""
    ablation = cfg.ablation_switches
    # No judgment: no step-wise term in the policy's reward.
    step_weight = cfg.reward.step_weight if ablation.use_reward_model else 0.0
    outcome_weight = 1.0 if ablation.outcome_in_policy_reward else 0.0
    return view(SignalConfig, cfg.reward, cfg.train, step_weight=step_weight, outcome_weight=outcome_weight)


def loop_settings(cfg: RunConfig, scenario: Scenario) -> LoopSettings:
    """The loop's constants, with the ablation switches of the paper's Table 1 and Fig. 1."""
    ablation = cfg.ablation_switches
    return view(
        LoopSettings, cfg.rollout, cfg.curriculum,
        rollout=rollout_config(cfg), judge=judge_config(cfg), signal=signal_config(cfg),
        use_reward_model=ablation.use_reward_model,
        pack_turns=cfg.train.policy.pack_turns,
        train_reward_model=ablation.use_reward_model and ablation.train_reward_model and cfg.train.train_reward_model,
        adapt_environment=cfg.curriculum.enabled and ablation.adapt_environment)


def eval_rollout(cfg: RunConfig, settings: LoopSettings) -> RolloutConfig:
    return dataclasses.replace(settings.rollout, group_size=cfg.eval.group_size, max_turns=cfg.eval.max_turns,
                               temperature=cfg.eval.temperature)


def eval_seed(cfg: RunConfig) -> int:
    """Every evaluation's rollout seed: the same for each, so evaluations differ only by the policy."""
    return derive_seed(cfg.seed, "eval")


def eval_tasks_per_call(cfg: RunConfig) -> int:
    """Held-out tasks played per call: a training step's episodes (same compiled shapes, bounded memory)."""
    return max(1, cfg.rollout.tasks_per_step * cfg.rollout.group_size // cfg.eval.group_size)


def task_generator(cfg: RunConfig, scenario: Scenario, workdir: Path, environment_sampler: Sampler | None):
    context = view(GeneratorContext, cfg.curriculum, out_dir=workdir / "games" / "candidates",
                   environment_sampler=environment_sampler, seed=derive_seed(cfg.seed, "environment_model"),
                   continuous_batching=cfg.rollout.refills_rows())
    return scenario.task_generator(context)
