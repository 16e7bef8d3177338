"""Play one task of a scenario and print the transcript and a JSON summary.

    python -m rlanything_jax.play --scenario NAME --seed 3 [--task-type TYPE] --expert
    python -m rlanything_jax.play --scenario NAME --seed 3 --model package:smollm2-135m-instruct

NAME is a registered scenario (`--help` lists them); TYPE picks a kind of task where the
scenario has several (its error message lists them).

The last line of output is the summary: {"won": ..., "steps": ..., "task_id": ...}.

    python -m rlanything_jax.play --env NAME ...

hands the command line to the scenario package's own player, `rlanything_jax.scenarios.NAME.play`
(the desktop scenario's takes --task/--task-file and --expert/--actions and writes screenshots).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

from rlanything_jax.agents.envs.base import InProcessRunner, Observation, Task, make_env
from rlanything_jax.agents.scenario import Scenario
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario, scenario_names


def _show(label: str, text: str) -> None:
    print(f"--- {label}\n{text.rstrip()}")


def play_expert(scenario: Scenario, task: Task, max_steps: int) -> dict:
    env = make_env(task.kind)
    try:
        observation: Observation = env.reset(task)
        _show("observation", observation.text)
        won, steps = False, 0
        for action in scenario.expert.plan(task)[:max_steps]:
            result = env.step(action)
            steps += 1
            _show(f"action {steps}", action)
            _show("observation", result.observation.text)
            won = result.won
            if result.done:
                break
    finally:
        env.close()
    return {"won": bool(won), "steps": steps, "task_id": task.task_id}


def play_model(scenario: Scenario, task: Task, model: str, max_steps: int, max_new_tokens: int, temperature: float,
               seed: int, max_context_tokens: int = 16384) -> dict:
    from rlanything_jax.agents.rollout import RolloutConfig, RolloutEngine
    from rlanything_jax.core.models import load_pretrained
    from rlanything_jax.core.models.registry import resolve_model_dir
    from rlanything_jax.core.models.tokenizer import Tokenizer
    from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
    from rlanything_jax.system.evaluation import play_split

    model_dir = resolve_model_dir(model)
    sampler = Sampler(load_pretrained(model_dir), Tokenizer.from_dir(model_dir),
                      config=SamplerConfig(max_cache_length=max_context_tokens))
    config = RolloutConfig(group_size=1, max_turns=max_steps, max_new_tokens=max_new_tokens,
                           max_prompt_tokens=max_context_tokens - max_new_tokens, temperature=temperature,
                           continuous_batching=True)
    runner = InProcessRunner()
    try:
        [episode] = play_split(RolloutEngine(sampler, runner, scenario.prompts), [task], config, seed)   # as `evaluate`
    finally:
        runner.close()
    if episode.steps:
        _show("observation", episode.steps[0].observation.text)
    for index, step in enumerate(episode.steps, 1):
        _show(f"policy {index} ({step.parse_status})", step.response_text)
        _show(f"action {index}", step.action)
        if step.next_observation is not None:
            _show("observation", step.next_observation.text)
    return {"won": episode.won, "steps": len(episode.steps), "task_id": task.task_id,
            "end_reason": episode.end_reason}


def _env_player(argv: list[str]) -> int | None:
    """`--env NAME`: the exit status of the scenario's own player, or None without --env."""
    for index, arg in enumerate(argv):
        if arg == "--env" or arg.startswith("--env="):
            name = arg.split("=", 1)[1] if "=" in arg else (argv[index + 1] if index + 1 < len(argv) else "")
            try:
                player = importlib.import_module(f"rlanything_jax.scenarios.{name}.play")
            except ModuleNotFoundError:
                print(f"error: no player for --env {name!r}", file=sys.stderr)
                return 2
            return player.main(argv)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    status = _env_player(argv)
    if status is not None:
        return status
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", required=True, help=f"one of {', '.join(scenario_names())}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task-type", default=None, help="the kind of task, where the scenario has several")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--expert", action="store_true", help="play the scenario expert's actions")
    who.add_argument("--model", help="a Hugging Face directory or package:NAME plays with the policy prompt")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-context-tokens", type=int, default=16384, help="the model's prompt and answers")
    parser.add_argument("--out-dir", default=None, help="where generated tasks go (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="rlanything_play_"))
    try:
        scenario = make_scenario(args.scenario)
        importlib.import_module(scenario.env_module)
        task = scenario.play_task(args.seed, args.task_type, out_dir)
        if args.expert:
            if scenario.expert is None:
                raise ValueError(f"scenario {args.scenario!r} has no expert")
            summary = play_expert(scenario, task, args.max_steps)
        else:
            summary = play_model(scenario, task, args.model, args.max_steps, args.max_new_tokens, args.temperature,
                                 args.seed, args.max_context_tokens)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
