"""A pyautogui-compatible module on top of xdotool, installed as `pyautogui` inside local sessions.

OSWorld actions are Python snippets that call pyautogui (`pyautogui.click(960, 540)`,
`pyautogui.hotkey('ctrl', 'alt', 't')`, `pyautogui.typewrite('ls\\n')`). PyPI's pyautogui is not a
Debian package, and the session runs Debian's python3 only, so the session carries this module:
the same names and arguments for everything OSWorld agents emit, each call one xdotool run.
Self-contained (it is copied into the session): standard library only.
"""

import os
import subprocess
import time

FAILSAFE = False
PAUSE = 0.0           # pyautogui's pause after each call; agents' snippets sleep themselves
MINIMUM_DURATION = 0.1
_BUTTONS = {"left": "1", "middle": "2", "right": "3", "primary": "1", "secondary": "3", 1: "1", 2: "2", 3: "3"}

# pyautogui key names -> X keysyms (letters, digits and names X already knows pass through)
_KEYS = {
    "enter": "Return", "return": "Return", "\n": "Return", "\r": "Return", "esc": "Escape", "escape": "Escape",
    "tab": "Tab", "\t": "Tab", "backspace": "BackSpace", "delete": "Delete", "del": "Delete", "space": "space",
    "ctrl": "Control_L", "ctrlleft": "Control_L", "ctrlright": "Control_R", "control": "Control_L",
    "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R", "option": "Alt_L",
    "shift": "Shift_L", "shiftleft": "Shift_L", "shiftright": "Shift_R",
    "win": "Super_L", "winleft": "Super_L", "winright": "Super_R", "super": "Super_L", "command": "Super_L",
    "cmd": "Super_L", "meta": "Super_L", "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "home": "Home", "end": "End", "pageup": "Prior", "pgup": "Prior", "pagedown": "Next", "pgdn": "Next",
    "insert": "Insert", "capslock": "Caps_Lock", "numlock": "Num_Lock", "printscreen": "Print",
    "prtsc": "Print", "pause": "Pause", "menu": "Menu", "apps": "Menu",
    "volumeup": "XF86AudioRaiseVolume", "volumedown": "XF86AudioLowerVolume", "volumemute": "XF86AudioMute",
    " ": "space", "-": "minus", "+": "plus", "=": "equal", "/": "slash", "\\": "backslash", ".": "period",
    ",": "comma", ";": "semicolon", ":": "colon", "'": "apostrophe", '"': "quotedbl", "`": "grave",
    "[": "bracketleft", "]": "bracketright", "{": "braceleft", "}": "braceright", "(": "parenleft",
    ")": "parenright", "<": "less", ">": "greater", "!": "exclam", "@": "at", "#": "numbersign",
    "$": "dollar", "%": "percent", "^": "asciicircum", "&": "ampersand", "*": "asterisk", "_": "underscore",
    "|": "bar", "?": "question", "~": "asciitilde",
}
KEYBOARD_KEYS = sorted(_KEYS)


class FailSafeException(Exception):
    pass


def _xdotool(*args):
    subprocess.run(["xdotool", *[str(a) for a in args]], check=True, timeout=60)
    if PAUSE:
        time.sleep(PAUSE)


def _keysym(key):
    key = str(key)
    if key in _KEYS:
        return _KEYS[key]
    lowered = key.lower()
    if lowered in _KEYS:
        return _KEYS[lowered]
    if len(lowered) in (2, 3) and lowered[0] == "f" and lowered[1:].isdigit():
        return "F" + lowered[1:]
    return key


def _position_args(x, y):
    if x is None and y is None:
        return []
    if isinstance(x, (tuple, list)):
        x, y = x[0], x[1]
    current_x, current_y = position() if x is None or y is None else (x, y)
    # no --sync: xdotool then waits (about 15 s) when the pointer is already there
    return ["mousemove", int(round(x if x is not None else current_x)),
            int(round(y if y is not None else current_y))]


def size():
    out = subprocess.run(["xdotool", "getdisplaygeometry"], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def position():
    out = subprocess.run(["xdotool", "getmouselocation", "--shell"], capture_output=True, text=True,
                         check=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return int(values["X"]), int(values["Y"])


def onScreen(x, y=None):  # noqa: N802 (pyautogui's names)
    if isinstance(x, (tuple, list)):
        x, y = x
    width, height = size()
    return 0 <= x < width and 0 <= y < height


def moveTo(x=None, y=None, duration=0.0, *args, **kwargs):  # noqa: N802
    args = _position_args(x, y)
    if args:
        _xdotool(*args)


def moveRel(xOffset=0, yOffset=0, duration=0.0, *args, **kwargs):  # noqa: N802, N803
    if isinstance(xOffset, (tuple, list)):
        xOffset, yOffset = xOffset
    _xdotool("mousemove_relative", "--", int(xOffset or 0), int(yOffset or 0))


move = moveRel


def click(x=None, y=None, clicks=1, interval=0.0, button="left", duration=0.0, *args, **kwargs):
    delay_ms = int(max(0.0, float(interval)) * 1000)
    _xdotool(*_position_args(x, y), "click", "--repeat", max(1, int(clicks)), "--delay", delay_ms,
             _BUTTONS.get(button, "1"))


def leftClick(x=None, y=None, interval=0.0, duration=0.0, *args, **kwargs):  # noqa: N802
    click(x, y, 1, interval, "left")


def rightClick(x=None, y=None, interval=0.0, duration=0.0, *args, **kwargs):  # noqa: N802
    click(x, y, 1, interval, "right")


def middleClick(x=None, y=None, interval=0.0, duration=0.0, *args, **kwargs):  # noqa: N802
    click(x, y, 1, interval, "middle")


def doubleClick(x=None, y=None, interval=0.0, button="left", duration=0.0, *args, **kwargs):  # noqa: N802
    click(x, y, 2, interval or 0.05, button)


def tripleClick(x=None, y=None, interval=0.0, button="left", duration=0.0, *args, **kwargs):  # noqa: N802
    click(x, y, 3, interval or 0.05, button)


def mouseDown(x=None, y=None, button="left", *args, **kwargs):  # noqa: N802
    _xdotool(*_position_args(x, y), "mousedown", _BUTTONS.get(button, "1"))


def mouseUp(x=None, y=None, button="left", *args, **kwargs):  # noqa: N802
    _xdotool(*_position_args(x, y), "mouseup", _BUTTONS.get(button, "1"))


def dragTo(x=None, y=None, duration=0.0, button="left", *args, **kwargs):  # noqa: N802
    mouseDown(button=button)
    time.sleep(max(0.05, float(duration or 0.0)))
    _xdotool(*_position_args(x, y), "sleep", "0.05", "mouseup", _BUTTONS.get(button, "1"))


def dragRel(xOffset=0, yOffset=0, duration=0.0, button="left", *args, **kwargs):  # noqa: N802, N803
    current_x, current_y = position()
    dragTo(current_x + int(xOffset or 0), current_y + int(yOffset or 0), duration, button)


drag = dragRel


def scroll(clicks, x=None, y=None, *args, **kwargs):
    clicks = int(clicks)
    if clicks:   # positive scrolls up (X button 4), negative down (5)
        _xdotool(*_position_args(x, y), "click", "--repeat", abs(clicks), "--delay", 20, "4" if clicks > 0 else "5")


vscroll = scroll


def hscroll(clicks, x=None, y=None, *args, **kwargs):
    clicks = int(clicks)
    if clicks:   # positive scrolls right (X button 7), negative left (6)
        _xdotool(*_position_args(x, y), "click", "--repeat", abs(clicks), "--delay", 20, "7" if clicks > 0 else "6")


def typewrite(message, interval=0.0, *args, **kwargs):
    if isinstance(message, (list, tuple)):   # a list of key names, pressed in turn
        for key in message:
            press(key)
            time.sleep(float(interval))
        return
    delay_ms = max(1, int(float(interval) * 1000)) if interval else 12
    _xdotool("type", "--delay", delay_ms, "--", str(message))


write = typewrite


def press(keys, presses=1, interval=0.0, *args, **kwargs):
    keys = keys if isinstance(keys, (list, tuple)) else [keys]
    delay_ms = int(max(0.0, float(interval)) * 1000)
    for _ in range(max(1, int(presses))):
        _xdotool("key", "--delay", delay_ms, *[_keysym(k) for k in keys])


def hotkey(*keys, **kwargs):
    if len(keys) == 1 and isinstance(keys[0], (list, tuple)):
        keys = tuple(keys[0])
    _xdotool("key", "--clearmodifiers", "+".join(_keysym(k) for k in keys))


def keyDown(key, *args, **kwargs):  # noqa: N802
    _xdotool("keydown", _keysym(key))


def keyUp(key, *args, **kwargs):  # noqa: N802
    _xdotool("keyup", _keysym(key))


def sleep(seconds):
    time.sleep(seconds)


def screenshot(imageFilename=None, region=None):  # noqa: N803
    """A PIL image of the screen (Pillow's X grab), saved too when a file name is given."""
    from PIL import ImageGrab
    image = ImageGrab.grab(xdisplay=os.environ.get("DISPLAY", ":0"))
    if region is not None:
        left, top, width, height = region
        image = image.crop((left, top, left + width, top + height))
    if imageFilename:
        image.save(imageFilename)
    return image
