"""How a desktop is made clean before an episode (OSWorld's providers: `revert_to_snapshot`, then waits).

- Local sessions (`local_desktop.LocalDesktop`): every episode gets a fresh session (kill, then start
  with a new tmpfs home), so nothing of one episode is left in the next.
- OSWorld's Docker provider (`tasks.provider=docker`, `tasks.vm_path`): each environment runs OSWorld's VM
  image in OSWorld's container (`DockerVm`, through the desktop-env package's `DockerProvider`); before
  every episode the container is replaced by a fresh one over the read-only image (OSWorld's
  `revert_to_snapshot` for Docker), then the run waits `tasks.reset_wait_s`.
- OSWorld VM servers (`tasks.endpoints`): a VM keeps its state, so before every episode the user's
  `tasks.reset_command` reverts it (e.g. a hypervisor's snapshot revert, or a script that replaces the
  Docker provider's container), then the run waits `tasks.reset_wait_s` (the reference: 60 s) for it
  to come up; before the evaluator runs it waits `tasks.evaluate_wait_s` (the reference: 20 s). A VM
  is never reused dirty: a reset command that fails or times out fails the episode (`DesktopResetFailed`,
  an environment error: the episode ends as `env_error`, counted in `episodes/env_error`).

The command is a shell line; `{endpoint}`, `{host}` and `{port}` are replaced by the endpoint's text,
host and server port (shell-quoted).
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import time
from typing import Any, Protocol

from rlanything_jax.scenarios.osworld.client import VmUnavailable
from rlanything_jax.scenarios.osworld.endpoint import VmEndpoint

RESET_TIMEOUT_S = 900.0   # a snapshot revert of a full VM can take minutes


class DesktopResetFailed(VmUnavailable):
    """A desktop that could not be made clean: its episode is not played."""


class DesktopProvider(Protocol):
    def reset(self, endpoint: str) -> None:
        """Reverts the desktop at `endpoint` to its clean state and waits until it may be used; raises
        DesktopResetFailed when it cannot."""


def reset_command_line(template: str, endpoint: str) -> str:
    parsed = VmEndpoint.parse(endpoint)
    values = {"endpoint": endpoint, "host": parsed.host, "port": str(parsed.server_port)}
    line = template
    for key, value in values.items():
        line = line.replace("{" + key + "}", shlex.quote(value))
    return line


@dataclasses.dataclass(frozen=True)
class CommandReset:
    """`tasks.reset_command`: the user's revert, run on this host, then `wait_s` for the desktop to boot."""

    command: str
    wait_s: float = 60.0
    timeout_s: float = RESET_TIMEOUT_S

    def reset(self, endpoint: str) -> None:
        line = reset_command_line(self.command, endpoint)
        try:
            done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=self.timeout_s,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise DesktopResetFailed(f"{endpoint}: the reset command ran past {self.timeout_s:g} s: {line}") from None
        except OSError as error:
            raise DesktopResetFailed(f"{endpoint}: the reset command could not run: {error}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip()[-300:]
            raise DesktopResetFailed(f"{endpoint}: the reset command exited {done.returncode}: {line}"
                                     + (f": {tail}" if tail else ""))
        time.sleep(self.wait_s)


class DockerVm:
    """One environment's desktop from OSWorld's Docker provider (`desktop_env.providers.docker`): the VM image
    (`Ubuntu.qcow2`, mounted read-only) runs in the `happysixd/osworld-docker` container with its server, DevTools,
    VNC and VLC ports mapped to free host ports (KVM where /dev/kvm exists). `fresh_endpoint` stops and removes
    the running container, if any, starts a new one, waits for its server as OSWorld does, then `wait_s`: every
    episode starts from the image. Any failure (no Docker daemon, no image, a VM that does not come up) is a
    `DesktopResetFailed` naming it."""

    def __init__(self, vm_path: str, wait_s: float = 60.0):
        self.vm_path, self.wait_s = vm_path, wait_s
        self._provider: Any = None

    def fresh_endpoint(self) -> str:
        try:
            if self._provider is None:
                from desktop_env.providers.docker.provider import DockerProvider

                self._provider = DockerProvider(region="")
            self._provider.revert_to_snapshot(self.vm_path, "init_state")   # stops and removes the old container
            self._provider.start_emulator(self.vm_path, headless=True, os_type="Ubuntu")
            endpoint = self._provider.get_ip_address(self.vm_path)
        except ImportError as error:
            raise DesktopResetFailed(f"OSWorld's Docker provider needs the desktop-env package and the Docker SDK "
                                     f"(bash scripts/setup.sh --osworld): {error}") from None
        except Exception as error:   # the Docker SDK's and the provider's errors have no common base
            raise DesktopResetFailed(f"OSWorld's Docker provider could not start {self.vm_path}: "
                                     f"{type(error).__name__}: {error}") from None
        time.sleep(self.wait_s)
        return endpoint

    def close(self) -> None:
        if self._provider is not None:
            self._provider.stop_emulator(self.vm_path)
            self._provider = None
