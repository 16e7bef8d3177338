"""The desktop env: episodes on real local desktops, in process and in the env runner."""

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import pytest

from rlanything_jax.agents.envs.runner import EnvError, EnvRunner
from rlanything_jax.scenarios.osworld.actions import parse_computer_use
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings, OsWorldEnv, make_env_task
from rlanything_jax.scenarios.osworld.tasks import task_from_json
from tests.scenarios.osworld.conftest import require_desktop_packages


def _call(**arguments) -> str:
    return "<tool_call>" + json.dumps({"name": "computer_use", "arguments": arguments}) + "</tool_call>"


def _file_task(task_id: str, name: str) -> dict:
    return {"id": task_id, "instruction": f"Create an empty file named {name} on the Desktop.",
            "config": [{"type": "execute", "parameters": {"command": "rm -f ~/Desktop/*", "shell": True}}],
            "evaluator": {"func": "exact_match",
                          "result": {"type": "vm_command_line", "command": f"test -f ~/Desktop/{name} && echo made",
                                     "shell": True},
                          "expected": {"type": "rule", "rules": {"expected": "made\n"}}}}


@pytest.fixture
def settings(desktop_root, tmp_path):
    require_desktop_packages()
    return DesktopEnvSettings(runtime_root=desktop_root, cache_root=str(tmp_path / "cache"), settle_s=0.3, wait_s=0.2)


@pytest.mark.slow
def test_an_episode_through_the_gui_is_won_and_doing_nothing_is_not(settings):
    task = make_env_task(task_from_json(_file_task("touch-file", "made.txt")), settings)
    env = OsWorldEnv()
    try:
        observation = env.reset(task)
        assert observation.text == "Create an empty file named made.txt on the Desktop."
        assert observation.images[0].shape == (1080, 1920, 3)
        assert not env.step(parse_computer_use(_call(action="key", keys=["ctrl", "alt", "t"])).text).done
        deadline = time.monotonic() + 15
        while env._client.execute(["xdotool", "getactivewindow", "getwindowname"])["output"].strip() != "Terminal":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        typed = env.step(parse_computer_use(_call(action="type", text="touch ~/Desktop/made.txt\n")).text)
        assert not typed.done and typed.info["action_errors"] == []
        final = env.step(parse_computer_use(_call(action="terminate", status="success")).text)
        assert final.done and final.won and final.info["score"] == 1.0
        env.reset(task)                                  # a fresh desktop: the file is gone
        nothing = env.step(parse_computer_use(_call(action="terminate", status="success")).text)
        assert nothing.done and not nothing.won and nothing.info["score"] == 0.0
        env.reset(task)
        gave_up = env.step("FAIL")
        assert gave_up.done and not gave_up.won
    finally:
        env.close()


def test_a_file_written_in_one_episode_is_gone_in_the_next(settings):
    # No setup step cleans up: only the fresh session per episode can make the second episode lose the file.
    check = {"id": "left-over", "instruction": "Leave a file named left-over in the home folder.", "config": [],
             "evaluator": {"func": "exact_match",
                           "result": {"type": "vm_command_line", "command": "test -f ~/left-over && echo there",
                                      "shell": True},
                           "expected": {"type": "rule", "rules": {"expected": "there\n"}}}}
    task = make_env_task(task_from_json(check), settings)
    env = OsWorldEnv()
    try:
        env.reset(task)
        assert not env.step("open('/home/user/left-over', 'w').close()").done
        assert env.step("DONE").won
        env.reset(task)
        assert not env.step("DONE").won
    finally:
        env.close()


@pytest.mark.slow
def test_infeasible_is_won_only_by_fail_and_max_steps_ends_the_episode(settings):
    infeasible = {"id": "no-python9", "instruction": "Install Python 9.", "evaluator": {"func": "infeasible"}}
    env = OsWorldEnv()
    try:
        task = make_env_task(task_from_json(infeasible), settings)
        env.reset(task)
        assert env.step("FAIL").won
        env.reset(make_env_task(task_from_json(infeasible), dataclasses.replace(settings, max_steps=2)))
        assert not env.step("").done
        last = env.step("WAIT")
        assert last.done and not last.won
    finally:
        env.close()


@pytest.mark.slow
def test_four_desktops_in_the_env_runner_and_a_killed_one_ends_only_its_episode(settings, desktop_root):
    tasks = {i: make_env_task(task_from_json(_file_task(f"file-{i}", f"f{i}.txt")), settings) for i in range(4)}
    with EnvRunner(num_workers=2, env_modules=("rlanything_jax.scenarios.osworld.env",),
                   reset_timeout_s=120, step_timeout_s=60) as runner:
        observations = runner.reset(tasks)
        assert all(not isinstance(o, EnvError) for o in observations.values()), observations
        records = sorted(Path(desktop_root).glob("slot-*/session.json"))
        assert len(records) == 4
        os.kill(json.loads(records[0].read_text())["pid"], signal.SIGKILL)   # one desktop dies mid-episode
        write = {i: f"open('/home/user/Desktop/f{i}.txt', 'w').close()" for i in range(4)}
        results = runner.step(write)
        errors = [i for i, r in results.items() if isinstance(r, EnvError)]
        assert len(errors) == 1 and "VmUnavailable" in results[errors[0]].reason
        finals = runner.step({i: "DONE" for i in range(4) if i not in errors})
        assert all(r.done and r.won for r in finals.values()), finals
