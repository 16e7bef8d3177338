"""Desktops are clean before every episode: a VM endpoint is reverted by `tasks.reset_command` (then the
reference's wait), a Docker desktop is a fresh container of OSWorld's image (OSWorld's own DockerProvider),
and an episode whose revert fails, or that has no revert, is an environment error of that episode alone,
with the reason; the run stops at start-up when VMs have no reset command or Docker no image."""

import time

import pytest

from rlanything_jax.agents.envs.runner import EnvError, EnvRunner
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario, scenario_options
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings, make_env_task
from rlanything_jax.scenarios.osworld.providers import CommandReset, DesktopResetFailed, DockerVm, reset_command_line
from rlanything_jax.scenarios.osworld.tasks import task_from_json

TASK = {"id": "t", "instruction": "Do nothing.", "evaluator": {"func": "infeasible"}}


def test_the_reset_command_reverts_the_named_endpoint_then_waits(tmp_path):
    out = tmp_path / "reverted"
    reset = CommandReset(f"echo {{host}} {{port}} {{endpoint}} > {out}", wait_s=0.3)
    started = time.monotonic()
    reset.reset("vm-3.lan:5003:9225:8009:8083")
    assert time.monotonic() - started >= 0.3
    assert out.read_text() == "vm-3.lan 5003 vm-3.lan:5003:9225:8009:8083\n"
    assert reset_command_line("revert {host}", "a b:5000") == "revert 'a b'"   # quoted for the shell


def test_a_failing_or_hanging_reset_command_says_why(tmp_path):
    with pytest.raises(DesktopResetFailed, match=r"vm1:5000: the reset command exited 3: .*: no snapshot clean"):
        CommandReset("echo no snapshot clean >&2; exit 3", wait_s=0).reset("vm1:5000")
    with pytest.raises(DesktopResetFailed, match="ran past 0.5 s"):
        CommandReset("sleep 5", wait_s=0, timeout_s=0.5).reset("vm1:5000")


def test_a_vm_episode_whose_reset_fails_or_is_missing_is_an_environment_error_of_that_episode(tmp_path):
    runtime = str(tmp_path / "runtime")
    failing = DesktopEnvSettings(endpoints="127.0.0.1:9", reset_command="exit 4", runtime_root=runtime)
    missing = DesktopEnvSettings(endpoints="127.0.0.1:10", runtime_root=runtime)
    tasks = {0: make_env_task(task_from_json(TASK), failing), 1: make_env_task(task_from_json(TASK), missing)}
    with EnvRunner(num_workers=2, env_modules=("rlanything_jax.scenarios.osworld.env",), reset_timeout_s=60,
                   step_timeout_s=60) as runner:
        observations = runner.reset(tasks)
    assert all(isinstance(o, EnvError) for o in observations.values()), observations
    assert "DesktopResetFailed" in observations[0].reason and "reset command exited 4" in observations[0].reason
    assert "no tasks.reset_command" in observations[1].reason


def test_vm_runs_need_a_reset_command_at_start_up():
    with pytest.raises(ConfigError, match="tasks.reset_command.*snapshot"):
        make_scenario("osworld", scenario_options("osworld", {"endpoints": "vm1:5000"}))
    scenario = make_scenario("osworld", scenario_options("osworld", {"endpoints": "vm1:5000", "reset_command": "true",
                                                                     "reset_wait_s": 5, "evaluate_wait_s": 1}))
    settings = scenario.options.settings()
    assert (settings.reset_command, settings.reset_wait_s, settings.evaluate_wait_s) == ("true", 5, 1)
    assert DesktopEnvSettings().reset_wait_s == 60 and DesktopEnvSettings().evaluate_wait_s == 20   # the reference's


def test_a_docker_desktop_that_cannot_start_fails_its_episode_with_the_docker_sdks_reason(tmp_path, monkeypatch):
    """OSWorld's DockerProvider (desktop-env) and the Docker SDK, with no daemon at DOCKER_HOST: the reset names
    the image and the SDK's error, in the env worker as in this process."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    image = tmp_path / "Ubuntu.qcow2"
    image.write_bytes(b"")
    with pytest.raises(DesktopResetFailed, match=r"Docker provider could not start .*Ubuntu.qcow2: DockerException"):
        DockerVm(str(image), wait_s=0).fresh_endpoint()
    settings = DesktopEnvSettings(vm_path=str(image), reset_wait_s=0, runtime_root=str(tmp_path / "rt"))
    with EnvRunner(num_workers=1, env_modules=("rlanything_jax.scenarios.osworld.env",), reset_timeout_s=60,
                   step_timeout_s=60) as runner:
        [observation] = runner.reset({0: make_env_task(task_from_json(TASK), settings)}).values()
    assert isinstance(observation, EnvError) and "DesktopResetFailed" in observation.reason
    assert "Ubuntu.qcow2: DockerException" in observation.reason


def test_docker_runs_need_the_vm_image_at_start_up(tmp_path):
    with pytest.raises(ConfigError, match="tasks.vm_path.*Ubuntu.qcow2"):
        make_scenario("osworld", scenario_options("osworld", {"provider": "docker"}))
    image = tmp_path / "Ubuntu.qcow2"
    image.write_bytes(b"")
    scenario = make_scenario("osworld", scenario_options("osworld", {"provider": "docker", "vm_path": str(image),
                                                                     "reset_wait_s": 5}))
    settings = scenario.options.settings()
    assert (settings.vm_path, settings.endpoints, settings.reset_wait_s) == (str(image), "", 5)
