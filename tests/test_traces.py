"""Episode traces: the page shows each step's answer, action and judgments; the PNGs are the screenshots seen."""

import numpy as np
from PIL import Image

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepJudgments, StepRecord
from rlanything_jax.system.traces import write_step_traces


def _episode(task_id: str, group_index: int, rng: np.random.Generator) -> JudgedEpisode:
    screens = [rng.integers(0, 256, (36, 64, 3), dtype=np.uint8) for _ in range(3)]
    steps = tuple(StepRecord(observation=Observation(f"screen {i} <b>", images=(screens[i],)), prompt_tokens=(1, 2),
                             response_tokens=(3, 4), logprobs=(-0.1, -0.2), response_text=f"Action: step {i} & more",
                             finish_reason="stop", action=f"pyautogui.press('{i}')", parse_status="ok",
                             next_observation=Observation(f"screen {i + 1}", images=(screens[i + 1],)))
                  for i in range(2))
    judgments = StepJudgments(scores=np.array([[1, -1], [1, 1]], np.int8),
                              valid=np.array([[True, False], [True, True]]),
                              texts=(("\\boxed{1}", "junk"), ("\\boxed{1}", "\\boxed{1}")), prompts=((), ()),
                              samples=((), ()))
    task = Task(task_id=task_id, kind="desk", goal="Rename the folder")
    return JudgedEpisode(Episode(task=task, group_index=group_index, steps=steps, won=True, end_reason="won"),
                         judgments), screens


def test_traces_hold_the_screenshots_the_answers_and_the_judgments(tmp_path):
    rng = np.random.default_rng(0)
    (a0, screens), (a1, _), (b0, _) = (_episode("task/a", 0, rng), _episode("task/a", 1, rng),
                                        _episode("task-b", 0, rng))
    pages = write_step_traces([a0, a1, b0], 2, tmp_path)
    # Each task's first rollout comes before any task's second one.
    assert [p.parent.name for p in pages] == ["task-b-g0", "task_a-g0"]
    page = (tmp_path / "task_a-g0" / "trace.html").read_text()
    assert "Action: step 1 &amp; more" in page and "screen 0 &lt;b&gt;" in page
    assert "pyautogui.press(&#x27;0&#x27;)" in page and "Rename the folder" in page
    assert "reward model: +1, unparsed" in page and "reward model: +1, +1" in page
    for index, pixels in enumerate(screens):   # two steps' screenshots, then the one after the last step
        saved = np.asarray(Image.open(tmp_path / "task_a-g0" / f"step_{index:03d}_0.png"))
        np.testing.assert_array_equal(saved, pixels)
    assert not (tmp_path / "task_a-g1").exists()
