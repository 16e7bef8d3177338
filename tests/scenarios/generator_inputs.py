"""Inputs the generator tests share: played episodes of a failed ALFWorld game, problem answers."""

import json

import numpy as np

from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepJudgments, StepRecord
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs

ROOM = GameKnobs(num_receptacles=14, num_distractors=8)   # a big room: rewrites have much to choose from


def step_record(observation, action, next_observation=None):
    return StepRecord(observation=Observation(observation), prompt_tokens=[], response_tokens=[], logprobs=[],
                      response_text="", finish_reason="stop", action=action, parse_status="ok",
                      next_observation=Observation(next_observation) if next_observation else None)


def failed_alfworld_episodes(task):
    """Two lost rollouts (the expert's first steps, cut short) and one won rollout."""
    trajectory = alfworld.expert_trajectory(task)
    steps = [step_record(obs, action, "Nothing happens.") for obs, _, action in trajectory.steps[:3]]
    judgments = StepJudgments(scores=np.array([[1, -1], [-1, -1], [-1, 0]], np.int8),
                              valid=np.array([[True, True], [True, True], [True, False]]),
                              texts=(("", ""),) * 3, prompts=((1,),) * 3, samples=((((2,), (0.0,)),) * 2,) * 3)
    lost = JudgedEpisode(Episode(task=task, group_index=0, steps=steps, won=False, end_reason="max_steps"), judgments)
    lost_unjudged = JudgedEpisode(Episode(task=task, group_index=2, steps=steps[:2], won=False,
                                          end_reason="max_steps"))
    won = JudgedEpisode(Episode(task=task, group_index=1, steps=steps[:1], won=True, end_reason="won"))
    return [lost, won, lost_unjudged]


def problem_json(question, pairs, fenced=True):
    body = json.dumps({"question": question, "test_method": "stdio", "test_time_limit": 99,
                       "test_input": [i for i, _ in pairs], "test_output": [o for _, o in pairs]})
    return f"Here is the problem.\n```json\n{body}\n```" if fenced else body


THREE_SUMS = [("1 2 3\n", "6\n"), ("0 0 0\n", "0\n"), ("-1 -2 -3\n", "-6\n"), ("5 5 5\n", "15\n"),
              ("1 1 1\n", "3\n"), ("7 0 0\n", "7\n")]
