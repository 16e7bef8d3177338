"""Play one generated game or coding task and print the transcript and a JSON summary.

    python -m rlanything_jax.envs.play --env alfworld --seed 3 --task-type pick_heat_then_place_in_recep --expert
    python -m rlanything_jax.envs.play --env textworld --seed 1 --task-type coin_collector --expert
    python -m rlanything_jax.envs.play --env coding --seed 0 --task-type humaneval --expert
    python -m rlanything_jax.envs.play --env alfworld --seed 3 --model package:smollm2-135m-instruct

The last line of output is the summary: {"won": ..., "steps": ..., "task_id": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from rlanything_jax.envs.base import InProcessRunner, Observation, Task, make_env

ENVS = ("alfworld", "textworld", "coding")


def make_play_task(env: str, seed: int, task_type: str | None, out_dir: str) -> Task:
    if env == "alfworld":
        from rlanything_jax.envs import alfworld
        from rlanything_jax.envs.alfworld_gen import TASK_TYPES
        from rlanything_jax.envs.alfworld_knobs import GameKnobs

        kind = task_type or TASK_TYPES[seed % len(TASK_TYPES)]
        if kind not in TASK_TYPES:
            raise ValueError(f"--task-type for alfworld must be one of {', '.join(TASK_TYPES)}")
        return alfworld.make_task(seed, kind, GameKnobs(), out_dir)
    if env == "textworld":
        from rlanything_jax.envs import textworld

        kind = task_type or "coin_collector"
        if kind not in textworld.KINDS:
            raise ValueError(f"--task-type for textworld must be one of {', '.join(textworld.KINDS)}")
        return textworld.make_task(seed, textworld.TextWorldKnobs(kind=kind), out_dir)
    from rlanything_jax.envs import coding

    kind = task_type or "humaneval"
    if kind not in ("humaneval", "stdio"):
        raise ValueError("--task-type for coding must be humaneval or stdio")
    tasks = coding.humaneval_tasks() if kind == "humaneval" else coding.builtin_stdio_tasks()
    return tasks[seed % len(tasks)]


def expert_actions(task: Task) -> list[str]:
    if task.kind == "alfworld":
        from rlanything_jax.envs.alfworld import expert_actions as alfworld_expert
        return alfworld_expert(task)
    if task.kind == "textworld":
        from rlanything_jax.envs.textworld import expert_actions as textworld_expert
        return textworld_expert(task)
    payload = task.payload
    if payload["format"] == "function":
        return [payload["prompt"] + payload["canonical_solution"]]
    return [payload["reference_solution"]]


def _show(label: str, text: str) -> None:
    print(f"--- {label}\n{text.rstrip()}")


def play_expert(task: Task, max_steps: int) -> dict:
    env = make_env(task.kind)
    try:
        observation: Observation = env.reset(task)
        _show("observation", observation.text)
        won, steps = False, 0
        for action in expert_actions(task)[:max_steps]:
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


def play_model(task: Task, model: str, max_steps: int, max_new_tokens: int, temperature: float, seed: int) -> dict:
    from rlanything_jax.agents.rollout import RolloutConfig, play_episodes
    from rlanything_jax.models import load_pretrained
    from rlanything_jax.models.registry import resolve_model_dir
    from rlanything_jax.models.tokenizer import Tokenizer
    from rlanything_jax.sampling.sampler import Sampler, SamplerConfig

    if task.kind == "coding":
        from rlanything_jax.agents.coding_scenario import CodingScenario
        scenario = CodingScenario()
    else:
        from rlanything_jax.agents.text_game import TextGameScenario
        scenario = TextGameScenario()
    model_dir = resolve_model_dir(model)
    sampler = Sampler(load_pretrained(model_dir), Tokenizer.from_dir(model_dir),
                      config=SamplerConfig(max_cache_length=16384))
    config = RolloutConfig(group_size=1, max_steps=max_steps, max_new_tokens=max_new_tokens,
                           max_context_tokens=16384, temperature=temperature, seed=seed)
    runner = InProcessRunner()
    try:
        [episode] = play_episodes(sampler, runner, scenario, [task], config)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=ENVS, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task-type", default=None)
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--expert", action="store_true", help="play the expert's walkthrough / reference solution")
    who.add_argument("--model", help="a Hugging Face directory or package:NAME plays with the policy prompt")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--out-dir", default=None, help="where generated games go (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="rlanything_play_")
    try:
        task = make_play_task(args.env, args.seed, args.task_type, out_dir)
        if args.expert:
            summary = play_expert(task, args.max_steps)
        else:
            summary = play_model(task, args.model, args.max_steps, args.max_new_tokens, args.temperature, args.seed)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
