"""TextWorld games: seeded offline generation with difficulty knobs, the Env, and an expert.

Games are generated once per (knobs, seed) and cached as `<out_dir>/<name>.z8` plus the
`.json` TextWorld needs next to it for admissible commands and the winning policy. A
`Task` carries only the game path, knobs and seed, so worker processes rebuild it cheaply.

Generation time (2-core CPU): 0.3-3 s for coin collector, custom games and treasure
hunter up to level ~20; treasure hunter levels 22-24 take 5-15 s, level 30 about 6 minutes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import textworld
import textworld.generator
from textworld.challenges import CHALLENGES

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env

KINDS = ("coin_collector", "treasure_hunter", "custom")
_CHALLENGE_NAMES = {"coin_collector": "tw-coin_collector", "treasure_hunter": "tw-treasure_hunter"}
_MAX_LEVEL = {"coin_collector": 300, "treasure_hunter": 30}
_CUSTOM_LIMITS = {"nb_rooms": 20, "nb_objects": 40, "quest_length": 20}


@dataclasses.dataclass(frozen=True)
class TextWorldKnobs:
    """Difficulty of one game. Challenges use `level` (their authors' scale); custom games
    use the map size, object count and quest length."""

    kind: str = "custom"
    level: int = 1          # coin_collector: 1-300 (quest length (level-1)%100+1, more distractors per hundred)
                            # treasure_hunter: 1-30 (more rooms, doors, containers, longer quests)
    nb_rooms: int = 3       # the rest apply to custom games only
    nb_objects: int = 5
    quest_length: int = 3

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown TextWorld kind {self.kind!r}; expected one of {KINDS}")
        # Fields the kind ignores take their defaults, so equal games have equal knobs.
        unused = ("level",) if self.kind == "custom" else tuple(_CUSTOM_LIMITS)
        for name in unused:
            object.__setattr__(self, name, _DEFAULTS[name])
        if self.kind in _MAX_LEVEL and not 1 <= self.level <= _MAX_LEVEL[self.kind]:
            raise ValueError(f"{self.kind} level must be in [1, {_MAX_LEVEL[self.kind]}], got {self.level}")
        if self.kind == "custom":
            for name, limit in _CUSTOM_LIMITS.items():
                if not 1 <= getattr(self, name) <= limit:
                    raise ValueError(f"custom {name} must be in [1, {limit}], got {getattr(self, name)}")

    @property
    def name(self) -> str:
        """Short, file-name-safe description; distinct knobs give distinct names."""
        if self.kind == "custom":
            return f"custom-r{self.nb_rooms}-o{self.nb_objects}-q{self.quest_length}"
        return f"{self.kind}-l{self.level}"


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TextWorldKnobs)}


def harder(knobs: TextWorldKnobs) -> TextWorldKnobs:
    return _shift(knobs, +1)


def easier(knobs: TextWorldKnobs) -> TextWorldKnobs:
    return _shift(knobs, -1)


def _shift(knobs: TextWorldKnobs, direction: int) -> TextWorldKnobs:
    """One notch along the kind's own scale, clamped at its ends (so harder(max) == max)."""
    if knobs.kind == "coin_collector":
        # Stay within the level's hundred: crossing 100 -> 101 would shorten the quest to 1.
        band = (knobs.level - 1) // 100
        level = min(max(knobs.level + direction, 100 * band + 1), 100 * band + 100)
        return dataclasses.replace(knobs, level=level)
    if knobs.kind == "treasure_hunter":
        return dataclasses.replace(knobs, level=min(max(knobs.level + direction, 1), _MAX_LEVEL["treasure_hunter"]))
    # Custom: a longer quest needs room to unfold, so rooms and objects move with it.
    steps = {"quest_length": direction, "nb_rooms": direction, "nb_objects": 2 * direction}
    return dataclasses.replace(
        knobs, **{k: min(max(getattr(knobs, k) + d, 1), _CUSTOM_LIMITS[k]) for k, d in steps.items()})


@contextlib.contextmanager
def _quiet_jericho():
    """jericho has no per-game tables for generated games and warns on every load and step;
    TextWorld computes admissible commands, score and moves from the game's logic instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is not fully supported")
        warnings.filterwarnings("ignore", message="Unable to find valid actions in an unsupported game")
        yield


# ----------------------------------------------------------------------------- generation


def game_path(seed: int, knobs: TextWorldKnobs, out_dir: str | os.PathLike) -> Path:
    return Path(out_dir) / f"tw-{knobs.name}-seed{seed}.z8"


def generate_game(seed: int, knobs: TextWorldKnobs, out_dir: str | os.PathLike) -> Path:
    """The compiled game for (seed, knobs), generating it only if it is not cached yet.

    Compiles in a private temporary folder and moves the files in place (the `.z8` last),
    so concurrent generators of the same game never expose a half-written file.
    """
    path = game_path(seed, knobs, out_dir)
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    options = textworld.GameOptions()
    options.seeds = seed
    scratch = Path(tempfile.mkdtemp(prefix=".generating-", dir=path.parent))
    try:
        with _quiet_jericho():  # coin collector plays its walkthrough while generating
            if knobs.kind == "custom":
                options.nb_rooms, options.nb_objects = knobs.nb_rooms, knobs.nb_objects
                options.quest_length = knobs.quest_length
                game = textworld.generator.make_game(options)
            else:
                game = CHALLENGES[_CHALLENGE_NAMES[knobs.kind]][1]({"level": knobs.level}, options)
            options.path = str(scratch / path.name)
            compiled = Path(textworld.generator.compile_game(game, options))
        os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(compiled, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def make_task(seed: int, knobs: TextWorldKnobs, out_dir: str | os.PathLike) -> Task:
    path = generate_game(seed, knobs, out_dir)
    objective = textworld.Game.load(str(path.with_suffix(".json"))).objective
    return Task(
        task_id=f"textworld/{knobs.name}/seed{seed}",
        kind="textworld",
        goal=objective,
        payload={"game_path": str(path), "knobs": dataclasses.asdict(knobs), "seed": seed},
    )


def knobs_of(task: Task) -> TextWorldKnobs:
    return TextWorldKnobs(**task.payload["knobs"])


# ----------------------------------------------------------------------------- playing

_INFOS = textworld.EnvInfos(
    admissible_commands=True, won=True, lost=True, objective=True, policy_commands=True,
    score=True, max_score=True, moves=True)

# Commands that leave the game proper (yes/no prompts, restarts, undo, transcripts): they
# would desynchronise the episode from its recorded actions, so they never reach the engine.
_META_VERBS = frozenset({
    "restart", "quit", "q", "save", "restore", "undo", "script", "unscript", "transcript",
    "noscript", "verify", "verbose", "brief", "superbrief", "notify"})
_MAX_COMMAND_CHARS = 190  # jericho truncates (with a warning) at 198 bytes
_BLOCKED_TEXT = "That command is not available in this game."
_BANNER_LINE = re.compile(r"^[\s\\$_|/<>]*$")          # TextWorld's ASCII-art title
_STATUS_PROMPT = re.compile(r"\n?>[^\n]*$")             # trailing "> -= Room =-score/moves"
_REPLAY_PROMPT = re.compile(r"\n*Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command\?")


def sanitize_command(action: str) -> str | None:
    """The single command the engine will see, or None for a command we refuse.

    Inform's parser would queue whatever follows a newline, '.', ';' or 'then' as further
    turns, so the command stops there; non-ASCII characters are dropped (the Z-machine
    reads ZSCII)."""
    first = re.split(r"[\r\n.;]|\bthen\b", action, maxsplit=1, flags=re.IGNORECASE)[0]
    command = " ".join(first.encode("ascii", "ignore").decode().split())[:_MAX_COMMAND_CHARS]
    if command and command.split()[0].lower() in _META_VERBS:
        return None
    return command


def clean_feedback(feedback: str) -> str:
    """Game text without the title banner, status line, prompt and the restart question."""
    lines = feedback.split("\n")
    while lines and _BANNER_LINE.match(lines[0]):
        lines.pop(0)
    text = _REPLAY_PROMPT.sub("", _STATUS_PROMPT.sub("", "\n".join(lines)))
    text = "\n".join(line.strip() for line in text.split("\n"))  # e.g. the centred "*** The End ***"
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class TextWorldEnv:
    """One TextWorld game at a time; re-uses the loaded engine when the same game is reset."""

    def __init__(self):
        self._engine = None
        self._loaded_path: str | None = None
        self._state = None
        self._last: StepResult | None = None

    def reset(self, task: Task) -> Observation:
        path = task.payload["game_path"]
        with _quiet_jericho():
            if self._loaded_path != path:
                self.close()
                self._engine = textworld.start(path, request_infos=_INFOS)
                self._loaded_path = path
            self._state = self._engine.reset()
        text = clean_feedback(self._state.feedback)
        objective = (self._state.objective or "").strip()
        if objective and objective not in text:
            text = f"{objective}\n\n{text}"
        observation = Observation(text=text, admissible_actions=tuple(self._state.admissible_commands or ()))
        self._last = StepResult(observation, done=False, won=False, info=self._info())
        return observation

    def step(self, action: str) -> StepResult:
        if self._engine is None:
            raise RuntimeError("step() before reset()")
        if self._last.done:  # the engine would only ask to restart; the episode is over
            return self._last
        command = sanitize_command(action)
        if command is None:
            return StepResult(Observation(_BLOCKED_TEXT, self._last.observation.admissible_actions),
                              done=False, won=False, info=self._info())
        with _quiet_jericho():
            self._state, _, _ = self._engine.step(command)
        won, lost = bool(self._state.won), bool(self._state.lost)
        done = won or lost
        admissible = () if done else tuple(self._state.admissible_commands or ())
        self._last = StepResult(Observation(clean_feedback(self._state.feedback), admissible),
                                done=done, won=won, info=self._info())
        return self._last

    def expert_plan(self) -> list[str]:
        """The engine's winning command sequence from the current state ([] once over)."""
        if self._state is None or self._last.done:
            return []
        return list(self._state.policy_commands or [])

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        self._engine, self._loaded_path, self._state, self._last = None, None, None, None

    def _info(self) -> dict[str, Any]:
        s = self._state
        return {"score": s.score, "max_score": s.max_score, "moves": s.moves, "lost": bool(s.lost)}


register_env("textworld", TextWorldEnv)


# ----------------------------------------------------------------------------- expert


@dataclasses.dataclass(frozen=True)
class ExpertStep:
    observation: str                      # what the agent read before acting
    admissible_actions: tuple[str, ...]
    action: str


@dataclasses.dataclass(frozen=True)
class ExpertTrajectory:
    steps: tuple[ExpertStep, ...]
    won: bool
    final_observation: str


def expert_trajectory(task: Task, max_steps: int = 500) -> ExpertTrajectory:
    """Plays the engine's winning policy, re-planned after every step."""
    env = TextWorldEnv()
    try:
        observation, steps, result = env.reset(task), [], None
        while len(steps) < max_steps and (plan := env.expert_plan()):
            steps.append(ExpertStep(observation.text, observation.admissible_actions, plan[0]))
            result = env.step(plan[0])
            observation = result.observation
            if result.done:
                break
        return ExpertTrajectory(tuple(steps), won=bool(result and result.won), final_observation=observation.text)
    finally:
        env.close()


def expert_actions(task: Task) -> list[str]:
    return [step.action for step in expert_trajectory(task).steps]
