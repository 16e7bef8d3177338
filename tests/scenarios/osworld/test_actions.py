"""The computer_use parser: the reference's mapping, pure and never raising, and its code run for real."""

import json

import pytest

from rlanything_jax.scenarios.osworld.actions import DONE, FAIL, WAIT, parse_computer_use
from tests.scenarios.osworld.conftest import open_terminal


def call(**arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": "computer_use", "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.parametrize("arguments, command", [
    ({"action": "left_click", "coordinate": [499, 499]}, "pyautogui.click(959, 539)"),
    ({"action": "right_click", "coordinate": [0, 999]}, "pyautogui.rightClick(0, 1079)"),
    ({"action": "middle_click", "coordinate": [10, 20]}, "pyautogui.middleClick(19, 21)"),
    ({"action": "double_click", "coordinate": ["100", "200"]}, "pyautogui.doubleClick(192, 216)"),
    ({"action": "mouse_move", "coordinate": [999, 0]}, "pyautogui.moveTo(1919, 0)"),
    ({"action": "left_click"}, "pyautogui.click()"),
    ({"action": "left_click_drag", "coordinate": [500, 500]}, "pyautogui.dragTo(960, 540, duration=0.50)"),
    ({"action": "type", "text": "it's a \\ test\n"}, "pyautogui.typewrite(\"it's a \\\\ test\\n\")"),
    ({"action": "key", "keys": ["ctrl", "alt", "t"]}, "pyautogui.hotkey('ctrl', 'alt', 't')"),
    ({"action": "key", "keys": "Return"}, "pyautogui.press('Return')"),
    ({"action": "scroll", "pixels": -5}, "pyautogui.scroll(-5)"),
    ({"action": "scroll", "pixels": 3, "coordinate": [499, 499]}, "pyautogui.scroll(3, x=959, y=539)"),
    ({"action": "wait", "time": 2}, WAIT),
    ({"action": "terminate", "status": "success"}, DONE),
    ({"action": "terminate", "status": "failure"}, FAIL),
])
def test_each_action_maps_like_the_reference(arguments, command):
    parsed = parse_computer_use(f"Action: do it\n{call(**arguments)}")
    assert parsed.ok and parsed.commands == (command,) and parsed.summary == "do it"


def test_coordinates_scale_to_the_screen_and_are_clamped():
    assert parse_computer_use(call(action="left_click", coordinate=[999, 999]), 1280, 720).commands == \
        ("pyautogui.click(1279, 719)",)
    assert parse_computer_use(call(action="left_click", coordinate=[5000, -30])).commands == \
        ("pyautogui.click(1919, 0)",)
    assert parse_computer_use(call(action="scroll", pixels=10 ** 9)).commands == ("pyautogui.scroll(100)",)


def test_several_calls_run_in_order_up_to_terminate():
    text = (call(action="key", keys=["ctrl", "l"]) + "\n" + call(action="type", text="x")
            + call(action="terminate", status="success") + call(action="left_click", coordinate=[1, 1]))
    parsed = parse_computer_use(text)
    assert parsed.commands == ("pyautogui.hotkey('ctrl', 'l')", "pyautogui.typewrite('x')", DONE)
    assert parsed.text == "pyautogui.hotkey('ctrl', 'l')\npyautogui.typewrite('x')\nDONE"
    bare = parse_computer_use('{"name": "computer_use", "arguments": {"action": "wait"}}')
    assert bare.ok and bare.commands == (WAIT,)
    unclosed = parse_computer_use('<tool_call>{"name": "computer_use", "arguments": {"action": "wait"}}')
    assert unclosed.commands == (WAIT,)


@pytest.mark.parametrize("response, status", [
    ("I will click the button.", "no_tool_call"),
    ("<tool_call>{not json</tool_call>", "bad_json"),
    ('<tool_call>{"name": "browser", "arguments": {}}</tool_call>', "not_computer_use"),
    (call(action="fly"), "unknown_action"),
    (call(action=["left_click"]), "unknown_action"),
    (call(action="left_click", coordinate=[1]), "bad_coordinate"),
    (call(action="left_click", coordinate=["nan", 3]), "bad_coordinate"),
    (call(action="left_click", coordinate=[1e400, 3]).replace("Infinity", "1e400"), "bad_coordinate"),
    (call(action="key", keys=[]), "bad_keys"),
    (call(action="type", text={"a": 1}), "bad_text"),
    (call(action="type", text="x" * 5000), "bad_text"),
    ("".join(call(action="wait") for _ in range(9)), "too_many_calls"),
    (None, "no_tool_call"),
    ("<tool_call>" + "[" * 100000 + "</tool_call>", "bad_json"),
])
def test_fallbacks_return_a_status_and_never_raise(response, status):
    parsed = parse_computer_use(response)
    assert parsed.status == status and not parsed.ok


def test_code_injection_in_text_or_keys_stays_a_literal():
    hostile = "'); import os; os.system('touch /tmp/pwned'); ('"
    for parsed in (parse_computer_use(call(action="type", text=hostile)),
                   parse_computer_use(call(action="key", keys=[hostile[:30]]))):
        (command,) = parsed.commands
        compiled = compile(command, "<action>", "eval")   # one expression: a single call of literals
        assert compiled.co_names[:1] == ("pyautogui",) and "os" not in compiled.co_names


def test_parsed_actions_drive_a_real_desktop(desktop):
    client = desktop.client
    open_terminal(client)
    typed = parse_computer_use(call(action="type", text="echo \"it's\" > ~/Desktop/quoted.txt\n"))
    assert client.execute_pyautogui(typed.commands[0] + "; time.sleep(0.5)")["returncode"] == 0
    assert client.get_file("~/Desktop/quoted.txt") == b"it's\n"
    click = parse_computer_use(call(action="left_click", coordinate=[250, 750]))
    assert client.execute_pyautogui(click.commands[0] + "; print(pyautogui.position())")["output"] == "(480, 810)\n"
