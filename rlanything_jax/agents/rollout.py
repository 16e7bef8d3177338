"""Multi-turn rollouts: G episodes per task, one batched generation per turn, KV caches kept across turns.

The live episodes share a `Conversation` of the policy sampler (`agents/conversation_rows.py`: how rows
are extended, joined, repacked and compacted). An episode whose history and next response no
longer fit `max_prompt_tokens + max_new_tokens` ends with `context_full` (a failure).

With a slot budget (`max_live_episodes`) smaller than the step's episodes, the rest wait in a queue; with
`continuous_batching`, an episode that ends frees its environment and its cache row at once, and the next
queued episode takes them: its environment is reset and its first prompt prefilled into the freed row
while the other rows keep their caches. Without it, whole tasks are played in waves of the budget and
every wave runs until its longest episode ends. `rollout/slot_occupancy` is the mean fraction of the
budget's slots busy over the decoding turns.

With `overlap_env_steps` the slots form two cohorts, each with its own conversation, that take turns: one
cohort's actions go to the environments (`Runner.submit_step`, worker processes) and the other cohort
decodes while they step; its results are collected just before its own next turn. Resets go the same
way: the episodes that take a cohort's freed slots join at its next turn. Environment latency (a
desktop's action and screenshot, its reset) then hides behind decoding, at the price of two half batches
per round; the schedule depends on the episodes only, never on timing, so a seed replays. Env steps whose
results came back after the other cohort's turn are counted in `rollout/overlapped_env_steps`.

Prompts with images (screenshots) pass them to the sampler with their tokens. A scenario whose
prompts are rebuilt every turn (`rebuilds_history`, e.g. only the last 3 screenshots) extends the
cache when the new prompt starts with the row's history; when it does not (an old screenshot
dropped, an earlier message rewritten), the live rows are prefilled again, counted as
`rollout/reprefilled_rows` and `rollout/reprefills`.

The reward model then judges every step m times (`agents/judging.py`).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from typing import Any, Callable, Sequence

from rlanything_jax.agents.conversation_rows import LiveEpisode, ensure_room, fits, generate_turn
from rlanything_jax.agents.envs.base import Observation, Runner, Submitted, Task
from rlanything_jax.agents.prompt_tokens import next_prompt
from rlanything_jax.agents.rollout_config import RolloutConfig
from rlanything_jax.agents.scenario import PolicyPrompts
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.core.counts import Counts, add_counts
from rlanything_jax.core.progress import Progress
from rlanything_jax.core.sampling.sampler import Conversation, Sampler

ActionOverride = Callable[[Episode, Observation], "str | None"]


@dataclasses.dataclass(frozen=True)
class _Stepping:
    """A cohort's turn whose actions the environments are stepping."""

    submitted: Submitted
    completions: list
    records: dict[int, StepRecord]
    turns_before: int              # decoding turns run before it was submitted


@dataclasses.dataclass(frozen=True)
class _Starting:
    """Episodes whose environments are being reset, to take a cohort's free slots."""

    submitted: Submitted
    episodes: tuple[LiveEpisode, ...]


@dataclasses.dataclass
class _Cohort:
    """Slots that decode together, in one conversation."""

    capacity: int
    live: list[LiveEpisode] = dataclasses.field(default_factory=list)
    conversation: Conversation | None = None
    stepping: _Stepping | None = None
    starting: _Starting | None = None


@dataclasses.dataclass(frozen=True)
class _Play:
    """What every turn of one `play_episodes` call shares."""

    policy: Sampler
    runner: Runner
    prompts: PolicyPrompts
    config: RolloutConfig
    seed: int                      # the call's: each turn's sampling seed derives from it
    metrics: Counter               # this call's own counts, returned with its episodes
    stop_texts: dict[int, str]
    finished: dict[int, Episode] = dataclasses.field(default_factory=dict)

    def env(self, call: Callable, *args) -> Any:
        """A runner call, its seconds counted as the environments'."""
        started = time.perf_counter()
        out = call(*args)
        self.metrics["time/rollout_env_s"] += time.perf_counter() - started
        return out

    def end(self, slot: LiveEpisode, reason: str, **outcome) -> None:
        self.metrics[f"episodes/{reason}"] += 1
        self.finished[slot.runner_id] = slot.end(reason, **outcome)
        self.runner.close_episode(slot.runner_id)   # its environment (a desktop, a sandbox) goes at once


def play_episodes(policy: Sampler, runner: Runner, prompts: PolicyPrompts, tasks: Sequence[Task],
                  config: RolloutConfig, seed: int, action_override: ActionOverride | None = None,
                  progress: Callable[[str], None] | None = None,
                  slots: int = 0) -> tuple[list[Episode], Counts]:
    """Plays `config.group_size` episodes of every task to the end or the step limit, at most `slots` (0: all)
    at a time: an episode that ends hands its slot to the next one in task order (continuous batching).

    With `action_override`, the environment receives its action instead of the parsed one (e.g. an
    expert's), while the policy's response is still recorded. With the call's counts (`rollout/...`,
    `episodes/...`, `parse/...`, `time/rollout_*_s`).
    """
    metrics: Counter = Counter()
    tokenizer = policy.tokenizer
    play = _Play(policy, runner, prompts, config, seed, metrics,
                 stop_texts={t: tokenizer.decode([t]) for t in tokenizer.stop_token_ids})
    everyone = [LiveEpisode(task=task, group_index=g, runner_id=i, history=[], observation=None, pending=[])
                for i, (task, g) in enumerate((task, g) for task in tasks for g in range(config.group_size))]
    capacity = min(slots or len(everyone), len(everyone))
    halves = (capacity - capacity // 2, capacity // 2) if config.overlap_env_steps else (capacity,)
    cohorts = [_Cohort(part) for part in halves if part]
    queue = deque(everyone)
    turn = 0
    lines = Progress("rollouts", len(everyone), "episodes")
    while queue or any(c.live or c.stepping or c.starting for c in cohorts):
        for group, cohort in enumerate(cohorts):
            if cohort.stepping is not None:
                _take_results(play, cohort, turn)
            _admit(play, cohort, queue, group)
            if not cohort.live:
                continue
            cohort.conversation, room_counts = ensure_room(policy, cohort.conversation, cohort.live, config)
            metrics.update(room_counts)
            metrics["rollout/slot_turns"] += cohort.capacity
            metrics["rollout/busy_slot_turns"] += len(cohort.live)
            started = time.perf_counter()
            completions = generate_turn(policy, cohort.conversation, cohort.live, config, seed, turn)
            metrics["time/rollout_sampling_s"] += time.perf_counter() - started
            turn += 1
            records, actions = _act(cohort.live, completions, prompts, action_override, metrics)
            cohort.stepping = _Stepping(play.env(runner.submit_step, actions), completions, records, turn)
            metrics["rollout/env_steps"] += len(actions)
        if progress:
            live = sum(len(c.live) for c in cohorts)
            progress(f"turn {turn}: {live} episodes live, {len(queue)} waiting")
        # Done: the ended episodes, and the live ones' share of their turn limit (an episode ends at it or sooner).
        partial = sum(min(len(slot.steps) / max(config.max_turns, 1), 1.0) for c in cohorts for slot in c.live)
        lines.update(len(play.finished), (len(play.finished) + partial) / len(everyone))
    return [play.finished[slot.runner_id] for slot in everyone], dict(metrics)


def _act(live: list[LiveEpisode], completions: list, prompts: PolicyPrompts,
         action_override: ActionOverride | None, metrics: Counter) -> tuple[dict[int, StepRecord], dict[int, str]]:
    """Each episode's step record (before the environment answers) and the action it sends."""
    actions, records = {}, {}
    for slot, completion in zip(live, completions):
        metrics["rollout/tokens"] += len(completion.token_ids)
        parsed = prompts.parse_action(completion.text or "", slot.observation)
        metrics[f"parse/{prompts.name}_action/{parsed.status}"] += 1
        records[slot.runner_id] = StepRecord(
            observation=slot.observation, prompt_tokens=tuple(slot.history),
            response_tokens=tuple(completion.token_ids), logprobs=tuple(completion.logprobs),
            response_text=completion.text or "", finish_reason=completion.finish_reason,
            action=parsed.action, parse_status=parsed.status, prompt_images=tuple(slot.images))
        slot.history.extend(completion.token_ids)
        forced = None
        if action_override is not None:
            view = dataclasses.replace(slot.so_far(), steps=tuple(slot.steps) + (records[slot.runner_id],))
            forced = action_override(view, slot.observation)
        actions[slot.runner_id] = forced if forced is not None else parsed.action
    return records, actions


def _take_results(play: _Play, cohort: _Cohort, turn: int) -> None:
    """Waits for the cohort's environment step, records it and ends the episodes it ended; the others go on
    with their next prompts."""
    stepping, cohort.stepping = cohort.stepping, None
    results = play.env(stepping.submitted.result)
    if turn > stepping.turns_before:   # another cohort decoded while these environments stepped
        play.metrics["rollout/overlapped_env_steps"] += len(results)
    tokenizer, still_live = play.policy.tokenizer, []
    for slot, completion in zip(cohort.live, stepping.completions):
        result = results[slot.runner_id]
        record = stepping.records[slot.runner_id]
        if not hasattr(result, "observation"):
            slot.steps.append(record)
            play.end(slot, "env_error", error=str(getattr(result, "reason", result)))
            continue
        slot.steps.append(dataclasses.replace(record, next_observation=result.observation, won_after=result.won))
        if result.done or result.won:
            graded = getattr(result, "graded_outcome", None)
            play.end(slot, "won" if result.won else "done", won=bool(result.won),
                     graded_outcome=None if graded is None else float(graded))
            continue
        if len(slot.steps) >= play.config.max_turns:
            play.end(slot, "max_steps")
            continue
        slot.observation = result.observation
        stop_text = play.stop_texts.get(completion.token_ids[-1], "") if completion.token_ids else ""
        if slot.take_prompt(next_prompt(tokenizer, play.prompts, slot.task, slot.so_far(), result.observation,
                                        slot.history, slot.images, completion.finish_reason, stop_text,
                                        slot.image_cache, play.policy.image_inputs)):
            play.metrics["rollout/reprefilled_rows"] += 1
        still_live.append(slot)
    cohort.live = still_live


def _admit(play: _Play, cohort: _Cohort, queue: deque, group: int) -> None:
    """Fills the cohort's free slots from the queue (their environments reset together, spread over the
    runner's workers with the rest of cohort `group`) and ends the episodes whose next turn no longer fits
    their context; live episodes stay first, in their order.

    With `overlap_env_steps` the resets are not waited for while the cohort has episodes to decode: the
    new episodes join at its next turn (a desktop's reset takes seconds)."""
    while True:
        if cohort.starting is not None:
            observations = play.env(cohort.starting.submitted.result)
            for slot in cohort.starting.episodes:
                obs = observations[slot.runner_id]
                if not isinstance(obs, Observation):
                    play.end(slot, "env_error", error=str(getattr(obs, "reason", obs)))
                    continue
                slot.observation = obs
                if slot.take_prompt(next_prompt(play.policy.tokenizer, play.prompts, slot.task, slot.so_far(),
                                                obs, [], [], cache=slot.image_cache,
                                                image_inputs=play.policy.image_inputs)):
                    play.metrics["rollout/reprefilled_rows"] += 1
                cohort.live.append(slot)
            cohort.starting = None
        fitting = []
        for slot in cohort.live:
            if fits(slot, play.config, play.policy):
                fitting.append(slot)
            else:
                play.end(slot, "context_full")
        cohort.live = fitting
        joining = [queue.popleft() for _ in range(min(cohort.capacity - len(cohort.live), len(queue)))]
        if joining:
            tasks = {slot.runner_id: slot.task for slot in joining}
            cohort.starting = _Starting(play.env(play.runner.submit_reset, tasks, group), tuple(joining))
        if cohort.starting is None or (play.config.overlap_env_steps and cohort.live):
            return


@dataclasses.dataclass
class RolloutEngine:
    """The policy's rollouts as the loop uses them (`loop.Rollouts`): its sampler, the environments and the
    scenario's prompts. `action_override` (tests, expert play) replaces the action sent to the environment."""

    sampler: Sampler
    runner: Runner
    prompts: PolicyPrompts
    action_override: ActionOverride | None = None

    def play(self, tasks: Sequence[Task], config: RolloutConfig, seed: int) -> tuple[list[Episode], Counts]:
        # At most `max_live_episodes` environments (desktops) live at once: refilled slots, or waves of whole tasks.
        if config.continuous_batching or not config.max_live_episodes:
            episodes, counts = play_episodes(self.sampler, self.runner, self.prompts, tasks, config, seed,
                                             self.action_override, slots=config.max_live_episodes)
        else:
            per_call = max(1, config.max_live_episodes // config.group_size)
            episodes, waves = [], []
            for start in range(0, len(tasks), per_call):
                wave, wave_counts = play_episodes(self.sampler, self.runner, self.prompts,
                                                  tasks[start:start + per_call], config, seed,
                                                  self.action_override)
                episodes += wave
                waves.append(wave_counts)
            counts = add_counts(*waves)
        occupancy = counts.get("rollout/busy_slot_turns", 0) / max(counts.get("rollout/slot_turns", 0), 1)
        return episodes, {**counts, "rollout/slot_occupancy": occupancy}

    def update_params(self, params) -> None:
        self.sampler.update_params(params)
