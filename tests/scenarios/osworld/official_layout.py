"""A small directory laid out as OSWorld's `evaluation_examples` (the copy Open-AgentRL ships): task lists
`{domain: [id, ...]}` beside `examples/<domain>/<id>.json` and RLAnything's `new_examples/` variants of the
same ids. The tasks follow the official files' shapes (os e0df059f's rename check, a vlc config check, an
infeasible request, an impress task whose gold file comes from `cloud_file`)."""

import copy
import json
from pathlib import Path

RENAME_ID = "e0df059f-28a6-4169-924f-b9623e7184cc"
INFEASIBLE_ID = "4783cc41-c03c-4e1b-89b4-50658f642bd5"
VLC_ID = "8ba5ae7a-5ae5-4eab-9fcc-5dd4fe3abf89"
CHROME_ID = "2ad9387a-65d8-4e33-ad5b-7580065a27ca"
MISSING_ID = "00000000-0000-0000-0000-000000000000"

RENAME = {
    "id": RENAME_ID, "snapshot": "os",
    "instruction": ('I have a directory named "todo_list_Jan_1". Can you help me change its name into '
                    '"todo_list_Jan_2"?'),
    "config": [{"type": "execute", "parameters": {
        "command": "echo {CLIENT_PASSWORD} | sudo -S mkdir ~/Desktop/todo_list_Jan_1", "shell": True}}],
    "related_apps": ["os"],
    "evaluator": {"func": "exact_match", "result": {
        "type": "vm_command_line", "shell": True,
        "command": "[ -d ~/Desktop/todo_list_Jan_2 ] && echo 'Directory exists.' || echo 'Directory does not exist.'"},
        "expected": {"type": "rule", "rules": {"expected": "Directory exists.\n"}}}}
INFEASIBLE = {"id": INFEASIBLE_ID, "snapshot": "os", "instruction": "Switch my computer to Python 4.",
              "config": [], "related_apps": ["os"], "evaluator": {"func": "infeasible"}}
VLC = {"id": VLC_ID, "snapshot": "vlc", "instruction": "Turn off the VLC update notification.",
       "config": [{"type": "launch", "parameters": {"command": "vlc"}}], "related_apps": ["vlc"],
       "evaluator": {"func": "check_qt_bgcone", "result": {"type": "vlc_config", "dest": "vlcrc"},
                     "expected": {"type": "rule", "rules": {"expected_qt_bgcone": 0}}}}
CHROME = {"id": CHROME_ID, "snapshot": "chrome", "instruction": "Bookmark this page.",
          "config": [{"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
                     {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.example.com"]}},
                     {"type": "login", "parameters": {"settings_file": "settings/google/settings.json",
                                                      "platform": "googledrive"}}],
          "related_apps": ["chrome"],
          "evaluator": {"func": "is_expected_bookmarks", "result": {"type": "bookmarks"},
                        "expected": {"type": "rule", "rules": {"type": "bookmark_bar_websites_urls",
                                                               "urls": ["https://www.example.com/"]}}}}

TRAIN_LIST = {"os": [RENAME_ID, INFEASIBLE_ID], "vlc": [VLC_ID], "chrome": [CHROME_ID]}
TEST_LIST = {"os": [RENAME_ID, MISSING_ID], "vlc": [VLC_ID]}


def variant_of(task: dict, instructions: dict[str, str]) -> dict:
    """RLAnything's co-evolved copy: `evaluator_list` keys with their instructions, the first one current."""
    out = copy.deepcopy(task)
    keys = list(instructions)
    out["task_template"] = dict(instructions)
    out["current_task"] = {keys[0]: instructions[keys[0]]}
    out["evaluator_list"] = {key: copy.deepcopy(task["evaluator"]) for key in keys}
    return out


def write_official_layout(root: Path) -> Path:
    for task, domain in ((RENAME, "os"), (INFEASIBLE, "os"), (VLC, "vlc"), (CHROME, "chrome")):
        for folder, data in (("examples", task),
                             ("new_examples", variant_of(task, {"evaluator1": task["instruction"] + " Please."}))):
            path = root / folder / domain / f"{task['id']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data), encoding="utf-8")
    (root / "train_nochrome.json").write_text(json.dumps(TRAIN_LIST), encoding="utf-8")
    (root / "test_all.json").write_text(json.dumps(TEST_LIST), encoding="utf-8")
    return root
