"""Driving a whole run: build it, restore or warm-start it, loop over RL steps, write its outputs.

Everything a step changes is in `SystemState` and is checkpointed (policy and reward
train states with their optimizer moments, the task pool, the step); the samplers are
rebuilt from the restored params. Re-running the same command after a crash resumes
from the newest readable checkpoint; metrics lines written after it are dropped. A run
that already finished says so and changes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from rlanything_jax.agents.curriculum.task_pool import TaskPool, pool_from_json, pool_to_json
from rlanything_jax.agents.envs import sandbox
from rlanything_jax.agents.envs.base import make_env
from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.envs.shared_runner import ProcessShardedRunner
from rlanything_jax.agents.reward_models import RewardModel
from rlanything_jax.agents.rollout import RolloutEngine
from rlanything_jax.agents.scenario import Scenario, TaskSets
from rlanything_jax.core import multihost, progress
from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like
from rlanything_jax.core.models import lora
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.train_state import TrainState, sampler_weights
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.seeds import derive_seed
from rlanything_jax.system import assemble, evaluation, traces, warm_start
from rlanything_jax.system.config import RunConfig
from rlanything_jax.system.loop import LoopSettings, Services, SystemState, rl_step
from rlanything_jax.system.metrics import (
    MetricsWriter,
    NullMetricsWriter,
    format_step_line,
    process_memory,
    release_host_memory,
)
from rlanything_jax.system.summary import finish
from rlanything_jax.system.trackers import tracker_names

CHECKPOINTS = "checkpoints"


class RunError(RuntimeError):
    """A run cannot start or go on; the message says why in one line."""


@dataclasses.dataclass
class System:
    """A built run: what the loop uses, and where its outputs go."""

    cfg: RunConfig
    workdir: Path
    scenario: Scenario
    tasks: TaskSets
    services: Services
    settings: LoopSettings
    runner: EnvRunner
    samplers: dict[str, Sampler]      # by role: "policy", "reward"
    learners: dict[str, Learner]
    expert_env: Any
    probe: Callable[[], dict[str, float]]

    def initial_state(self) -> SystemState:
        seeds = {role: derive_seed(self.cfg.seed, "lora", role) for role in ("policy", "reward")}
        policy = self.learners["policy"].fresh_state(self.samplers["policy"].params, seed=seeds["policy"])
        # A shared base (model.reward.share_base): the reward model's adapters on the policy's base arrays.
        reward_base = policy.base if self.cfg.model.reward.share_base else self.samplers["reward"].params
        reward = self.learners["reward"].fresh_state(reward_base, seed=seeds["reward"])
        return SystemState(step=0, policy=policy, reward=reward, pool=TaskPool.from_tasks(self.tasks.train))


def prepare_workdir(cfg: RunConfig) -> Path:
    workdir = Path(cfg.workdir).expanduser().resolve()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        probe = workdir / f".writable-{os.getpid()}"   # one per process: several may share the workdir
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise RunError(f"config.workdir: cannot write to {workdir}: {error.strerror or error}") from None
    return workdir


def finished_step(workdir: Path) -> int | None:
    """The newest checkpointed step of a workdir (None when it has none), without loading anything."""
    directory = workdir / CHECKPOINTS
    steps = [int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit()] if directory.is_dir() else []
    return max(steps) if steps else None


def build_system(cfg: RunConfig, workdir: Path, log: Callable[[str], None]) -> System:
    """Checks the inputs, then builds tasks, models, samplers, learners, runner and generator."""
    scenario = assemble.build_scenario(cfg)
    if scenario.runs_untrusted_code:
        try:
            mode = sandbox.require_strong_isolation(cfg.env.allow_weak_sandbox)
        except sandbox.SandboxUnavailable as error:
            raise RunError(str(error)) from None
        log(f"untrusted code runs in the {mode} sandbox")
    for role in ("policy", "reward", "environment"):   # fail on a bad model path before any slow work
        path = getattr(cfg.model, role).path
        if path not in assemble.SCRATCH_PATHS and (role != "environment" or cfg.curriculum.generator == "env_model"):
            assemble.resolve_model_dir(path)
    try:
        meshes = assemble.build_meshes(cfg)
    except ValueError as error:
        raise RunError(str(error)) from None
    if meshes.split:
        log(f"learners on {meshes.learner.devices.size} devices, samplers on {meshes.sampler.devices.size} others")
    log(f"building {cfg.scenario} tasks in {workdir / 'games'}")
    tasks = assemble.build_tasks(cfg, scenario, workdir / "games")
    importlib.import_module(scenario.env_module)
    expert_env = make_env(tasks.train[0].kind)

    def corpus():
        return assemble.scratch_corpus(scenario, tasks.warm_start or tasks.train[:cfg.warm_start.num_tasks],
                                       expert_env)

    samplers, learners, loaded = {}, {}, {}
    for role in assemble.ROLES:
        directory = assemble.model_dir(cfg, role, workdir, corpus)
        if role == "reward" and cfg.model.reward.share_base:   # the policy's model, loaded once
            model, tokenizer = loaded["policy"]
        else:
            model, tokenizer = loaded[role] = assemble.load_model(cfg, role, directory, meshes.learner)
        samplers[role] = assemble.sampler_for(cfg, role, model, tokenizer, meshes.sampler)
        learners[role] = assemble.learner_for(cfg, role, model, tokenizer, meshes.learner)
        log(f"{role} model: {directory}")
    settings = assemble.loop_settings(cfg, scenario)
    environment_sampler = None
    if settings.adapt_environment and cfg.curriculum.generator == "env_model":
        directory = assemble.model_dir(cfg, "environment", workdir, corpus)
        model, tokenizer = assemble.load_model(cfg, "environment", directory, meshes.sampler)
        environment_sampler = Sampler(model, tokenizer, mesh=meshes.sampler, rules=cfg.sharding.logical_axis_rules)
    runner = EnvRunner(num_workers=cfg.env.workers or None, step_timeout_s=cfg.env.step_timeout_s,
                       env_modules=(scenario.env_module,))
    if jax.process_count() > 1:   # each process drives its share of the episodes; all see every result
        runner = ProcessShardedRunner(runner, jax.process_index(), jax.process_count())
    expert = scenario.expert
    services = Services(
        policy=RolloutEngine(samplers["policy"], runner, scenario.prompts),
        policy_trainer=learners["policy"], reward_trainer=learners["reward"],
        reward_model=RewardModel(assemble.reward_model_role(cfg, scenario), samplers["reward"]),
        generator=assemble.task_generator(cfg, scenario, workdir, environment_sampler),
        step_labeler=None if expert is None else expert.step_label, seed=cfg.seed, log=log,
        write_traces=_trace_writer(workdir, cfg.loop.traces_per_step, log))
    system = System(cfg=cfg, workdir=workdir, scenario=scenario, tasks=tasks, services=services, settings=settings,
                    runner=runner, samplers=samplers, learners=learners, expert_env=expert_env, probe=dict)
    system.probe = _judge_probe(system)
    return system


def _trace_writer(workdir: Path, count: int, log: Callable[[str], None]):
    if count == 0 or not multihost.is_primary():
        return None

    def write(step: int, judged) -> None:
        try:
            traces.write_step_traces(judged, count, workdir / "traces" / f"step_{step:04d}")
        except OSError as error:   # a full disk must not end the run over pictures
            log(f"step {step}: episode traces not written: {error}")
    return write


def _judge_probe(system: System) -> Callable[[], dict[str, float]]:
    """The reward model's accuracy on a fixed probe of held-out tasks, where its role has one (e.g. expert-labelled
    steps, `agents/reward_models/probe.py`), as a function of the reward sampler's current weights; a no-op without
    a probe."""
    cfg, settings, reward_model = system.cfg, system.settings, system.services.reward_model
    count = min(cfg.eval.judge_probe_tasks, len(system.tasks.eval))
    if not (count and settings.use_reward_model and system.scenario.expert is not None):
        return dict
    # The run's seed each time: the same samples' randomness at every probe.
    measure = reward_model.role.probe(reward_model.sampler, system.tasks.eval[:count], system.scenario,
                                      system.expert_env, settings.judge, cfg.seed, cfg.warm_start.negatives_per_step)
    if measure is None:
        return dict
    if settings.train_reward_model:
        return measure
    # A reward model that is not trained gives the same figures every step: judge the probe once.
    once = functools.cache(measure)
    return lambda: {k: v for k, v in once().items() if k != "time/judge_probe_s"}


def _sync_samplers(system: System, state: SystemState) -> None:
    system.samplers["policy"].update_params(sampler_weights(state.policy))
    system.samplers["reward"].update_params(sampler_weights(state.reward))


def evaluate_split(system: System, tasks: list, log: Callable[[str], None] | None = None) -> tuple[list, dict]:
    """The current policy on `tasks` with the config's evaluation settings: the episodes and their
    `evaluation.success_report` (what the loop's `eval/...` figures and `python -m rlanything_jax.evaluate` show)."""
    return evaluation.held_out(system.services.policy, tasks, assemble.eval_rollout(system.cfg, system.settings),
                               assemble.eval_seed(system.cfg), assemble.eval_tasks_per_call(system.cfg), log)


def _evaluate(system: System) -> dict[str, float]:
    if not system.tasks.eval:
        return {}
    cfg = system.cfg
    episodes, report = evaluate_split(system, system.tasks.eval)
    metrics = evaluation.loop_metrics(report)
    reward_model = system.services.reward_model
    if reward_model is not None and reward_model.role.held_out_judgments:
        # The reward model on the held-out tasks, where its role is measured there (e.g. its unit tests, as the
        # reference's coding evaluation measures them).
        config = dataclasses.replace(system.settings.judge, num_judgments=reward_model.role.held_out_judgments)
        _, figures = evaluation.reward_model_report(episodes, reward_model, config, cfg.seed, None)
        metrics.update({f"eval/{key}": value for key, value in figures.items()})
    return metrics


def _warm_start(system: System, state: SystemState, log: Callable[[str], None]) -> SystemState:
    cfg, learners = system.cfg, system.learners
    policy_examples, reward_examples = warm_start.warm_start_examples(
        system.scenario, system.services.reward_model.role, system.tasks.warm_start, system.expert_env,
        system.samplers["policy"].tokenizer, system.samplers["reward"].tokenizer, cfg.warm_start, cfg.seed,
        system.samplers["reward"].image_inputs)
    log(f"warm start: {len(policy_examples)} policy and {len(reward_examples)} reward-model examples "
        f"from {len(system.tasks.warm_start)} expert tasks")
    policy = warm_start.train_supervised(learners["policy"], state.policy, policy_examples, cfg.warm_start,
                                         cfg.warm_start.policy_epochs, cfg.seed, "policy", log)
    reward = warm_start.train_supervised(learners["reward"], state.reward, reward_examples, cfg.warm_start,
                                         cfg.warm_start.reward_epochs, cfg.seed, "reward", log)
    return dataclasses.replace(state, policy=policy, reward=reward)


def _checkpointed(state: SystemState) -> dict[str, TrainState]:
    """The train states as checkpointed: under LoRA, the adapters and their optimizer state, not the base."""
    return {"policy": state.policy.replace(base=None), "reward": state.reward.replace(base=None)}


def _save(checkpointer: SystemCheckpointer, state: SystemState) -> None:
    checkpointer.save(state.step, _checkpointed(state), {"pool": pool_to_json(state.pool), "step": state.step})


def restore_state(system: System, checkpointer: SystemCheckpointer, fresh: SystemState,
                  step: int | None = None) -> SystemState | None:
    """The newest checkpoint's state (or `step`'s), shaped like `fresh`, its weights in the samplers; None
    without a checkpoint."""
    restored = checkpointer.restore_latest(abstract_like(_checkpointed(fresh)), step)
    if restored is None:
        return None
    # Under LoRA a checkpoint holds the adapters: the frozen base is the one loaded at start.
    state = SystemState(step=restored.step, policy=restored.arrays["policy"].replace(base=fresh.policy.base),
                        reward=restored.arrays["reward"].replace(base=fresh.reward.base),
                        pool=pool_from_json(restored.json["pool"]))
    _sync_samplers(system, state)
    return state


def restore_or_start(system: System, checkpointer: SystemCheckpointer, writer: MetricsWriter,
                     log: Callable[[str], None]) -> SystemState:
    """The newest checkpoint's state, or a fresh one after the warm start and the step-0 evaluation
    (saved as step 0)."""
    state = system.initial_state()
    restored = restore_state(system, checkpointer, state)
    if restored is not None:
        state = restored
        writer.resume(state.step)
        log(f"resumed from step {state.step} ({checkpointer.directory})")
        return state
    writer.resume(None)
    if system.cfg.warm_start.enabled and system.scenario.expert is not None:
        state = _warm_start(system, state, log)
        _sync_samplers(system, state)
        release_host_memory()   # the warm start's freed buffers
    line = _evaluate(system)
    line.update(system.probe())
    writer.write(0, line)
    probe = line.get("reward_model/probe_step_accuracy")
    log(f"step 0 (start): held-out success {line.get('eval/success_rate', float('nan')):.3f}"
        + (f", RM probe step accuracy {probe:.3f}" if probe is not None else ""))
    _save(checkpointer, state)
    return state


def run_loop(system: System, state: SystemState, checkpointer: SystemCheckpointer, writer: MetricsWriter,
             log: Callable[[str], None]) -> SystemState:
    """RL steps up to `loop.total_steps`, with evaluation, metrics and checkpoints."""
    loop = system.cfg.loop
    while state.step < loop.total_steps:
        state, metrics = rl_step(state, system.services, system.settings)
        for role, sampler in system.samplers.items():
            metrics[f"sampler/{role}_compilations"] = sum(sampler.compilations.values())  # so far, in this process
        metrics.update(process_memory())   # after the step's updates: what the next step starts from
        metrics.update(system.probe())
        if state.step % loop.eval_every == 0 or state.step == loop.total_steps:
            metrics.update(_evaluate(system))
            metrics["memory/host_released_gib"] = metrics.get("memory/host_released_gib", 0.0) + release_host_memory()
        writer.write(state.step, metrics)
        log(format_step_line(state.step, loop.total_steps, metrics))
        if state.step % loop.save_every == 0 or state.step == loop.total_steps:
            _save(checkpointer, state)
    return state


def export_adapted_models(system: System, state: SystemState, log: Callable[[str], None]) -> None:
    """Each LoRA-trained role's final model in `<workdir>/export/<role>`: merged (a Hugging Face checkpoint)
    and its adapters in PEFT's format (`adapter/`)."""
    for role, train_state in (("policy", state.policy), ("reward", state.reward)):
        if train_state.base is None:
            continue
        out = system.workdir / "export" / role
        lora.export_adapted(system.learners[role].graphdef, train_state.base, train_state.params,
                            system.learners[role].train_config.lora, out,
                            base_model=getattr(system.cfg.model, role).path)
        log(f"{role}: merged model and PEFT adapters written to {out}")


def run_rl(cfg: RunConfig, log: Callable[[str], None] = print) -> dict:
    """Runs (or resumes) the configured RL run; returns the summary written to summary.json."""
    workdir = prepare_workdir(cfg)
    done = finished_step(workdir)
    if done is not None and done >= cfg.loop.total_steps and (workdir / "summary.json").is_file():
        log(f"this run is already complete (step {done} of {cfg.loop.total_steps}); nothing to do. "
            f"Outputs: {workdir}")
        return json.loads((workdir / "summary.json").read_text())
    started = time.perf_counter()
    progress.set_sink(log)   # long phases' progress lines (rollouts, judging, training, adaptation) go to the log
    primary = multihost.is_primary()   # of several processes, only process 0 writes the run's files
    if primary:
        (workdir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2, default=str) + "\n")
    system = build_system(cfg, workdir, log)
    checkpointer = SystemCheckpointer(workdir / CHECKPOINTS, max_to_keep=2)
    writer = (MetricsWriter(workdir, tracker_names(cfg.loop.trackers), dataclasses.asdict(cfg)) if primary
              else NullMetricsWriter())
    try:
        state = restore_or_start(system, checkpointer, writer, log)
        state = run_loop(system, state, checkpointer, writer, log)
        export_adapted_models(system, state, log)
    finally:
        checkpointer.close()
        writer.close()
        system.runner.close()
    if cfg.loop.export_at_end:
        from rlanything_jax.system import model_export  # every process: the weights are gathered from all of them

        for role in assemble.ROLES:
            if getattr(cfg.train, role).lora.enabled:   # written by export_adapted_models already
                continue
            written = model_export.export(workdir, role, workdir / "export" / role)
            log(f"exported the {role} of step {written['step']} to {written['out']}")
    if not primary:
        return {"process_index": jax.process_index(), "outputs": "written by process 0", "workdir": str(workdir)}
    return finish(cfg, workdir, time.perf_counter() - started, checkpointer.blocking_save_s)
