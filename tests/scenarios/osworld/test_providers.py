"""Desktops are clean before every episode: a VM endpoint is reverted by `tasks.reset_command` (then the
reference's wait), and an episode whose revert fails, or that has no revert, is an environment error of
that episode alone, with the reason; the run stops at start-up when VMs have no reset command."""

import time

import pytest

from rlanything_jax.agents.envs.runner import EnvError, EnvRunner
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario, scenario_options
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings, make_env_task
from rlanything_jax.scenarios.osworld.providers import CommandReset, DesktopResetFailed, reset_command_line
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
