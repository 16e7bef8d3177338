"""The policy's prompt and answer on desktop tasks, as the reference's Qwen3-VL agent writes them
(`OSWorld-main/mm_agents/qwen3vl_agent_local.py`, ALGORITHM.md 5.1).

Every turn's prompt is rebuilt from the episode: the system prompt (the `computer_use` tool and the
response format), then for each of the last `image_history - 1` earlier steps a user message with
its screenshot and an assistant message with the agent's full response, then a user message with
the current screenshot and the instruction with the "Previous actions" of every earlier step (their
one-line `Action:` summaries). Screenshots are resized with `smart_resize(factor=32,
max_pixels=...)` first. The answer is an `Action:` line and one `<tool_call>`, read by
`actions.parse_computer_use` with the screen's size.

Because the current step's instruction text moves to the next user message, a prompt never
extends the previous one; the rollout prefills it again (`rebuilds_history`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.trajectory import Episode, ParsedAction
from rlanything_jax.core.models.image_sizes import smart_resize
from rlanything_jax.scenarios.osworld.actions import DONE, FAIL, WAIT, parse_computer_use
from rlanything_jax.scenarios.osworld.episodes import tool_call_text

PAPER_MAX_PIXELS = 16 * 16 * 4 * 12800   # the reference agent's cap: 1920x1080 -> 1920x1088
NO_ACTION = "Execute the tool call"      # the reference's summary of a tool call without an Action line

_DESCRIPTION = "\n".join([
    "Use a mouse and keyboard to interact with a computer, and take screenshots.",
    "* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. You must "
    "click on desktop icons to start applications.",
    "* Some applications may take time to start or process actions, so you may need to wait and take successive "
    "screenshots to see the results of your actions.",
    "* The screen's resolution is 1000x1000.",
    "* Whenever you intend to move the cursor to click on an element like an icon, you should consult a screenshot "
    "to determine the coordinates of the element before moving the cursor.",
    "* If you tried clicking on a program or link but it failed to load even after waiting, try adjusting your "
    "cursor position so that the tip of the cursor visually falls on the element that you want to click.",
    "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't "
    "click boxes on their edges unless asked.",
])
_ACTION_DESCRIPTION = """
* `key`: Performs key down presses on the arguments passed in order, then performs key releases in reverse order.
* `type`: Type a string of text on the keyboard.
* `mouse_move`: Move the cursor to a specified (x, y) pixel coordinate on the screen.
* `left_click`: Click the left mouse button at a specified (x, y) pixel coordinate on the screen.
* `left_click_drag`: Click and drag the cursor to a specified (x, y) pixel coordinate on the screen.
* `right_click`: Click the right mouse button at a specified (x, y) pixel coordinate on the screen.
* `middle_click`: Click the middle mouse button at a specified (x, y) pixel coordinate on the screen.
* `double_click`: Double-click the left mouse button at a specified (x, y) pixel coordinate on the screen.
* `triple_click`: Triple-click the left mouse button at a specified (x, y) pixel coordinate on the screen \
(simulated as double-click since it's the closest action).
* `scroll`: Performs a scroll of the mouse scroll wheel.
* `hscroll`: Performs a horizontal scroll (mapped to regular scroll).
* `wait`: Wait specified seconds for the change to happen.
* `terminate`: Terminate the current task and report its completion status.
        """
_TOOL = {"type": "function", "function": {
    "name_for_human": "computer_use", "name": "computer_use", "description": _DESCRIPTION,
    "parameters": {"properties": {
        "action": {"description": _ACTION_DESCRIPTION,
                   "enum": ["key", "type", "mouse_move", "left_click", "left_click_drag", "right_click",
                            "middle_click", "double_click", "scroll", "wait", "terminate"], "type": "string"},
        "keys": {"description": "Required only by `action=key`.", "type": "array"},
        "text": {"description": "Required only by `action=type`.", "type": "string"},
        "coordinate": {"description": "The x,y coordinates for mouse actions.", "type": "array"},
        "pixels": {"description": "The amount of scrolling.", "type": "number"},
        "time": {"description": "The seconds to wait.", "type": "number"},
        "status": {"description": "The status of the task.", "type": "string", "enum": ["success", "failure"]}},
        "required": ["action"], "type": "object"},
    "args_format": "Format the arguments as a JSON object."}}
SYSTEM_PROMPT = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                 + json.dumps(_TOOL)
                 + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                 "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                 '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n'
                 "# Response format\n\nResponse format for every step:\n"
                 "1) Action: a short imperative describing what to do in the UI.\n"
                 "2) A single <tool_call>...</tool_call> block containing only the JSON: "
                 '{"name": <function-name>, "arguments": <args-json-object>}.\n\n'
                 "Rules:\n- Output exactly in the order: Action, <tool_call>.\n- Be brief: one sentence for Action.\n"
                 "- Do not output anything else outside those parts.\n"
                 "- If finishing, use action=terminate in the tool call.")
INSTRUCTION_PROMPT = ("\nPlease generate the next move according to the UI screenshot, instruction and previous "
                      "actions.\n\nInstruction: {instruction}\n\nPrevious actions:\n{previous_actions}")


class ScreenshotResizer:
    """Screenshots resized as the agent shows them (`smart_resize`, factor 32), each once: the same array
    stands for a screenshot on every turn (the prompt-token cache keys on it)."""

    def __init__(self, max_pixels: int = PAPER_MAX_PIXELS, max_entries: int = 512):
        self.max_pixels = max_pixels
        self.max_entries = max_entries
        self._done: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, screenshot: np.ndarray) -> np.ndarray:
        entry = self._done.get(id(screenshot))
        if entry is not None and entry[0] is screenshot:
            return entry[1]
        from PIL import Image

        height, width = screenshot.shape[:2]
        new_h, new_w = smart_resize(height, width, factor=32, min_pixels=32 * 32, max_pixels=self.max_pixels)
        resized = screenshot if (new_h, new_w) == (height, width) else np.asarray(
            Image.fromarray(np.asarray(screenshot, np.uint8)).resize((new_w, new_h), Image.Resampling.BICUBIC))
        if len(self._done) >= self.max_entries:   # screenshots of finished episodes are not needed again
            self._done.clear()
        self._done[id(screenshot)] = (screenshot, resized)
        return resized


def action_summary(response_text: str) -> str:
    """The response's one-line `Action:` summary, as the reference's agent keeps it for later prompts."""
    parsed = parse_computer_use(response_text)
    return parsed.summary or (NO_ACTION if parsed.commands else "")


def previous_actions(responses: Sequence[str]) -> str:
    lines = [f"Step {i + 1}: {action_summary(text)}" for i, text in enumerate(responses)]
    return "\n".join(lines) if lines else "None"


def screen_size(observation: Observation) -> tuple[int, int]:
    """(width, height) of the observation's screenshot (the coordinates' scale)."""
    if not observation.images:
        return 1920, 1080
    height, width = np.asarray(observation.images[0]).shape[:2]
    return int(width), int(height)


class DesktopAgentPrompts:
    """The policy side of the scenario (`PolicyPrompts` with rebuilt prompts)."""

    name = "osworld"
    rebuilds_history = True

    def __init__(self, max_pixels: int = PAPER_MAX_PIXELS, image_history: int = 3):
        self.resize = ScreenshotResizer(max_pixels)
        self.image_history = image_history

    def step_messages(self, task: Task, episode: Episode, observation: Observation) -> list[dict[str, Any]]:
        steps = episode.steps
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        for step in steps[max(0, len(steps) - self.image_history + 1):]:
            messages.append({"role": "user", "content": [{"type": "image", "image": self._image(step.observation)}]})
            messages.append({"role": "assistant", "content": step.response_text})
        text = INSTRUCTION_PROMPT.format(instruction=task.goal,
                                         previous_actions=previous_actions([s.response_text for s in steps]))
        messages.append({"role": "user", "content": [{"type": "image", "image": self._image(observation)},
                                                     {"type": "text", "text": text}]})
        return messages

    def _image(self, observation: Observation) -> np.ndarray:
        return self.resize(np.asarray(observation.images[0], np.uint8))

    def initial_messages(self, task: Task, observation: Observation) -> list[dict[str, Any]]:
        return self.step_messages(task, Episode(task=task, group_index=0), observation)

    def turn_message(self, episode: Episode, observation: Observation) -> dict[str, Any]:
        return self.step_messages(episode.task, episode, observation)[-1]

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        width, height = screen_size(observation)
        parsed = parse_computer_use(response_text, width, height)
        return ParsedAction(parsed.text, parsed.status)

    def answer_text(self, observation: Observation, action: str) -> str:
        """An `Action:` line and the tool calls that run `action` (one command a line, as the parser writes)."""
        width, height = screen_size(observation)
        calls = [call for call in (tool_call_of(line, width, height) for line in action.splitlines()) if call]
        summary = "; ".join(describe(call) for call in calls) or "Wait for the screen to change"
        return f"Action: {summary}\n" + "\n".join(tool_call_text(call) for call in calls)


def tool_call_of(command: str, width: int, height: int) -> dict[str, Any] | None:
    """The `computer_use` arguments that make the parser write `command` (None for what it never writes)."""
    command = command.strip()
    if command in (DONE, FAIL):
        return {"action": "terminate", "status": "success" if command == DONE else "failure"}
    if command == WAIT:
        return {"action": "wait"}
    try:
        call = ast.parse(command, mode="eval").body
        name = call.func.attr
        args = [ast.literal_eval(a) for a in call.args]
    except (SyntaxError, ValueError, AttributeError):
        return None
    clicks = {"click": "left_click", "rightClick": "right_click", "middleClick": "middle_click",
              "doubleClick": "double_click", "moveTo": "mouse_move"}
    if name == "typewrite" and args:
        return {"action": "type", "text": str(args[0])}
    if name in ("press", "hotkey"):
        return {"action": "key", "keys": [str(a) for a in args]}
    if name == "scroll" and args:
        return {"action": "scroll", "pixels": int(args[0])}
    if name in clicks and len(args) == 2:
        # pixels -> the relative 0-999 grid (the parser scales back by width / 999)
        return {"action": clicks[name], "coordinate": [round(args[0] * 999 / width), round(args[1] * 999 / height)]}
    return None


def describe(call: dict[str, Any]) -> str:
    action = call.get("action")
    if action == "type":
        return f"Type `{call['text'].rstrip()}` into the focused window"
    if action == "key":
        return f"Press {'+'.join(call['keys'])}"
    if action == "terminate":
        return "Finish the task" if call.get("status") == "success" else "Report that the task cannot be done"
    if action == "wait":
        return "Wait for the screen to change"
    return f"{str(action).replace('_', ' ').capitalize()} at {call.get('coordinate')}"
