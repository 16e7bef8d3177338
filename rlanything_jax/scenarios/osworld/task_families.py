"""The project's own desktop tasks, in OSWorld's JSON format: file and directory work, text editing,
archives, permissions, small scripts and desktop settings (gsettings) in the local session's terminal,
plus infeasible requests.

A family builds one task from a seed and knobs (`n`: how many files, lines or directories, and
`hint`: none, the program to use, or the whole command; the difficulty knobs that harder/easier
rewrites move). Every task carries its scripted expert in
`rla_expert`: the `computer_use` arguments an agent would write (type a command into the terminal
that setup opened, then terminate), played through the real protocol; and its family and knobs in
`rla_knobs`. OSWorld's loader ignores both fields, so the files stay valid OSWorld tasks.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from typing import Any

WORDS = ("report", "notes", "budget", "photos", "drafts", "archive", "music", "recipes", "invoices", "letters",
         "travel", "garden", "projects", "slides", "poems", "backup", "scans", "tickets", "lessons", "maps")
FRUITS = ("apple", "banana", "cherry", "damson", "elderberry", "fig", "grape", "kiwi", "lemon", "mango", "nectarine",
          "orange", "papaya", "quince", "raspberry")
MODES = ("600", "640", "644", "700", "750", "755")
MAX_N = 8


def _setup(script: str) -> dict[str, Any]:
    return {"type": "execute", "parameters": {"command": script, "shell": True}}


def _check(command: str, expected: str) -> dict[str, Any]:
    return {"func": "exact_match", "result": {"type": "vm_command_line", "command": command, "shell": True},
            "expected": {"type": "rule", "rules": {"expected": expected}}}


# As OSWorld's os tasks do, setup opens the terminal (Ctrl+Alt+T) and focuses it; here it also waits
# until the window exists, so that a loaded machine cannot make the first keystrokes miss it.
OPEN_TERMINAL = [
    {"type": "execute",
     "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')"]}},
    {"type": "execute", "parameters": {"command": "wmctrl -l", "shell": True, "until": {"stdout": "Terminal"}}},
    {"type": "activate_window", "parameters": {"window_name": "Terminal", "strict": True}},
]


def terminal_expert(command: str) -> list[dict[str, Any]]:
    return [{"action": "type", "text": command + "\n"}, {"action": "terminate", "status": "success"}]


def _files_script(directory: str, names: list[str], content: Callable[[str], str] = lambda name: name) -> str:
    lines = [f"mkdir -p {directory}"]
    lines += [f"printf '%s\\n' {shlex.quote(content(name))} > {directory}/{name}" for name in names]
    return " && ".join(lines)


# --- families: (rng, n) -> (instruction, config, evaluator, expert command) ----------------------


def rename_dir(rng: random.Random, n: int):
    old, new = rng.sample(WORDS, 2)
    return (f"Rename the folder '{old}' on the Desktop to '{new}'.", [_setup(f"mkdir ~/Desktop/{old}")],
            _check(f"[ -d ~/Desktop/{new} ] && [ ! -e ~/Desktop/{old} ] && echo ok", "ok\n"),
            f"mv ~/Desktop/{old} ~/Desktop/{new}")


def make_dirs(rng: random.Random, n: int):
    parent, names = rng.choice(WORDS), sorted(rng.sample(FRUITS, n))
    listed = ", ".join(f"'{name}'" for name in names)
    command = " ".join(f"~/Documents/{parent}/{name}" for name in names)
    return (f"Inside ~/Documents, create a folder '{parent}' that contains the folders {listed}.", [],
            _check(f"cd ~/Documents/{parent} && find . -mindepth 1 -type d | sort", "".join(f"./{x}\n" for x in names)),
            f"mkdir -p {command}")


def write_file(rng: random.Random, n: int):
    name, words = rng.choice(WORDS), rng.sample(FRUITS, n)
    line = " ".join(words)
    return (f"Create the text file ~/Documents/{name}.txt containing exactly one line: {line}", [],
            _check(f"cat ~/Documents/{name}.txt", line + "\n"), f"echo '{line}' > ~/Documents/{name}.txt")


def copy_by_extension(rng: random.Random, n: int):
    source, target = rng.sample(WORDS, 2)
    pictures = [f"{w}.jpg" for w in rng.sample(FRUITS, n)]
    others = [f"{w}.txt" for w in rng.sample(WORDS, 2)]
    return (f"Copy every .jpg file from ~/Pictures/{source} into the folder ~/Pictures/{target} (create it).",
            [_setup(_files_script(f"~/Pictures/{source}", pictures + others))],
            {"func": "check_moved_jpgs", "result": {"type": "list_directory", "path": f"~/Pictures/{target}"},
             "expected": {"type": "rule", "rules": {"expected": sorted(pictures)}}},
            f"mkdir -p ~/Pictures/{target} && cp ~/Pictures/{source}/*.jpg ~/Pictures/{target}/")


def delete_by_extension(rng: random.Random, n: int):
    folder = rng.choice(WORDS)
    temporary = [f"{w}.tmp" for w in rng.sample(FRUITS, n)]
    keep = [f"{w}.txt" for w in rng.sample(WORDS, 2)]
    return (f"Delete all .tmp files in ~/Downloads/{folder}, and keep every other file there.",
            [_setup(_files_script(f"~/Downloads/{folder}", temporary + keep))],
            {"func": "check_include_exclude", "result": {"type": "vm_command_line", "shell": True,
                                                         "command": f"ls -A ~/Downloads/{folder}"},
             "expected": {"type": "rule", "rules": {"include": keep, "exclude": [".tmp"]}}},
            f"rm ~/Downloads/{folder}/*.tmp")


def change_mode(rng: random.Random, n: int):
    name, mode = rng.choice(WORDS), rng.choice(MODES)
    return (f"Set the permissions of ~/Documents/{name}.txt to {mode} (octal).",
            [_setup(f"echo data > ~/Documents/{name}.txt && chmod 666 ~/Documents/{name}.txt")],
            _check(f"stat -c %a ~/Documents/{name}.txt", mode + "\n"), f"chmod {mode} ~/Documents/{name}.txt")


def make_archive(rng: random.Random, n: int):
    folder, files = rng.choice(WORDS), sorted(f"{w}.txt" for w in rng.sample(FRUITS, n))
    listing = "".join(f"{folder}/{name}\n" for name in files)
    return (f"Pack the folder ~/Documents/{folder} into the gzip-compressed tar archive ~/Documents/{folder}.tar.gz, "
            f"with the paths inside starting at '{folder}/'.",
            [_setup(_files_script(f"~/Documents/{folder}", files))],
            _check(f"tar tzf ~/Documents/{folder}.tar.gz | grep -v '/$' | sort", listing),
            f"cd ~/Documents && tar czf {folder}.tar.gz {folder}")


def extract_archive(rng: random.Random, n: int):
    folder, files = rng.choice(WORDS), sorted(f"{w}.txt" for w in rng.sample(FRUITS, n))
    setup = (_files_script(f"/tmp/pack/{folder}", files) + f" && tar czf ~/Downloads/{folder}.tar.gz -C /tmp/pack "
             f"{folder} && rm -r /tmp/pack")
    return (f"Extract the archive ~/Downloads/{folder}.tar.gz into the folder ~/Desktop/unpacked (create it).",
            [_setup(setup)], _check(f"ls ~/Desktop/unpacked/{folder}", "".join(f"{x}\n" for x in files)),
            f"mkdir -p ~/Desktop/unpacked && tar xzf ~/Downloads/{folder}.tar.gz -C ~/Desktop/unpacked")


def count_lines(rng: random.Random, n: int):
    name, count = rng.choice(WORDS), rng.randint(2, 4) * n + rng.randint(0, 3)
    lines = [rng.choice(FRUITS) for _ in range(count)]
    return (f"Count the lines of ~/Documents/{name}.txt and write just that number into ~/Documents/count.txt.",
            [_setup(f"printf '%s\\n' {' '.join(lines)} > ~/Documents/{name}.txt")],
            _check("tr -d ' \\n' < ~/Documents/count.txt", str(count)),
            f"wc -l < ~/Documents/{name}.txt > ~/Documents/count.txt")


def append_line(rng: random.Random, n: int):
    name, existing, new = rng.choice(WORDS), rng.sample(FRUITS, n), rng.choice(WORDS)
    return (f"Add the line '{new}' at the end of ~/Documents/{name}.txt, keeping its other lines.",
            [_setup(f"printf '%s\\n' {' '.join(existing)} > ~/Documents/{name}.txt")],
            _check(f"cat ~/Documents/{name}.txt", "".join(f"{x}\n" for x in [*existing, new])),
            f"echo {new} >> ~/Documents/{name}.txt")


def replace_word(rng: random.Random, n: int):
    name, (old, new) = rng.choice(WORDS), rng.sample(FRUITS, 2)
    others = rng.sample([w for w in FRUITS if w not in (old, new)], n)
    lines = [f"{old} {word}" for word in others]
    return (f"In ~/Documents/{name}.txt, replace every occurrence of the word '{old}' with '{new}'.",
            [_setup("printf '%s\\n' " + " ".join(shlex.quote(x) for x in lines) + f" > ~/Documents/{name}.txt")],
            _check(f"cat ~/Documents/{name}.txt", "".join(f"{new} {word}\n" for word in others)),
            f"sed -i 's/{old}/{new}/g' ~/Documents/{name}.txt")


def sort_lines(rng: random.Random, n: int):
    source, target = rng.sample(WORDS, 2)
    names = rng.sample(FRUITS, n + 1)
    return (f"Write the lines of ~/Documents/{source}.txt in alphabetical order into ~/Documents/{target}.txt.",
            [_setup(f"printf '%s\\n' {' '.join(names)} > ~/Documents/{source}.txt")],
            _check(f"cat ~/Documents/{target}.txt", "".join(f"{x}\n" for x in sorted(names))),
            f"sort ~/Documents/{source}.txt > ~/Documents/{target}.txt")


def make_symlink(rng: random.Random, n: int):
    name = rng.choice(WORDS)
    return (f"Create a symbolic link ~/Desktop/{name}-link pointing to /home/user/Documents/{name}.txt.",
            [_setup(f"echo data > ~/Documents/{name}.txt")],
            _check(f"readlink ~/Desktop/{name}-link", f"/home/user/Documents/{name}.txt\n"),
            f"ln -s /home/user/Documents/{name}.txt ~/Desktop/{name}-link")


def move_by_prefix(rng: random.Random, n: int):
    prefix, folder = rng.sample(WORDS, 2)
    matching = sorted(f"{prefix}_{w}.txt" for w in rng.sample(FRUITS, n))
    return (f"Move every file in ~/Documents whose name starts with '{prefix}_' into the folder ~/Documents/{folder} "
            "(create it).", [_setup(_files_script("~/Documents", [*matching, "keep_me.txt"]))],
            _check(f"ls ~/Documents/{folder}; ls ~/Documents | grep -c '^{prefix}_'",
                   "".join(f"{x}\n" for x in matching) + "0\n"),
            f"mkdir -p ~/Documents/{folder} && mv ~/Documents/{prefix}_* ~/Documents/{folder}/")


def largest_file(rng: random.Random, n: int):
    names = [f"{w}.dat" for w in rng.sample(FRUITS, n + 1)]
    sizes = rng.sample(range(100, 5000), len(names))
    biggest = names[sizes.index(max(sizes))]
    folder = rng.choice(WORDS)
    setup = f"mkdir -p ~/Downloads/{folder} && " + " && ".join(
        f"head -c {size} /dev/zero > ~/Downloads/{folder}/{name}" for name, size in zip(names, sizes))
    return (f"Find the largest file in ~/Downloads/{folder} and write its file name (only the name) into "
            "~/Desktop/largest.txt.", [_setup(setup)], _check("cat ~/Desktop/largest.txt", biggest + "\n"),
            f"ls -S ~/Downloads/{folder} | head -n 1 > ~/Desktop/largest.txt")


def hello_script(rng: random.Random, n: int):
    name, message = rng.choice(WORDS), " ".join(rng.sample(FRUITS, n))
    return (f"Create an executable shell script ~/{name}.sh that prints '{message}' when run.", [],
            _check(f"test -x ~/{name}.sh && ~/{name}.sh", message + "\n"),
            f"printf '#!/bin/sh\\necho {message}\\n' > ~/{name}.sh && chmod +x ~/{name}.sh")


# (what a person asks for, schema, key, value to set, what `gsettings get` prints then)
SETTINGS = (
    ("the screen never blanks when idle", "org.gnome.desktop.session", "idle-delay", "0", "uint32 0"),
    ("the screen blanks after 10 idle minutes", "org.gnome.desktop.session", "idle-delay", "600", "uint32 600"),
    ("the screen does not lock", "org.gnome.desktop.screensaver", "lock-enabled", "false", "false"),
    ("notification banners are not shown", "org.gnome.desktop.notifications", "show-banners", "false", "false"),
    ("text is shown 1.25 times larger", "org.gnome.desktop.interface", "text-scaling-factor", "1.25", "1.25"),
    ("the clock uses the 12-hour format", "org.gnome.desktop.interface", "clock-format", "'12h'", "'12h'"),
    ("applications prefer a dark style", "org.gnome.desktop.interface", "color-scheme", "'prefer-dark'",
     "'prefer-dark'"),
    ("the mouse pointer is 48 pixels large", "org.gnome.desktop.interface", "cursor-size", "48", "48"),
    ("the mouse scrolls naturally", "org.gnome.desktop.peripherals.mouse", "natural-scroll", "true", "true"),
)


def change_settings(rng: random.Random, n: int):
    """n desktop settings (gsettings in dconf, as on OSWorld's VM) at once: a list evaluator, conj 'and'."""
    chosen, keys = [], set()
    for setting in rng.sample(SETTINGS, len(SETTINGS)):
        if setting[2] not in keys and len(chosen) < min(n, 6):
            chosen.append(setting)
            keys.add(setting[2])
    wishes = "; ".join(f"{want} ({schema} {key})" for want, schema, key, _, _ in chosen)
    checks = [_check(f"gsettings get {schema} {key}", shown + "\n") for _, schema, key, _, shown in chosen]
    evaluator = {"func": [c["func"] for c in checks], "conj": "and", "result": [c["result"] for c in checks],
                 "expected": [c["expected"] for c in checks]}
    command = " && ".join(f"gsettings set {schema} {key} {shlex.quote(value)}" for _, schema, key, value, _ in chosen)
    return f"Change the desktop settings so that {wishes}.", [], evaluator, command


FAMILIES: dict[str, Callable[[random.Random, int], tuple]] = {
    "rename-dir": rename_dir, "make-dirs": make_dirs, "write-file": write_file, "copy-by-extension": copy_by_extension,
    "delete-by-extension": delete_by_extension, "change-mode": change_mode, "make-archive": make_archive,
    "extract-archive": extract_archive, "count-lines": count_lines, "append-line": append_line,
    "replace-word": replace_word, "sort-lines": sort_lines, "make-symlink": make_symlink,
    "move-by-prefix": move_by_prefix, "largest-file": largest_file, "hello-script": hello_script,
    "change-settings": change_settings,
}
INFEASIBLE = (
    "Turn on Bluetooth and pair this computer with my headphones.",
    "Install Python 4 on this computer.",
    "Show the battery percentage in the top bar.",
    "Print the file ~/Documents/report.txt on the office printer.",
    "Connect this computer to the Wi-Fi network 'CoffeeShop'.",
    "Switch to the user account 'admin' without logging out.",
)


HINTS = 2   # 1: which program to use; 2: the whole command (infeasible requests: 1, that it cannot be done)


def hint_text(family: str, command: str, hint: int) -> str:
    """What an easier rewrite adds to the instruction (the reference's environment model adds hints too)."""
    if hint <= 0:
        return ""
    if family == "infeasible":
        return " (Hint: this computer cannot do that; report that the task cannot be done.)"
    if hint == 1:
        return f" (Hint: one shell command in the open terminal does it, starting with `{command.split()[0]}`.)"
    return f" (Hint: type this command into the open terminal, then finish: {command})"


def build_task(family: str, seed: int, n: int = 2, hint: int = 0) -> dict[str, Any]:
    """One task of `family` (or "infeasible"); `n` is clamped into 1..MAX_N, `hint` into 0..HINTS."""
    n = min(max(int(n), 1), MAX_N)
    hint = min(max(int(hint), 0), 1 if family == "infeasible" else HINTS)
    if family == "infeasible":
        instruction = INFEASIBLE[seed % len(INFEASIBLE)] + hint_text(family, "", hint)
        config, evaluator = [], {"func": "infeasible"}
        expert = [{"action": "terminate", "status": "failure"}]
        task_id, knobs = f"rla-infeasible-{seed}", {"family": family, "seed": seed}
    else:
        instruction, config, evaluator, command = FAMILIES[family](random.Random(f"{family}:{seed}:{n}"), n)
        instruction += hint_text(family, command, hint)
        config = [*config, *OPEN_TERMINAL]
        expert = terminal_expert(command)
        task_id, knobs = f"rla-{family}-s{seed}-n{n}", {"family": family, "seed": seed, "n": n}
    if hint:
        task_id, knobs = f"{task_id}-h{hint}", {**knobs, "hint": hint}
    return {"id": task_id, "snapshot": "rla-local", "instruction": instruction, "source": "rlanything_jax",
            "config": config, "related_apps": ["os", "terminal"], "evaluator": evaluator,
            "rla_expert": expert, "rla_knobs": knobs}


def rewrite(task: dict[str, Any], direction: int) -> dict[str, Any] | None:
    """The same family and seed one step harder (+1) or easier (-1): easier lowers `n`, then adds hints;
    harder takes hints away, then raises `n`. None when there is no knob left to move that way."""
    knobs = task.get("rla_knobs") or {}
    family = knobs.get("family")
    if family not in FAMILIES and family != "infeasible":
        return None
    seed, hint = int(knobs.get("seed", 0)), int(knobs.get("hint", 0))
    n = int(knobs.get("n", 1))
    most_hints = 1 if family == "infeasible" else HINTS
    if direction > 0:
        if hint > 0:
            return build_task(family, seed, n, hint - 1)
        return build_task(family, seed, n + 1) if family != "infeasible" and n < MAX_N else None
    if family != "infeasible" and n > 1:
        return build_task(family, seed, n - 1, hint)
    return build_task(family, seed, n, hint + 1) if hint < most_hints else None
