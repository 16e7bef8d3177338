"""OSWorld desktop tasks (OSWORLD.md): the environment half.

- `endpoint`, `client`: `OsWorldClient` for OSWorld's VM server protocol, usable against real
  OSWorld VMs of any provider (`host:server_port[:chromium:vnc:vlc]`) and local sessions.
- `desktop_server`: the project's own server for the protocol subset, run inside a local session.
- `local_desktop`: one isolated local desktop session per environment slot (bubblewrap
  namespaces, Xvfb, openbox, a terminal on Ctrl+Alt+T, the server on a Unix socket).
- `tasks`: OSWorld task JSON with RLAnything's variant fields; `setup_steps`: config/postconfig
  steps (downloads from an offline cache only); `evaluator` + `metrics`: the reference's scoring.
- `env`: the desktop env (kind "osworld") for the env runner: reset = fresh session + setup, steps run
  actions, the evaluator scores the end.
- `actions`: Qwen3-VL `computer_use` tool calls -> pyautogui code or WAIT/DONE/FAIL.
- `task_families`, `bundled_tasks`: the project's own task set (54 tasks in data/tasks/{train,heldout}),
  each with a scripted expert and a difficulty knob; `episodes`: playing a list of tool calls;
  `play`: `python -m rlanything_jax.play --env osworld ...` writes screenshots, a GIF and an HTML trace.

The scenario (registered as "osworld", `scenario`): the reference's policy prompt
(`agent_prompts`), its reward-model prompt (`judge_prompts`), the scripted experts (`expert`) and the
task rewrites (`generators`).
"""

from rlanything_jax.scenarios.osworld import scenario  # noqa: F401  (registers the scenario)
