"""EnvRunner on real worker processes: toy envs that hang, raise and crash, and TextWorld games."""

import random
import time

import pytest

from rlanything_jax.agents.envs.base import Observation, StepResult, Task
from rlanything_jax.agents.envs.runner import EnvError, EnvRunner
from tests.envs.toy_envs import ACTIONS, ToyEnv, toy_task

TOY_MODULES = ("tests.envs.toy_envs",)


def toy_runner(num_workers=2, step_timeout_s=5.0, kill_grace_s=0.5, **kwargs) -> EnvRunner:
    return EnvRunner(num_workers=num_workers, step_timeout_s=step_timeout_s, reset_timeout_s=10.0,
                     kill_grace_s=kill_grace_s, env_modules=TOY_MODULES, **kwargs)


def serial(task: Task, actions) -> Observation | StepResult:
    """What the episode shows after `actions`, stepped in this process."""
    env = ToyEnv()
    result = env.reset(task)
    for action in actions:
        result = env.step(action)
    return result


def play_rounds(runner, tasks, histories, rounds, rng):
    """Steps every episode `rounds` times with random actions; returns the last results."""
    results = {}
    for _ in range(rounds):
        actions = {e: rng.choice(ACTIONS[:3]) for e in histories}
        results = runner.step(actions)
        for e, action in actions.items():
            histories[e].append(action)
    return results


def test_many_concurrent_episodes_match_serial_stepping():
    rng = random.Random(0)
    tasks = {e: toy_task(e, start=e % 7) for e in range(96)}
    with toy_runner() as runner:
        observations = runner.reset(tasks)
        assert observations == {e: serial(t, []) for e, t in tasks.items()}
        assert sorted(runner.worker_of(e) for e in tasks).count(0) == 48  # spread evenly
        histories, steps_taken = {e: [] for e in tasks}, 0
        for _ in range(12):
            actions = {e: rng.choice(ACTIONS) for e in histories}
            results = runner.step(actions)
            steps_taken += len(actions)
            assert list(results) == list(actions)
            for e, action in actions.items():
                histories[e].append(action)
                assert results[e] == serial(tasks[e], histories[e]), (e, histories[e])
                if results[e].done:  # finished episodes leave; the rest keep going
                    runner.close_episode(e)
                    del histories[e]
        metrics = runner.metrics
    assert metrics["env_errors"] == 0 and metrics["worker_restarts"] == 0
    assert metrics["resets"] == 96 and metrics["live_episodes"] == len(histories)
    assert metrics["env_steps"] == steps_taken and metrics["replayed_steps"] == 0


def test_exception_ends_only_its_episode_and_the_worker_lives_on():
    tasks = {e: toy_task(e) for e in range(6)}
    with toy_runner() as runner:
        runner.reset(tasks)
        results = runner.step({e: ("raise" if e == 2 else "add 1") for e in tasks})
        assert isinstance(results[2], EnvError) and results[2].env_error and results[2].cause == "exception"
        assert "ValueError" in results[2].reason
        assert all(results[e] == serial(tasks[e], ["add 1"]) for e in tasks if e != 2)
        with pytest.raises(KeyError):
            runner.step({2: "add 1"})
        assert runner.metrics["worker_restarts"] == 0 and runner.metrics["env_errors/exception"] == 1


def test_python_hang_is_interrupted_in_the_worker_without_killing_it():
    tasks = {e: toy_task(e) for e in range(4)}
    # a long grace: on a loaded machine the parent's kill must not race the worker's own timer
    with toy_runner(num_workers=1, step_timeout_s=0.5, kill_grace_s=30.0) as runner:
        runner.reset(tasks)
        results = runner.step({0: "add 1", 1: "hang", 2: "add 2", 3: "add 5"})
        assert isinstance(results[1], EnvError) and results[1].cause == "timeout"
        assert results[2] == serial(tasks[2], ["add 2"]) and results[3] == serial(tasks[3], ["add 5"])
        assert runner.metrics["worker_restarts"] == 0   # the worker's own timer ended it, not the kill


@pytest.mark.parametrize("bad_action,cause", [("hang_hard", "timeout"), ("exit", "crash"), ("sigkill", "crash")])
def test_killed_worker_restores_its_other_episodes_by_replay(bad_action, cause):
    rng = random.Random(1)
    tasks = {e: toy_task(e, start=e) for e in range(16)}
    with toy_runner(step_timeout_s=1.0) as runner:
        runner.reset(tasks)
        histories = {e: [] for e in tasks}
        play_rounds(runner, tasks, histories, rounds=3, rng=rng)
        same_worker = [e for e in tasks if runner.worker_of(e) == runner.worker_of(0)]
        idle = same_worker[-1]  # not stepped in the failing round: restored in the background
        actions = {e: rng.choice(ACTIONS[:3]) for e in tasks if e != idle}
        actions[same_worker[1]] = bad_action  # an episode in the middle of its worker's batch
        results = runner.step(actions)
        culprit = results.pop(same_worker[1])
        assert isinstance(culprit, EnvError) and culprit.cause == cause
        for e, result in results.items():
            histories[e].append(actions[e])
            assert result == serial(tasks[e], histories[e]), e
        del histories[same_worker[1]]
        final = play_rounds(runner, tasks, histories, rounds=2, rng=rng)
        assert all(final[e] == serial(tasks[e], histories[e]) for e in histories)
        metrics = runner.metrics
    assert metrics["worker_restarts"] == 1 and metrics["env_errors"] == 1
    assert metrics["replayed_steps"] == 3 * (len(same_worker) - 1)


def test_replay_that_diverges_ends_only_that_episode():
    tasks = {e: toy_task(e) for e in range(4)}
    with toy_runner(num_workers=1) as runner:
        runner.reset(tasks)
        runner.step({0: "noise", 1: "add 1", 2: "add 2", 3: "noise"})
        results = runner.step({0: "add 1", 1: "sigkill", 2: "add 1"})  # episode 3 stays idle
        assert results[0].cause == "replay" and results[1].cause == "crash"
        assert results[2] == serial(tasks[2], ["add 2", "add 1"])
        later = runner.step({2: "add 5", 3: "add 1"})  # 3 diverged in the background restore
        assert isinstance(later[3], EnvError) and later[3].cause == "replay"
        assert later[2] == serial(tasks[2], ["add 2", "add 1", "add 5"])
        assert runner.live_episodes == [2]


@pytest.mark.parametrize("misbehaviour,cause", [("exit", "crash"), ("hang_hard", "timeout")])
def test_reset_failure_ends_only_that_episode(misbehaviour, cause):
    tasks = {e: toy_task(e, crash_on_reset=misbehaviour if e == 2 else None) for e in range(5)}
    with EnvRunner(num_workers=1, reset_timeout_s=1.0, kill_grace_s=0.5, env_modules=TOY_MODULES) as runner:
        observations = runner.reset(tasks)
        assert observations[2].cause == cause
        assert all(observations[e] == serial(tasks[e], []) for e in tasks if e != 2)
        results = runner.step({e: "add 2" for e in tasks if e != 2})
        assert all(results[e] == serial(tasks[e], ["add 2"]) for e in results)


def test_unimportable_env_module_fails_episodes_not_the_run():
    with EnvRunner(num_workers=1, env_modules=("tests.envs.no_such_module",)) as runner:
        observations = runner.reset({0: toy_task(0)})
    assert observations[0].cause == "exception" and "no_such_module" in observations[0].reason


def test_closed_episode_can_be_started_again_from_scratch():
    with toy_runner(num_workers=1) as runner:
        runner.reset({0: toy_task(0)})
        runner.step({0: "add 5"})
        with pytest.raises(ValueError):
            runner.reset({0: toy_task(0)})
        runner.close_episode(0)
        with pytest.raises(KeyError):
            runner.step({0: "add 1"})
        assert runner.reset({0: toy_task(0)})[0] == serial(toy_task(0), [])
        assert runner.step({0: "add 1"})[0] == serial(toy_task(0), ["add 1"])


@pytest.mark.slow
def test_textworld_games_through_the_runner_match_serial_play(tmp_path_factory):
    from rlanything_jax.scenarios.textworld.env import (
        TextWorldEnv,
        TextWorldKnobs,
        expert_actions,
        make_task,
    )

    games_dir = tmp_path_factory.getbasetemp() / "textworld_games"  # shared with test_textworld.py
    games = [make_task(seed, knobs, games_dir) for seed, knobs in [
        (11, TextWorldKnobs("custom", nb_rooms=3, nb_objects=5, quest_length=3)),
        (2, TextWorldKnobs("coin_collector", level=5)),
        (2, TextWorldKnobs("treasure_hunter", level=8)),
        (6, TextWorldKnobs("custom", nb_rooms=8, nb_objects=12, quest_length=6))]]
    plans = {g.task_id: ["look", "inventory", *expert_actions(g)] for g in games}
    tasks = {e: games[e % len(games)] for e in range(64)}
    with EnvRunner(num_workers=2, env_modules=("rlanything_jax.scenarios.textworld.env",)) as runner:
        started = time.perf_counter()
        observations = runner.reset(tasks)
        reset_s = time.perf_counter() - started
        assert [o for o in observations.values() if isinstance(o, EnvError)] == []   # with their reasons
        last, steps, started = {}, 0, time.perf_counter()
        for turn in range(max(len(p) for p in plans.values())):
            actions = {e: plans[t.task_id][turn] for e, t in tasks.items() if turn < len(plans[t.task_id])}
            last.update(runner.step(actions))
            steps += len(actions)
        step_s = time.perf_counter() - started
        assert runner.metrics["env_errors"] == 0
    print(f"\n64 TextWorld episodes on 2 workers: reset {reset_s:.2f}s, {steps} steps in {step_s:.2f}s "
          f"= {steps / step_s:.0f} env steps/s")
    env = TextWorldEnv()
    for game in games:
        env.reset(game)
        expected = [env.step(a) for a in plans[game.task_id]][-1]
        assert expected.won
        assert all(last[e] == expected for e, t in tasks.items() if t is game)
    env.close()


def test_submitted_steps_and_resets_queue_per_worker_and_match_serial_stepping():
    """Two cohorts of episodes stepped alternately without waiting, as the rollout engine overlaps them with
    decoding: a reset submitted while a worker still steps the other cohort waits in that worker's queue, and
    the results are collected in any order."""
    rng = random.Random(2)
    tasks = {e: toy_task(e, start=e) for e in range(12)}
    cohorts = [list(range(0, 6)), list(range(6, 12))]
    with toy_runner(num_workers=1) as runner:
        first = runner.submit_reset({e: tasks[e] for e in cohorts[0]})
        second = runner.submit_reset({e: tasks[e] for e in cohorts[1]})   # queued behind the first
        assert second.result() == {e: serial(tasks[e], []) for e in cohorts[1]}
        assert first.result() == {e: serial(tasks[e], []) for e in cohorts[0]}
        histories = {e: [] for e in tasks}
        submitted = {}
        for _ in range(4):
            for c, cohort in enumerate(cohorts):
                if c in submitted:   # the other cohort's step is still in flight while this one is collected
                    actions, pending = submitted.pop(c)
                    results = pending.result()
                    assert list(results) == list(actions)
                    for e, action in actions.items():
                        histories[e].append(action)
                        assert results[e] == serial(tasks[e], histories[e]), (e, histories[e])
                actions = {e: rng.choice(ACTIONS[:3]) for e in cohort}
                submitted[c] = actions, runner.submit_step(actions)
        for actions, pending in submitted.values():
            results = pending.result()
            for e, action in actions.items():
                histories[e].append(action)
                assert results[e] == serial(tasks[e], histories[e])
        late = runner.submit_reset({12: toy_task(12, start=4)})
        step = runner.submit_step({0: "add 5"})
        assert step.result()[0] == serial(tasks[0], histories[0] + ["add 5"])
        assert late.result()[12] == serial(toy_task(12, start=4), [])
        metrics = runner.metrics
    assert metrics["env_steps"] == 4 * 12 + 1 and metrics["resets"] == 13 and metrics["env_errors"] == 0


def test_a_crash_restores_the_episodes_of_requests_queued_behind_it():
    """A worker dies running one request while another request's step and a reset wait for it: the queued
    episodes are restored (replayed or started) on the fresh worker before their own operations run."""
    tasks = {e: toy_task(e, start=e) for e in range(4)}
    with toy_runner(num_workers=1, step_timeout_s=1.0) as runner:
        runner.reset(tasks)
        runner.step({e: "add 1" for e in tasks})
        crashing = runner.submit_step({0: "exit", 1: "add 2"})
        queued_step = runner.submit_step({2: "add 5", 3: "add 2"})
        queued_reset = runner.submit_reset({4: toy_task(4, start=9)})
        assert queued_reset.result()[4] == serial(toy_task(4, start=9), [])
        results = queued_step.result()
        assert results == {2: serial(tasks[2], ["add 1", "add 5"]), 3: serial(tasks[3], ["add 1", "add 2"])}
        results = crashing.result()
        assert isinstance(results[0], EnvError) and results[0].cause == "crash"
        assert results[1] == serial(tasks[1], ["add 1", "add 2"])
        assert runner.step({4: "add 1"})[4] == serial(toy_task(4, start=9), ["add 1"])
        metrics = runner.metrics
    assert metrics["worker_restarts"] == 1 and metrics["env_errors"] == 1


def test_episodes_reset_in_one_group_spread_over_the_workers():
    """Episodes stepped together (a cohort) are spread first, so that no worker steps most of them."""
    with toy_runner(num_workers=2) as runner:
        runner.reset({e: toy_task(e) for e in range(4)})
        assert [runner.worker_of(e) for e in range(4)] == [0, 1, 0, 1]
        runner.close_episode(0)
        runner.close_episode(2)   # worker 0 is empty, worker 1 holds two episodes of group 0
        runner.reset({4: toy_task(4), 5: toy_task(5)}, group=1)
        assert [runner.worker_of(e) for e in (4, 5)] == [0, 1]   # the fewest of all alone would say [0, 0]
