"""The desktop environment (`envs.base.Env`, kind "osworld"): one OSWorld task per episode on a local
desktop session (or on a VM's server named by an endpoint).

reset: a fresh session (kill and start, the VM's snapshot revert), the task's setup steps, then the
first screenshot. step: an action is one command a line, as `actions.DesktopAction.text` writes
them: pyautogui code runs through /execute, WAIT sleeps, DONE and FAIL end the episode; an empty
action does nothing. After `max_steps` steps, or DONE/FAIL, the evaluator scores the desktop and
the episode is won when the score is > 0 (RLAnything's success). A desktop that stops answering
raises `VmUnavailable`, which the env runner turns into an EnvError for this episode alone.

Settings travel in the task's payload (`make_env_task`), since the runner builds envs without
arguments: `payload["task"]` is the OSWorld JSON as played, `payload["settings"]` the fields of
`DesktopEnvSettings`.
"""

from __future__ import annotations

import dataclasses
import io
import time
from typing import Any

import numpy as np

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env
from rlanything_jax.scenarios.osworld.actions import CONTROL_ACTIONS, DONE, FAIL, WAIT
from rlanything_jax.scenarios.osworld.client import OsWorldClient
from rlanything_jax.scenarios.osworld.endpoint import EndpointClaim, split_endpoints
from rlanything_jax.scenarios.osworld.evaluator import evaluate
from rlanything_jax.scenarios.osworld.local_desktop import DEFAULT_RUNTIME_ROOT, DesktopOptions, LocalDesktop
from rlanything_jax.scenarios.osworld.providers import CommandReset, DesktopResetFailed, DockerVm
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext, run_setup
from rlanything_jax.scenarios.osworld.tasks import OsWorldTask, task_from_json

ENV_KIND = "osworld"


@dataclasses.dataclass(frozen=True)
class DesktopEnvSettings:
    screen_width: int = 1920
    screen_height: int = 1080
    max_steps: int = 15                 # the reference's episode length
    settle_s: float = 1.0               # wait after an action before the screenshot (the reference: 2 s)
    wait_s: float = 2.0                 # what WAIT sleeps
    runtime_root: str = DEFAULT_RUNTIME_ROOT
    cache_root: str = "cache"           # the offline download cache, <cache_root>/<task_id>/...
    client_password: str = "password"
    # OSWorld VM servers instead of local sessions (comma-separated): each environment claims one of them for
    # its lifetime (`endpoint.EndpointClaim`) and reverts it before every episode with `reset_command`
    # (`providers.CommandReset`), then waits `reset_wait_s`; before evaluating it waits `evaluate_wait_s`
    # (the reference's 60 s and 20 s). Without a reset command no episode runs on a VM: none is played dirty.
    endpoints: str = ""
    reset_command: str = ""
    reset_wait_s: float = 60.0
    evaluate_wait_s: float = 20.0
    # OSWorld's VM image for its Docker provider (`providers.DockerVm`): a fresh container every episode.
    vm_path: str = ""

    @classmethod
    def from_payload(cls, values: dict[str, Any] | None) -> DesktopEnvSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (values or {}).items() if k in known})


def make_env_task(task: OsWorldTask, settings: DesktopEnvSettings = DesktopEnvSettings()) -> Task:
    task_id = f"{task.task_id}:{task.variant}" if task.variant else task.task_id
    return Task(task_id, ENV_KIND, task.instruction,
                {"task": task.to_json(), "variant": task.variant, "settings": dataclasses.asdict(settings)})


def png_to_array(data: bytes) -> np.ndarray:
    """A screenshot as HWC uint8 RGB."""
    from PIL import Image  # Pillow comes with matplotlib, a project dependency

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


class OsWorldEnv:
    def __init__(self) -> None:
        self._desktop: LocalDesktop | None = None
        self._claim: EndpointClaim | None = None
        self._docker: DockerVm | None = None
        self._client: OsWorldClient | None = None
        self._task: OsWorldTask | None = None
        self._settings = DesktopEnvSettings()
        self._context: SetupContext | None = None
        self._steps = 0
        self._done = True

    def reset(self, task: Task) -> Observation:
        self._settings = settings = DesktopEnvSettings.from_payload(task.payload.get("settings"))
        self._task = task_from_json(task.payload["task"])
        self._client = self._fresh_client(settings)
        self._context = SetupContext(self._client, self._task.task_id, settings.cache_root,
                                     settings.screen_width, settings.screen_height, settings.client_password)
        run_setup(self._task.config, self._context)
        self._steps, self._done = 0, False
        return self._observe()

    def _fresh_client(self, settings: DesktopEnvSettings) -> OsWorldClient:
        if settings.vm_path:
            if self._docker is None or self._docker.vm_path != settings.vm_path:
                self.close()
                self._docker = DockerVm(settings.vm_path, settings.reset_wait_s)
            return OsWorldClient(self._docker.fresh_endpoint())
        if settings.endpoints:
            pool = split_endpoints(settings.endpoints)
            if self._claim is None or self._claim.pool != tuple(pool):
                self.close()
                self._claim = EndpointClaim(pool, f"{settings.runtime_root}/endpoint-claims")
            endpoint = self._claim.endpoint
            if not settings.reset_command:
                raise DesktopResetFailed(f"{endpoint}: no tasks.reset_command to revert this VM before the "
                                         "episode; a VM is never played dirty")
            CommandReset(settings.reset_command, settings.reset_wait_s).reset(endpoint)
            return OsWorldClient(endpoint)
        options = DesktopOptions(width=settings.screen_width, height=settings.screen_height,
                                 runtime_root=settings.runtime_root, sudo_password=settings.client_password)
        if self._desktop is not None and self._desktop.options == options:
            self._desktop.reset()
        else:
            self.close()
            self._desktop = LocalDesktop(options)
        return self._desktop.client

    def _observe(self) -> Observation:
        return Observation(self._task.instruction, images=(png_to_array(self._client.screenshot()),))

    def step(self, action: str) -> StepResult:
        if self._done or self._client is None:
            raise RuntimeError("step() before reset() or after the episode ended")
        self._steps += 1
        commands = [line.strip() for line in str(action).splitlines() if line.strip()]
        last_action, failures = None, []
        for command in commands:
            last_action = command
            if command == WAIT:
                time.sleep(self._settings.wait_s)
            elif command in (DONE, FAIL):
                break
            elif command not in CONTROL_ACTIONS:
                result = self._client.execute_pyautogui(command)
                if result.get("returncode", 1) != 0:
                    failures.append((result.get("error") or result.get("message") or "")[-300:])
        if commands and last_action not in (DONE, FAIL):
            time.sleep(self._settings.settle_s)
        observation = self._observe()
        info: dict[str, Any] = {"commands": len(commands), "action_errors": failures}
        if last_action in (DONE, FAIL) or self._steps >= self._settings.max_steps:
            self._done = True
            if self._settings.endpoints:
                time.sleep(self._settings.evaluate_wait_s)   # a VM's applications settle (the reference's wait)
            outcome = evaluate(self._task.evaluator, self._context, last_action)
            info.update(score=outcome.score, evaluation=outcome.detail, last_action=last_action)
            return StepResult(observation, True, outcome.success, info)
        return StepResult(observation, False, False, info)

    def close(self) -> None:
        if self._desktop is not None:
            self._desktop.close()
            self._desktop = None
        if self._claim is not None:
            self._claim.release()
            self._claim = None
        if self._docker is not None:
            self._docker.close()
            self._docker = None


register_env(ENV_KIND, OsWorldEnv)
