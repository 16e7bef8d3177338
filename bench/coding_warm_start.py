"""What the coding warm start gives: the policy's pass rate and the reward model's unit tests after it.

    .venv/bin/python bench/coding_warm_start.py [--config configs/coding.py:cpu] [--workdir DIR]
        [--samples 4] [--rm-temperatures 1.0,0.5] [override ...]
    (overrides as on the command line: warm_start.policy_epochs=12)

Builds the configured coding run's tasks and scratch models (as `run.build_system` does), runs the
warm start (`warm_start.warm_start_examples` + `train_supervised`, as `run._warm_start`), then samples
`--samples` programs per training and held-out problem at the rollout temperature (and one greedy)
and has the reward model write its m unit tests for the training problems (at the configured
temperature, and at each of `--rm-temperatures`). Prints the timings and
one JSON line: pass rates (all GT tests passed) and mean fraction of tests passed, the unit tests'
parse rate, UT accuracy and Detect (`reward_models.unit_tests.unit_test_metrics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlanything_jax.agents.envs.base import Observation, make_env  # noqa: E402
from rlanything_jax.agents.reward_models.unit_tests import unit_test_metrics, write_unit_tests  # noqa: E402
from rlanything_jax.agents.trajectory import Episode, StepRecord  # noqa: E402
from rlanything_jax.core.rl.train_state import init_train_state  # noqa: E402
from rlanything_jax.core.sampling.strategies import make_strategy  # noqa: E402
from rlanything_jax.scenarios.coding import env as coding  # noqa: E402
from rlanything_jax.system import assemble, warm_start  # noqa: E402
from rlanything_jax.system.config import load_config  # noqa: E402


def sample_programs(sampler, prompts, tasks, num_samples, max_new_tokens, temperature, seed):
    """num_samples programs per task: (task, response text, program) in task order."""
    tokens = [sampler.tokenizer.encode_chat(prompts.initial_messages(t, Observation(t.goal))) for t in tasks]
    completions = sampler.generate(tokens, max_new_tokens, make_strategy(temperature), seed=seed,
                                   num_samples=num_samples)
    return [(tasks[i // num_samples], c.text or "", prompts.parse_action(c.text or "", None).action)
            for i, c in enumerate(completions)]


def pass_figures(samples) -> dict[str, float]:
    scores = [coding.step_info(coding.task_verdicts(task, program))["score"] for task, _, program in samples]
    solved = {task.task_id for (task, _, _), s in zip(samples, scores) if s == 1.0}
    return {"pass_rate": sum(s == 1.0 for s in scores) / len(scores), "mean_score": sum(scores) / len(scores),
            "tasks_solved_once": len(solved) / len({task.task_id for task, _, _ in samples})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/coding.py:cpu")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--rm-temperatures", default="", help="comma-separated; also write tests at these")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="coding_warm_start_"))
    started = time.perf_counter()
    timings = {}

    scenario = assemble.build_scenario(cfg)
    tasks = assemble.build_tasks(cfg, scenario, workdir / "games")
    importlib.import_module(scenario.env_module)
    expert_env = make_env(tasks.train[0].kind)
    mesh = assemble.build_meshes(cfg).learner
    samplers, learners = {}, {}
    for role in assemble.ROLES:
        directory = assemble.model_dir(cfg, role, workdir, lambda: assemble.scratch_corpus(
            scenario, tasks.warm_start or tasks.train[:cfg.warm_start.num_tasks], expert_env))
        model, tokenizer = assemble.load_model(cfg, role, directory, mesh)
        samplers[role] = assemble.sampler_for(cfg, role, model, tokenizer, mesh)
        learners[role] = assemble.learner_for(cfg, role, model, tokenizer, mesh)
    timings["build_s"] = time.perf_counter() - started

    policy_examples, reward_examples = warm_start.warm_start_examples(
        scenario, assemble.reward_model_role(cfg, scenario), tasks.warm_start, expert_env,
        samplers["policy"].tokenizer, samplers["reward"].tokenizer, cfg.warm_start, cfg.seed)
    print(f"{len(policy_examples)} policy and {len(reward_examples)} reward-model examples from "
          f"{len(tasks.warm_start)} warm-start problems", flush=True)
    for role, examples, epochs in (("policy", policy_examples, cfg.warm_start.policy_epochs),
                                   ("reward", reward_examples, cfg.warm_start.reward_epochs)):
        t0 = time.perf_counter()
        state = init_train_state(samplers[role].params, learners[role].tx)
        state = warm_start.train_supervised(learners[role], state, examples, cfg.warm_start, epochs, cfg.seed,
                                            role, lambda line: print(line, flush=True))
        samplers[role].update_params(state.params)
        timings[f"warm_start_{role}_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    prompts, rollout = scenario.prompts, cfg.rollout
    figures = {}
    for name, task_set in (("train", tasks.train), ("eval", tasks.eval)):
        sampled = sample_programs(samplers["policy"], prompts, task_set, args.samples, rollout.max_new_tokens,
                                  rollout.temperature, seed=1)
        figures[name] = pass_figures(sampled)
        figures[name]["greedy_pass_rate"] = pass_figures(sample_programs(
            samplers["policy"], prompts, task_set, 1, rollout.max_new_tokens, 0.0, seed=0))["pass_rate"]
        if name == "train":
            train_samples = sampled
    print("a training problem and a sampled program:\n" + train_samples[0][0].goal + "\n" + train_samples[0][1],
          flush=True)
    timings["policy_sampling_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    groups: dict[str, list[Episode]] = {}
    for g, (task, text, program) in enumerate(train_samples):
        step = StepRecord(observation=Observation(task.goal), prompt_tokens=(), response_tokens=(), logprobs=(),
                          response_text=text, finish_reason="stop", action=program, parse_status="ok")
        groups.setdefault(task.task_id, []).append(Episode(task=task, group_index=g, steps=(step,)))
    settings = assemble.loop_settings(cfg, scenario)
    judgments, metrics = write_unit_tests(samplers["reward"], prompts, groups, settings.judge, cfg.seed)
    figures["unit_tests"] = unit_test_metrics(judgments)
    figures["unit_tests"]["parse_statuses"] = {k.rsplit("/", 1)[1]: v for k, v in metrics.items()
                                               if k.startswith("parse/")}
    for temperature in [float(t) for t in args.rm_temperatures.split(",") if t]:
        config = dataclasses.replace(settings.judge, temperature=temperature)
        figures[f"unit_tests_at_{temperature}"] = unit_test_metrics(
            write_unit_tests(samplers["reward"], prompts, groups, config, cfg.seed)[0])
    first = next(iter(judgments.values()))
    print("a training problem and a generated test:\n" + next(iter(groups.values()))[0].task.goal + "\n"
          + samplers["reward"].tokenizer.decode(list(first.samples[0][0])), flush=True)
    timings["unit_tests_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - started
    print(json.dumps({"config": args.config, "overrides": args.overrides, **figures,
                      "timings": {k: round(v, 1) for k, v in timings.items()}}))


if __name__ == "__main__":
    main()
