"""OSWorld desktop tasks (OSWORLD.md): the environment half.

- `endpoint`, `client`: `OsWorldClient` for OSWorld's VM server protocol, usable against real
  OSWorld VMs of any provider (`host:server_port[:chromium:vnc:vlc]`) and local sessions.
- `desktop_server`: the project's own server for the protocol subset, run inside a local session.
- `local_desktop`: one isolated local desktop session per environment slot (bubblewrap
  namespaces, Xvfb, openbox, a terminal on Ctrl+Alt+T, the server on a Unix socket).

The scenario itself (prompts, loop wiring) is not registered yet: `configs/osworld.py` still says so.
"""
