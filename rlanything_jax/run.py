"""Driving a whole run: warm start, RL steps, held-out evaluation, checkpoints, resume, outputs.

Everything a step changes is in `SystemState` and is checkpointed (policy and reward
train states with their optimizer moments, the task pool, the step); the samplers are
rebuilt from the restored params. Re-running the same command after a crash resumes
from the newest readable checkpoint; metrics lines written after it are dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rlanything_jax import assemble, sft
from rlanything_jax.checkpoint import SystemCheckpointer, abstract_like
from rlanything_jax.curriculum.task_pool import TaskPool, pool_from_json, pool_to_json
from rlanything_jax.judge_probe import build_judge_probe, probe_accuracy
from rlanything_jax.loop import Services, SystemState, evaluate, rl_step
from rlanything_jax.metrics import MetricsWriter, format_step_line, plot_curves, read_metrics
from rlanything_jax.rl.train_state import init_train_state
from rlanything_jax.sampling.sampler import Sampler

CURVES = ("rollout/success_rate", "eval/success_rate", "reward_model/step_accuracy",
          "reward_model/probe_step_accuracy", "reward_model/outcome_accuracy", "curriculum/accepted_total", "time/step_s")


def _warm_start(cfg, services: Services, state: SystemState, tasks, env, log) -> SystemState:
    """SFT of policy and reward model on the expert's play of the warm-start tasks."""
    rng = np.random.default_rng(cfg.seed)
    policy_tok, reward_tok = services.policy_sampler.tokenizer, services.reward_sampler.tokenizer
    policy_examples, reward_examples = [], []
    search = cfg.warm_start.demonstrations == "search"
    for task in tasks:
        plan = assemble.expert_plan(task)
        steps = sft.play_searching_expert(task, plan, rng, env) if search else sft.play_expert(task, plan, env)
        policy_examples += sft.policy_sft_examples(sft.expert_episode(task, steps, services.scenario, policy_tok))
        if cfg.warm_start.reward_epochs:
            # The expert's step labels (warm_start.step_labels), also those the RM's step accuracy is measured by.
            reward_examples += sft.reward_sft_examples(reward_tok, services.scenario, task, steps, rng,
                                                       cfg.warm_start.negatives_per_step, env, plan=plan,
                                                       labels=cfg.warm_start.step_labels)
    log(f"warm start: {len(policy_examples)} policy and {len(reward_examples)} reward-model examples "
        f"from {len(tasks)} expert games")
    lr, batch = cfg.warm_start.learning_rate, cfg.warm_start.batch_size
    learner = _supervised(services.policy_learner, lr, batch, len(policy_examples))
    warm = init_train_state(state.policy.params, learner.tx)
    warm, _ = sft.supervised_epochs(learner, warm, policy_examples, cfg.warm_start.policy_epochs, cfg.seed,
                                    "policy", log)
    policy = init_train_state(warm.params, services.policy_learner.tx)
    reward = state.reward
    if reward_examples:
        learner = _supervised(services.reward_learner, lr, batch, len(reward_examples))
        warm = init_train_state(state.reward.params, learner.tx)
        warm, _ = sft.supervised_epochs(learner, warm, reward_examples, cfg.warm_start.reward_epochs, cfg.seed,
                                        "reward", log)
        reward = init_train_state(warm.params, services.reward_learner.tx)
    services.policy_sampler.update_params(policy.params)
    services.reward_sampler.update_params(reward.params)
    return SystemState(step=0, policy=policy, reward=reward, pool=state.pool)


def _judge_probe(cfg, settings, services: Services, eval_tasks, env) -> Callable[[], dict[str, float]]:
    """The reward model's accuracy on a fixed probe of expert-labelled held-out steps (`judge_probe`), as a
    function of the reward sampler's current weights; a no-op without a probe."""
    count = min(cfg.eval.judge_probe_tasks, len(eval_tasks))
    if not (count and settings.judge_steps and cfg.env.kind in ("alfworld", "textworld")):
        return dict
    tasks = list(eval_tasks[:count])
    probe = build_judge_probe(tasks, [assemble.expert_plan(t) for t in tasks], services.scenario,
                              services.reward_sampler.tokenizer, cfg.warm_start.step_labels, cfg.seed,
                              max_prompt_tokens=settings.judge.max_prompt_tokens, env=env)
    config = dataclasses.replace(settings.judge, seed=cfg.seed)  # the same samples' randomness every time
    measure = functools.partial(probe_accuracy, services.reward_sampler, services.scenario, probe, config)
    if settings.train_reward_model:
        return measure
    # A reward model that is not trained gives the same figures every step: judge the probe once.
    once = functools.cache(measure)
    return lambda: {k: v for k, v in once().items() if k != "time/judge_probe_s"}


def _supervised(learner, learning_rate: float, batch_size: int, num_examples: int):
    """The learner with SFT settings: its own constant learning rate (not the RL schedule), updates of
    `batch_size` examples."""
    config = {**learner.train_config, "learning_rate": learning_rate, "schedule": "constant", "ppo_epochs": 1,
              "micro_batch_size": batch_size, "updates_per_step": max(1, math.ceil(num_examples / batch_size))}
    return dataclasses.replace(learner, train_config=config, compiled={})


def _save(checkpointer: SystemCheckpointer, state: SystemState, extra: dict) -> None:
    checkpointer.save(state.step, {"policy": state.policy, "reward": state.reward},
                      {"pool": pool_to_json(state.pool), "step": state.step, **extra})


def run_rl(cfg, log: Callable[[str], None] = print) -> dict:
    """Runs (or resumes) the configured RL run; returns the summary written to summary.json."""
    workdir = Path(cfg.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    mesh = assemble.build_mesh(cfg)
    log(f"building {cfg.env.kind} tasks in {workdir / 'games'}")
    tasks = assemble.build_tasks(cfg, workdir / "games")
    train_tasks, eval_tasks = tasks.train, tasks.eval
    from rlanything_jax.envs.base import make_env

    expert_env = make_env(cfg.env.kind)

    def corpus():
        return assemble.scratch_corpus(cfg, tasks.warm_start or train_tasks[:cfg.warm_start.num_tasks], expert_env)

    samplers, learners = {}, {}
    for role in ("policy", "reward"):
        directory = assemble.model_dir(cfg, role, workdir, corpus)
        model, tokenizer = assemble.load_model(cfg, role, directory, mesh)
        samplers[role] = assemble.sampler_for(cfg, model, tokenizer, mesh)
        learners[role] = assemble.learner_for(cfg, role, model, tokenizer, mesh)
        log(f"{role} model: {directory}")
    settings = assemble.loop_settings(cfg)
    environment_sampler = None
    if settings.adapt_environment and cfg.curriculum.generator == "env_model":
        directory = assemble.model_dir(cfg, "environment", workdir, corpus)
        model, tokenizer = assemble.load_model(cfg, "environment", directory, mesh)
        environment_sampler = Sampler(model, tokenizer, mesh=mesh, rules=cfg.sharding.logical_axis_rules)
    from rlanything_jax.envs.runner import EnvRunner

    runner = EnvRunner(num_workers=cfg.env.workers or None, step_timeout_s=cfg.env.step_timeout_s)
    scenario = assemble.build_scenario(cfg)
    services = Services(policy_sampler=samplers["policy"], reward_sampler=samplers["reward"],
                        policy_learner=learners["policy"], reward_learner=learners["reward"], runner=runner,
                        scenario=scenario, generator=assemble.task_generator(cfg, workdir, environment_sampler),
                        step_labeler=functools.partial(assemble.expert_step_label, kind=cfg.warm_start.step_labels),
                        seed=cfg.seed, log=log)
    judge_rm = _judge_probe(cfg, settings, services, eval_tasks, expert_env)
    state = SystemState(step=0,
                        policy=init_train_state(samplers["policy"].params, learners["policy"].tx),
                        reward=init_train_state(samplers["reward"].params, learners["reward"].tx),
                        pool=TaskPool.from_tasks(train_tasks))
    checkpointer = SystemCheckpointer(workdir / "checkpoints", max_to_keep=2)
    writer = MetricsWriter(workdir)
    restored = checkpointer.restore_latest(abstract_like({"policy": state.policy, "reward": state.reward}))
    eval_rollout = assemble.eval_rollout(cfg, settings)
    # Held-out episodes per call = a training step's: same compiled shapes, bounded memory.
    eval_chunk = max(1, cfg.rollout.tasks_per_step * cfg.rollout.group_size // cfg.eval.group_size)
    try:
        if restored is not None:
            state = SystemState(step=restored.step, policy=restored.arrays["policy"],
                                reward=restored.arrays["reward"], pool=pool_from_json(restored.json["pool"]))
            samplers["policy"].update_params(state.policy.params)
            samplers["reward"].update_params(state.reward.params)
            writer.resume(state.step)
            log(f"resumed from step {state.step} ({workdir / 'checkpoints'})")
        else:
            writer.resume(None)
            if cfg.warm_start.enabled:
                state = _warm_start(cfg, services, state, tasks.warm_start, expert_env, log)
            line = evaluate(samplers["policy"], runner, scenario, eval_tasks, eval_rollout, eval_chunk) if eval_tasks else {}
            line.update(judge_rm())
            writer.write(0, line)
            probe = f", RM probe step accuracy {line['reward_model/probe_step_accuracy']:.3f}" if line.get(
                "reward_model/probe_step_accuracy") is not None else ""
            log(f"step 0 (warm start): held-out success {line.get('eval/success_rate', float('nan')):.3f}{probe}")
            _save(checkpointer, state, {})
        while state.step < cfg.loop.total_steps:
            state, metrics = rl_step(state, services, settings)
            metrics.update(judge_rm())
            if eval_tasks and (state.step % cfg.loop.eval_every == 0 or state.step == cfg.loop.total_steps):
                metrics.update(evaluate(samplers["policy"], runner, scenario, eval_tasks, eval_rollout, eval_chunk))
            writer.write(state.step, metrics)
            log(format_step_line(state.step, cfg.loop.total_steps, metrics))
            if state.step % cfg.loop.save_every == 0 or state.step == cfg.loop.total_steps:
                _save(checkpointer, state, {})
    finally:
        checkpointer.close()
        writer.close()
        runner.close()
    return _finish(cfg, workdir, time.perf_counter() - started)


def _finish(cfg, workdir: Path, seconds: float) -> dict:
    lines = read_metrics(workdir / "metrics.jsonl")
    evals = [(line["step"], line["eval/success_rate"]) for line in lines
             if isinstance(line.get("eval/success_rate"), float) and not math.isnan(line["eval/success_rate"])]
    summary = {"scenario": cfg.env.kind, "ablation": cfg.ablation, "seed": cfg.seed, "steps": cfg.loop.total_steps,
               "held_out_success_start": evals[0][1] if evals else None,
               "held_out_success_end": evals[-1][1] if evals else None,
               "accepted_tasks": max((line.get("curriculum/accepted_total", 0) for line in lines), default=0),
               "seconds_this_session": round(seconds, 1)}
    for key in ("reward_model/step_accuracy", "reward_model/probe_step_accuracy", "reward_model/outcome_accuracy"):
        values = [line[key] for line in lines if isinstance(line.get(key), float)]
        summary[key + "_first"], summary[key + "_last"] = (values[0], values[-1]) if values else (None, None)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_curves(lines, CURVES, workdir / "curves.png", title=f"{cfg.env.kind} / {cfg.ablation} / seed {cfg.seed}")
    return summary
