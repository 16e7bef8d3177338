"""Play one desktop task on a local desktop and write what happened where a person can look at it.

    python -m rlanything_jax.play --env osworld --task rla-rename-dir-s0-n1 --expert --out /tmp/episode
    python -m rlanything_jax.play --env osworld --task-file task.json --actions calls.json --out /tmp/episode

--task names a bundled task (`bundled_tasks`); --task-file takes any OSWorld-format task JSON
(--variant picks an RLAnything variant). --expert plays the task's `rla_expert`; --actions replays a
JSON list of `computer_use` argument objects as the model writes them (terminate included).
The output folder gets a screenshot per step (`step_000.png`, ...), `episode.gif` and `trace.html`.
The last line printed is a JSON summary: task_id, score, won, steps, evaluation, out.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rlanything_jax.scenarios.osworld.bundled_tasks import SPLITS, bundled_tasks
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings, OsWorldEnv, make_env_task
from rlanything_jax.scenarios.osworld.episodes import EpisodeRecord, play_tool_calls
from rlanything_jax.scenarios.osworld.local_desktop import DesktopUnavailable
from rlanything_jax.scenarios.osworld.setup_steps import SetupError
from rlanything_jax.scenarios.osworld.tasks import TaskFormatError, task_from_json

GIF_WIDTH = 960
GIF_FRAME_MS = 1200


def _task_json(args: argparse.Namespace) -> dict[str, Any]:
    if args.task_file:
        try:
            return json.loads(Path(args.task_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read the task file {args.task_file}: {error}") from None
    for split in SPLITS:
        for task in bundled_tasks(split):
            if task["id"] == args.task:
                return task
    raise ValueError(f"no bundled task {args.task!r}; the bundled tasks are in "
                     "rlanything_jax/scenarios/osworld/data/tasks/")


def _tool_calls(args: argparse.Namespace, data: dict[str, Any]) -> list[Any]:
    if args.expert:
        if not isinstance(data.get("rla_expert"), list):
            raise ValueError("this task has no scripted expert (`rla_expert`); replay calls with --actions")
        return data["rla_expert"]
    try:
        calls = json.loads(Path(args.actions).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the actions file {args.actions}: {error}") from None
    if not isinstance(calls, list):
        raise ValueError("the actions file must hold a JSON list of computer_use argument objects")
    return calls


def write_trace(record: EpisodeRecord, instruction: str, out: Path) -> None:
    """step_NNN.png per screenshot, an animated GIF at GIF_WIDTH, and an HTML page of the episode."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    frames = []
    for index, pixels in enumerate(record.screenshots):
        image = Image.fromarray(np.asarray(pixels, dtype=np.uint8))
        image.save(out / f"step_{index:03d}.png")
        frames.append(image.resize((GIF_WIDTH, max(1, image.height * GIF_WIDTH // image.width))))
    if frames:
        frames[0].save(out / "episode.gif", save_all=True, append_images=frames[1:], duration=GIF_FRAME_MS, loop=0)
    rows = [f"<h1>{html.escape(record.task_id)}</h1><p>{html.escape(instruction)}</p>",
            '<h2>start</h2><img src="step_000.png" width="960">']
    for index, (action, status) in enumerate(zip(record.actions, record.statuses), 1):
        rows.append(f"<h2>step {index} ({html.escape(status)})</h2><pre>{html.escape(action)}</pre>")
        if index < len(record.screenshots):
            rows.append(f'<img src="step_{index:03d}.png" width="960">')
    rows.append(f"<h2>score {record.score:g} ({'won' if record.won else 'lost'})</h2>"
                f"<pre>{html.escape(record.evaluation)}</pre>")
    (out / "trace.html").write_text("<!doctype html><meta charset=utf-8><title>" + html.escape(record.task_id)
                                    + "</title>\n" + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="osworld", choices=["osworld"])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", help="a bundled task id")
    which.add_argument("--task-file", help="an OSWorld-format task JSON")
    parser.add_argument("--variant", default=None, help="an RLAnything variant key (evaluator_list)")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--expert", action="store_true", help="play the task's scripted expert")
    who.add_argument("--actions", help="a JSON list of computer_use argument objects to replay")
    who.add_argument("--model", help="a vision-language policy (not available yet)")
    parser.add_argument("--out", default=None, help="the output folder (default: a new temporary folder)")
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--cache-root", default="cache", help="the offline download cache")
    args = parser.parse_args(argv)
    try:
        if args.model:
            raise ValueError("--model needs the vision-language policy, which the osworld scenario does not "
                             "wire up yet; use --expert or --actions")
        data = _task_json(args)
        task = task_from_json(data, args.variant, args.task_file or "")
        calls = _tool_calls(args, data)
        settings = DesktopEnvSettings(max_steps=args.max_steps, cache_root=args.cache_root)
        env = OsWorldEnv()
        try:
            record = play_tool_calls(env, make_env_task(task, settings), calls, on_step=lambda index, result: print(
                f"step {index}: done={result.done} {json.dumps(result.info)}", flush=True))
        finally:
            env.close()
        out = Path(args.out or tempfile.mkdtemp(prefix="rla_desktop_play_"))   # only once there is something
        write_trace(record, task.instruction, out)
    except (ValueError, TaskFormatError, SetupError, DesktopUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"task_id": record.task_id, "score": record.score, "won": record.won, "steps": record.steps,
                      "evaluation": record.evaluation, "out": str(out)}))
    return 0
