"""Episode traces: a few played episodes per step written where a person can look at them.

`write_episode_trace` turns any scenario's judged episode into a folder: `trace.html` (the task, then
per step what the agent saw, its whole answer, the action sent, the parser's status and the reward
model's judgments) plus one PNG per screenshot the agent saw (`step_NNN_K.png`; desktop scenarios).
It reads only the immutable records the rollout and judging stages hand on, so any scenario gets
traces without code of its own. The loop writes `loop.traces_per_step` of them under
`<workdir>/traces/step_NNNN/`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlanything_jax.agents.trajectory import JudgedEpisode

MAX_TEXT_CHARS = 4000   # an observation or answer longer than this is cut in the page (the records keep it)


def _text(value: str) -> str:
    cut = value if len(value) <= MAX_TEXT_CHARS else value[:MAX_TEXT_CHARS] + f"\n... ({len(value)} chars)"
    return f"<pre>{html.escape(cut)}</pre>"


def _images(images: Sequence, out: Path, stem: str) -> list[str]:
    from PIL import Image

    tags = []
    for index, pixels in enumerate(images):
        array = np.asarray(pixels)
        if array.ndim != 3 or array.dtype != np.uint8:
            continue   # not a screenshot (nothing else is drawn)
        name = f"{stem}_{index}.png"
        Image.fromarray(array).save(out / name)
        tags.append(f'<img src="{name}" width="{min(array.shape[1], 960)}">')
    return tags


def folder_name(judged: JudgedEpisode) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", judged.episode.task.task_id)[:80]
    return f"{safe}-g{judged.episode.group_index}"


def write_episode_trace(judged: JudgedEpisode, out: Path) -> Path:
    """Writes one episode's trace into `out` (created) and returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    episode, judgments = judged.episode, judged.judgments
    outcome = "won" if episode.won else "lost"
    rows = [f"<h1>{html.escape(episode.task.task_id)} (rollout {episode.group_index})</h1>",
            _text(episode.task.goal),
            f"<p>{outcome}, {len(episode.steps)} steps, ended: {html.escape(episode.end_reason)}"
            + (f", environment error: {html.escape(episode.env_error)}" if episode.env_error else "") + "</p>"]
    for index, step in enumerate(episode.steps):
        rows.append(f"<h2>step {index + 1}</h2>")
        rows += _images(step.observation.images, out, f"step_{index:03d}")
        rows.append(_text(step.observation.text))
        rows.append(f"<h3>answer ({html.escape(step.finish_reason)}, {len(step.response_tokens)} tokens)</h3>")
        rows.append(_text(step.response_text))
        rows.append(f"<p>action ({html.escape(step.parse_status)}):</p>" + _text(step.action))
        if judgments is not None and index < len(judgments.texts):
            scores = ", ".join(f"{int(s):+d}" if ok else "unparsed"
                               for s, ok in zip(judgments.scores[index], judgments.valid[index]))
            rows.append(f"<h3>reward model: {scores}</h3>")
            rows += [_text(text) for text in judgments.texts[index]]
    last = episode.steps[-1].next_observation if episode.steps else None
    if last is not None:
        rows.append("<h2>after the last step</h2>")
        rows += _images(last.images, out, f"step_{len(episode.steps):03d}")
        rows.append(_text(last.text))
    page = out / "trace.html"
    page.write_text("<!doctype html><meta charset=utf-8><title>" + html.escape(episode.task.task_id)
                    + "</title>\n" + "\n".join(row for row in rows if row) + "\n", encoding="utf-8")
    return page


def write_step_traces(judged: Sequence[JudgedEpisode], count: int, out: Path) -> list[Path]:
    """The first `count` episodes, spread over tasks: each task's first rollout before any second one."""
    ordered = sorted(judged, key=lambda j: (j.episode.group_index, j.episode.task.task_id))
    return [write_episode_trace(j, out / folder_name(j)) for j in ordered[:count]]
