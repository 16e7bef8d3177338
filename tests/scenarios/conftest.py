"""Fixtures the generator tests share: a raw ALFWorld game in a big room and a built-in stdio problem
(imported inside the fixtures: the scenario tests that need neither do not import ALFWorld)."""

import pytest


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("raw_games"))


@pytest.fixture(scope="module")
def raw_alfworld(games_dir):
    from rlanything_jax.scenarios.alfworld import env as alfworld
    from tests.scenarios.generator_inputs import ROOM

    return alfworld.make_task(4, "pick_and_place_simple", ROOM, games_dir)


@pytest.fixture(scope="module")
def sum_two():
    from rlanything_jax.scenarios.coding import env as coding

    return next(t for t in coding.builtin_stdio_tasks() if t.task_id == "demo/sum_two")
