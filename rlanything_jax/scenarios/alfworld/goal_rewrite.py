"""The environment model's ALFWorld move (ALGORITHM.md 4.1, 4.3), minus the model itself.

Prompts: a <= 2-sentence failure summary for every failed rollout (with the steps where all
reward-model votes were -1 marked "high-risk"), then `num_tries` goal-rewrite prompts over the
raw game's :init summary. Answers: `goal_candidate_from_outputs` turns the model's texts into
the first deployable rewritten task, in attempt order (parse -> ALFWorld type names ->
`alfworld.rewrite_goal`, whose expert must win the new game in the engine), and counts what
happened to every text. Model output is untrusted: nothing here raises on it.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Collection, Sequence

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.goal_prompts import goal_rewrite_messages, parse_goal_types
from rlanything_jax.scenarios.alfworld.pddl import known_type
from rlanything_jax.scenarios.text_games.prompts import failure_summary_messages

log = logging.getLogger(__name__)

READABLE_GOAL_STATUSES = ("ok", "space_separated")  # parse_goal_types statuses that carry two tokens


# ---------------------------------------------------------------- failure summaries


def failed_episodes(judged: Sequence[JudgedEpisode]) -> list[JudgedEpisode]:
    """Rollouts the reference summarises: played to the end (no env error) and lost."""
    return [j for j in judged if j.episode.env_error is None and j.episode.steps and not j.episode.won]


def high_risk_steps(judged: JudgedEpisode) -> tuple[int, ...]:
    """Steps where every one of the m reward-model votes was a valid -1 (none when unjudged)."""
    if judged.judgments is None:
        return ()
    judgments, valid = np.asarray(judged.judgments.scores), np.asarray(judged.judgments.valid, bool)
    if judgments.ndim != 2 or judgments.shape != valid.shape or judgments.shape[1] == 0:
        return ()
    all_bad = np.all((judgments == -1) & valid, axis=1)
    return tuple(int(t) for t in np.flatnonzero(all_bad))


def failure_summary_prompt(judged: JudgedEpisode) -> list[Message]:
    """The numbered trajectory (each step's observation and action, then the last observation)."""
    episode = judged.episode
    observations = [step.observation.text for step in episode.steps]
    last = episode.steps[-1].next_observation if episode.steps else None
    if last is not None:
        observations.append(last.text)
    actions = [step.action for step in episode.steps]
    return failure_summary_messages(episode.task.goal, observations, actions, max_steps=len(episode.steps),
                                    high_risk_steps=high_risk_steps(judged))


# ---------------------------------------------------------------- goal-rewrite prompts


def prompt_goal_types(raw: Task) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(object types, receptacle types) as the prompt's framework names them: look_at_obj_in_light
    reads "light <LIGHT>, hold <OBJ>", so its light comes first; the others (object), (receptacle)."""
    p = raw.payload
    obj, rec = p["goal_object_type"], p["goal_receptacle_type"]
    if p["task_type"] == "look_at_obj_in_light":
        return (rec, obj), ()
    return (obj,), (rec,)


def goal_rewrite_prompts(raw: Task, direction: str, accuracy: float, summaries: Sequence[tuple[int, str]],
                         num_tries: int) -> list[list[Message]]:
    """`num_tries` prompts for the raw game, differing only in their "(Attempt i/n)" line."""
    objects, receptacles = prompt_goal_types(raw)
    init_summary = alfworld.summarize_init(raw)
    return [goal_rewrite_messages(init_summary, raw.payload["task_type"], objects, receptacles, direction,
                                  round(float(accuracy), 4), summaries, attempt=i + 1, num_attempts=num_tries)
            for i in range(num_tries)]


# ---------------------------------------------------------------- answers -> task

_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def normalize_type_name(token: str) -> str | None:
    """ALFWorld's spelling of a type the model wrote ("apple", "sink_basin", "**Mug**", "AppleType",
    "apples" -> "Apple", "SinkBasin", "Mug", "Apple", "Apple"), or None for no known type."""
    key = _NOT_ALNUM.sub("", str(token).lower())
    if not key:
        return None
    stems = [key] + ([key[:-4]] if key.endswith("type") else [])
    for stem in stems:
        for form in (stem, stem[:-1] if stem.endswith("s") else "", stem[:-2] if stem.endswith("es") else ""):
            canonical = known_type(form) if form else None
            if canonical:
                return canonical
    return None


# rewrite_goal's reasons, grouped into metric classes (first match wins).
_REJECTION_CLASSES = (
    ("unknown_type", re.compile(r"unknown ALFWorld type")),
    ("unchanged", re.compile(r"goal is unchanged")),
    ("not_pickupable", re.compile(r"not an object the agent can pick up")),
    ("not_a_light", re.compile(r"is not a light")),
    ("absent", re.compile(r"^no \S+( receptacle)? in this room")),
    ("lacks_capability", re.compile(r"cannot be \w+")),
    ("cannot_contain", re.compile(r"cannot contain")),
    ("needs_two_instances", re.compile(r"needs two")),
    ("no_plan", re.compile(r"finds no plan")),
    ("expert_lost", re.compile(r"does not win")),
    ("engine_error", re.compile(r"^engine error")),
)


def rejection_class(reason: str) -> str:
    """A short metric name for one of `rewrite_goal`'s rejection reasons ("other" if unforeseen)."""
    return next((name for name, pattern in _REJECTION_CLASSES if pattern.search(reason)), "other")


def goal_candidate_from_outputs(raw: Task, texts: Sequence[str | None], out_dir: str,
                                exclude_ids: Collection[str] = ()) -> tuple[Task | None, Counter]:
    """The rewrite from the lowest-numbered attempt that gives a deployable game, and the outcome counts.

    Every text is parsed ("parse/<status>", "parsed" or "unparseable"; None is "not_generated");
    readable pairs are tried in attempt order until one is accepted ("rejected/<class>", "duplicate"
    for a pair already tried, "accepted", "not_tried" for readable pairs after it). A rewrite whose
    id is in `exclude_ids` (the slot's active task) is "rejected/same_as_active".
    """
    counts: Counter = Counter()
    pairs: list[tuple[str, str] | None] = []
    for text in texts:
        if text is None:  # the prompt did not fit the sampler's cache
            counts["not_generated"] += 1
            pairs.append(None)
            continue
        parsed = parse_goal_types(text)
        counts[f"parse/{parsed.status}"] += 1
        readable = parsed.status in READABLE_GOAL_STATUSES and parsed.types is not None
        counts["parsed" if readable else "unparseable"] += 1
        pairs.append(parsed.types if readable else None)

    tried: set[tuple[str, str]] = set()
    candidate = None
    for pair in pairs:
        if pair is None:
            continue
        if candidate is not None:
            counts["not_tried"] += 1
            continue
        names = tuple(normalize_type_name(t) for t in pair)
        if None in names:
            counts["rejected/unknown_type"] += 1
            continue
        if names in tried:
            counts["duplicate"] += 1
            continue
        tried.add(names)
        result = _rewrite(raw, names, out_dir)
        if isinstance(result, alfworld.RewriteRejected):
            counts[f"rejected/{rejection_class(result.reason)}"] += 1
            log.debug("%s: rewrite to %s rejected: %s", raw.task_id, names, result.reason)
        elif result.task_id in exclude_ids:
            counts["rejected/same_as_active"] += 1
        else:
            counts["accepted"] += 1
            candidate = result
    return candidate, counts


def _rewrite(raw: Task, names: tuple[str, str], out_dir: str) -> Task | alfworld.RewriteRejected:
    try:
        return alfworld.rewrite_goal(raw, names[0], names[1], out_dir)
    except Exception as error:  # noqa: BLE001 -- an engine failure on one rewrite must not end the run
        log.warning("%s: rewrite to %s failed: %r", raw.task_id, names, error)
        return alfworld.RewriteRejected(f"engine error: {error!r}")
