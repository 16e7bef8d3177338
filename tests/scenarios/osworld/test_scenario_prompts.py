"""The OSWorld scenario's prompts against the reference agent's (qwen3vl_agent_local.py, opencua/prompts.py):
the texts, and the screenshots at their places in the rendered chat."""

import json

import numpy as np

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.prompt_tokens import IMAGE_PLACEHOLDER, message_images, text_only
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.scenarios.osworld.agent_prompts import SYSTEM_PROMPT
from rlanything_jax.scenarios.osworld.scenario import DesktopPrompts

TASK = Task("t", "osworld", "Rename the folder 'a' on the Desktop to 'b'.")


def screenshot(value: int) -> Observation:
    return Observation("", images=(np.full((1080, 1920, 3), value, np.uint8),))


def response(i: int) -> str:
    return f"Action: step {i} summary\n<tool_call>\n" + json.dumps(
        {"name": "computer_use", "arguments": {"action": "key", "keys": ["enter"]}}) + "\n</tool_call>"


def episode(num_steps: int) -> Episode:
    steps = [StepRecord(screenshot(i), (), (), (), response(i), "stop", "pyautogui.press('enter')", "ok",
                        next_observation=screenshot(i + 1)) for i in range(num_steps)]
    return Episode(TASK, 0, tuple(steps))


def test_system_prompt_is_the_reference_agents():
    assert SYSTEM_PROMPT.startswith("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                                    "You are provided with function signatures within <tools></tools> XML tags:\n"
                                    "<tools>\n{\"type\": \"function\", \"function\": {\"name_for_human\": "
                                    "\"computer_use\", \"name\": \"computer_use\", \"description\": \"Use a mouse")
    assert "\\n* The screen's resolution is 1000x1000.\\n" in SYSTEM_PROMPT
    assert SYSTEM_PROMPT.endswith("Rules:\n- Output exactly in the order: Action, <tool_call>.\n- Be brief: one "
                                  "sentence for Action.\n- Do not output anything else outside those parts.\n- If "
                                  "finishing, use action=terminate in the tool call.")
    assert '"args_format": "Format the arguments as a JSON object."}}\n</tools>' in SYSTEM_PROMPT


def test_policy_prompt_keeps_the_last_three_screenshots_and_all_previous_actions():
    prompts = DesktopPrompts()
    played = episode(4)
    current = screenshot(4)
    messages = prompts.step_messages(TASK, played, current)
    rendered = text_only(messages)
    # system, then (screenshot, response) of steps 3 and 4, then the current screenshot with the instruction
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert rendered[1]["content"] == IMAGE_PLACEHOLDER and rendered[3]["content"] == IMAGE_PLACEHOLDER
    assert rendered[2]["content"] == response(2) and rendered[4]["content"] == response(3)
    assert rendered[5]["content"] == (
        IMAGE_PLACEHOLDER + "\nPlease generate the next move according to the UI screenshot, instruction and previous "
        "actions.\n\nInstruction: Rename the folder 'a' on the Desktop to 'b'.\n\nPrevious actions:\n"
        "Step 1: step 0 summary\nStep 2: step 1 summary\nStep 3: step 2 summary\nStep 4: step 3 summary")
    images = message_images(messages)
    # the screenshots of steps 3 and 4 and the current one, in order, resized as the reference's agent does
    assert [int(img[0, 0, 0]) for img in images] == [2, 3, 4]
    assert all(img.shape == (1088, 1920, 3) for img in images)
    first = text_only(prompts.step_messages(TASK, episode(0), current))
    assert first[-1]["content"].endswith("Previous actions:\nNone") and len(first) == 2


def test_judge_prompt_shows_both_screenshots_around_the_step():
    prompts = DesktopPrompts()
    played = episode(3)
    messages = prompts.judge_messages(TASK, played, 2)
    assert messages[0]["content"] == (
        "You are an evaluator for the most recent step of a GUI agent.\nYou are provided with:\n1) the interaction "
        "history between the agent and the environment,\n2) the agent\u2019s objective, and\n3) the agent\u2019s most "
        "recent step to evaluate.")
    user = text_only(messages)[1]["content"]
    expected = (
        "Previous Actions:\n Step 1: step 0 summary\nStep 2: step 1 summary"
        "Agent's current observation:\n" + IMAGE_PLACEHOLDER
        + "\n\nYou are a strict evaluator to evaluate the most recent step of the agent in the following.\n\n"
          "Objective of Agent:\nRename the folder 'a' on the Desktop to 'b'.\n\n"
          "Agent's most recent step (reasoning + action):\n" + response(2) + "\n\n"
        + "\nNext observation after executing this action:\n" + IMAGE_PLACEHOLDER
        + "\nEvaluate ONLY the single most recent step using the information above.\n\n")
    assert user.startswith(expected)
    assert user.endswith("Think carefully, then provide your reasoning and put the final score in \\\\boxed{{}}.\n")
    before, after = message_images(messages)
    assert int(before[0, 0, 0]) == 2 and int(after[0, 0, 0]) == 3   # pre-action, then post-action screenshot
    first = text_only(prompts.judge_messages(TASK, played, 0))[1]["content"]
    assert first.startswith("Previous Actions:\n NoneAgent's current observation:\n")


def test_judgments_parse_as_the_reference_with_counted_fallbacks():
    prompts = DesktopPrompts()
    cases = {"so \\boxed{1}": (1, True), "\\boxed{ -1 }": (-1, True), "\\boxed{+1}": (1, True),
             "\\boxed{1} then \\boxed{-1}": (-1, True), "\\boxed{1/2}": (0, False), "no box": (0, False),
             "\\boxed{1": (0, False), "\\boxed{2}": (0, False), None: (0, False)}
    for text, (score, valid) in cases.items():
        parsed = prompts.parse_judgment(text)
        assert (parsed.score, parsed.valid) == (score, valid), text
    for label in (1, -1):
        assert prompts.parse_judgment(prompts.judgment_text(label)).score == label


def test_expert_answers_parse_back_to_the_same_command():
    prompts = DesktopPrompts()
    observation = screenshot(0)
    for command in ("pyautogui.typewrite('mv a b\\n')", "DONE", "FAIL", "WAIT", "pyautogui.press('escape')",
                    "pyautogui.hotkey('ctrl', 'alt', 't')", "pyautogui.click(960, 540)"):
        answer = prompts.answer_text(observation, command)
        assert answer.startswith("Action: ")
        assert prompts.parse_action(answer, observation).action == command
