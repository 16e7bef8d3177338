"""Latency of local desktop sessions (rlanything_jax/scenarios/osworld/local_desktop.py): session start and
reset, and one of each protocol call an episode makes (timing belongs here, not in tests).

    .venv/bin/python bench/desktop_latency.py [--rounds 5] [--sessions 1]

With --sessions N, N sessions run side by side and every figure is over all of them.
Prints one JSON line of medians in seconds:
  start_s          a session from nothing to its first screenshot (namespaces, Xvfb, dbus, openbox, server)
  reset_s          kill and start again (the VM's snapshot revert)
  screenshot_s     GET /screenshot (1920x1080 PNG)
  action_s         one pyautogui click through POST /execute (`python -c "import pyautogui; ..."`)
  type_s           Ctrl+Alt+T, then typing a command into the new terminal (includes a 0.8 s wait)
  file_s           POST /file of a small file
  command_s        POST /execute of `true`
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from rlanything_jax.scenarios.osworld.local_desktop import LocalDesktop


def _timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=1)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {name: [] for name in
                                       ("start_s", "reset_s", "screenshot_s", "action_s", "type_s", "file_s",
                                        "command_s")}
    desktops = []
    try:
        for _ in range(args.sessions):
            desktops.append(LocalDesktop())
            figures["start_s"].append(desktops[-1].start_seconds)
        for _ in range(args.rounds):
            for desktop in desktops:
                client = desktop.client
                figures["screenshot_s"].append(_timed(client.screenshot))
                figures["action_s"].append(_timed(lambda c=client: c.execute_pyautogui("pyautogui.click(100, 100)")))
                figures["type_s"].append(_timed(lambda c=client: c.execute_pyautogui(
                    "pyautogui.hotkey('ctrl', 'alt', 't'); time.sleep(0.8); "
                    "pyautogui.typewrite('echo bench > ~/Desktop/bench.txt\\n')")))
                figures["file_s"].append(_timed(lambda c=client: c.get_file("~/Desktop/bench.txt")))
                figures["command_s"].append(_timed(lambda c=client: c.execute(["true"])))
                figures["reset_s"].append(desktop.reset())
    finally:
        for desktop in desktops:
            desktop.close()
    print(json.dumps({"sessions": args.sessions, "rounds": args.rounds,
                      **{name: round(statistics.median(values), 3) for name, values in figures.items()}}))


if __name__ == "__main__":
    main()
