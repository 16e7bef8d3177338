"""Qwen3-VL `computer_use` tool calls -> the pyautogui code (or WAIT/DONE/FAIL) a desktop executes.

The reference agent (`qwen3vl_agent_local.parse_response`) reads
`<tool_call>{"name": "computer_use", "arguments": {"action": ..., ...}}</tool_call>` blocks (or bare
JSON lines with `name` and `arguments`) with actions `left_click`, `right_click`, `middle_click`,
`double_click`, `mouse_move`, `left_click_drag`, `type`, `key`, `scroll`, `wait` and `terminate`
(status success -> DONE, failure -> FAIL), and relative 0-999 coordinates scaled by width/999 and
height/999. This parser does the same, but it is pure and never raises (see `agents.parsers`), and
since the code it writes runs on the desktop, it writes only literals it built itself: integers
clamped to the screen, and strings through `repr`. The reference escapes only quotes and
backslashes, so a newline in typed text broke its code; here it types a newline.

`status` is "ok" when every tool call was read as the prompt asked; otherwise the first fallback:
"no_tool_call", "bad_json", "not_computer_use", "unknown_action", "bad_coordinate", "bad_keys",
"bad_text", "too_many_calls".
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from rlanything_jax.agents.parsers import as_text

WAIT, DONE, FAIL = "WAIT", "DONE", "FAIL"
CONTROL_ACTIONS = (WAIT, DONE, FAIL)
MAX_TOOL_CALLS = 8
MAX_TEXT_CHARS = 4000
MAX_KEYS, MAX_KEY_CHARS = 8, 32
MAX_SCROLL = 100
MAX_DRAG_S = 5.0
MAX_RESPONSE_CHARS = 200_000     # longer responses are cut before parsing (linear time anyway)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CLICKS = {"left_click": "click", "right_click": "rightClick", "middle_click": "middleClick",
           "double_click": "doubleClick", "mouse_move": "moveTo"}
ACTIONS = (*_CLICKS, "left_click_drag", "type", "key", "scroll", "wait", "terminate")


@dataclasses.dataclass(frozen=True)
class DesktopAction:
    commands: tuple[str, ...]    # pyautogui statements and WAIT/DONE/FAIL, in order; () when nothing was read
    status: str
    summary: str = ""            # the response's "Action: ..." line, if any

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def text(self) -> str:
        """The commands one a line: what the desktop env's `step` takes."""
        return "\n".join(self.commands)


class _Fallback(Exception):
    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


def _tool_call_texts(text: str) -> list[str]:
    blocks = [m.group(1) for m in _TOOL_CALL.finditer(text)]
    if blocks:
        return blocks
    # bare JSON lines with a name and arguments, as the reference also reads
    return [line.strip() for line in text.splitlines()
            if line.strip().startswith("{") and '"name"' in line and '"arguments"' in line]


def _json_object(text: str) -> dict[str, Any]:
    start = text.find("{")
    if start < 0:
        raise _Fallback("bad_json")
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        raise _Fallback("bad_json") from None
    if not isinstance(value, dict):
        raise _Fallback("bad_json")
    return value


def _number(value: Any, status: str) -> float:
    if isinstance(value, bool):
        raise _Fallback(status)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise _Fallback(status) from None
    if not math.isfinite(number):
        raise _Fallback(status)
    return number


def _screen_point(coordinate: Any, width: int, height: int) -> tuple[int, int]:
    """Relative 0-999 coordinates -> pixels, clamped onto the screen."""
    if isinstance(coordinate, str):
        try:
            coordinate = json.loads(coordinate)
        except ValueError:
            raise _Fallback("bad_coordinate") from None
    if not isinstance(coordinate, (list, tuple)) or len(coordinate) != 2:
        raise _Fallback("bad_coordinate")
    x, y = (_number(v, "bad_coordinate") for v in coordinate)
    return (min(max(int(x * width / 999), 0), width - 1), min(max(int(y * height / 999), 0), height - 1))


def _keys(value: Any) -> list[str]:
    keys = value if isinstance(value, list) else [value]
    keys = [str(k).strip() for k in keys if k is not None and not isinstance(k, (dict, list))]
    keys = [k for k in keys if k]
    if not keys or len(keys) > MAX_KEYS or any(len(k) > MAX_KEY_CHARS for k in keys):
        raise _Fallback("bad_keys")
    return keys


def _command(arguments: dict[str, Any], width: int, height: int) -> str:
    action = arguments.get("action")
    if not isinstance(action, str):
        raise _Fallback("unknown_action")
    if action in _CLICKS:
        function = _CLICKS[action]
        if "coordinate" not in arguments:   # the reference clicks where the pointer is
            return f"pyautogui.{function}()" if action != "mouse_move" else "pyautogui.moveTo(0, 0)"
        x, y = _screen_point(arguments["coordinate"], width, height)
        return f"pyautogui.{function}({x}, {y})"
    if action == "left_click_drag":
        x, y = _screen_point(arguments.get("coordinate", [0, 0]), width, height)
        duration = min(max(_number(arguments.get("duration", 0.5), "bad_coordinate"), 0.0), MAX_DRAG_S)
        return f"pyautogui.dragTo({x}, {y}, duration={duration:.2f})"
    if action == "type":
        text = arguments.get("text", "")
        if not isinstance(text, (str, int, float)) or len(str(text)) > MAX_TEXT_CHARS:
            raise _Fallback("bad_text")
        return f"pyautogui.typewrite({str(text)!r})"
    if action == "key":
        keys = _keys(arguments.get("keys", []))
        listed = ", ".join(repr(k) for k in keys)
        return f"pyautogui.hotkey({listed})" if len(keys) > 1 else f"pyautogui.press({listed})"
    if action == "scroll":
        pixels = int(min(max(_number(arguments.get("pixels", 0), "bad_coordinate"), -MAX_SCROLL), MAX_SCROLL))
        if "coordinate" in arguments:
            x, y = _screen_point(arguments["coordinate"], width, height)
            return f"pyautogui.scroll({pixels}, x={x}, y={y})"
        return f"pyautogui.scroll({pixels})"
    if action == "wait":
        return WAIT
    if action == "terminate":
        return DONE if str(arguments.get("status") or "success").strip().lower() == "success" else FAIL
    raise _Fallback("unknown_action")


def _summary(text: str) -> str:
    for line in text.splitlines():
        if line.strip().lower().startswith("action:"):
            return line.strip().split(":", 1)[1].strip()
    return ""


def parse_computer_use(response: Any, screen_width: int = 1920, screen_height: int = 1080) -> DesktopAction:
    """Every `computer_use` call in `response`, in order, up to the first terminate."""
    text = as_text(response)[:MAX_RESPONSE_CHARS]
    calls = _tool_call_texts(text)
    if not calls:
        return DesktopAction((), "no_tool_call", _summary(text))
    commands: list[str] = []
    status = "ok" if len(calls) <= MAX_TOOL_CALLS else "too_many_calls"
    for call_text in calls[:MAX_TOOL_CALLS]:
        try:
            call = _json_object(call_text)
            if call.get("name") != "computer_use":
                raise _Fallback("not_computer_use")
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):   # some models write the arguments as a JSON string
                arguments = _json_object(arguments)
            if not isinstance(arguments, dict):
                raise _Fallback("bad_json")
            commands.append(_command(arguments, screen_width, screen_height))
        except _Fallback as fallback:
            status = fallback.status if status == "ok" else status
            continue
        if commands[-1] in (DONE, FAIL):
            break
    return DesktopAction(tuple(commands), status, _summary(text))
