"""The files a local desktop session runs from, written on the host and bound read-only at
`/opt/rla` inside: the start script, the openbox configuration (Ctrl+Alt+T opens a terminal
titled "Terminal"), the terminal launcher, a `sudo` shim, `python` with the session's
pyautogui, the project's server, and the session's own /etc/passwd, group, hosts and machine-id.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from rlanything_jax.scenarios.osworld import desktop_server, pyautogui_xdotool

INSIDE_DIR = "/opt/rla"            # where these files are inside the session
INSIDE_RUN_DIR = "/run/rla"        # the bound host directory holding the server's socket
SOCKET_NAME = "server.sock"
SESSION_UID = 1000                 # the session user, as OSWorld's VM user `user`
SESSION_HOME = "/home/user"
DISPLAY = ":0"                     # each session has its own /tmp and network namespace, so all use :0

_START_SCRIPT = """#!/bin/sh
# The session's first process (bwrap is pid 1): the desktop stack, then the server in the foreground,
# so that the session ends when the server does.
set -e
mkdir -p "$XDG_RUNTIME_DIR" /tmp/rla-terminal
chmod 700 "$XDG_RUNTIME_DIR"
: > "$XAUTHORITY"   # pyautogui-style clients want an existing (even empty) authority file
Xvfb {display} -screen 0 {width}x{height}x{depth} -nolisten tcp -noreset >/tmp/xvfb.log 2>&1 &
xvfb=$!
i=0
while [ ! -S /tmp/.X11-unix/X{display_number} ]; do
  i=$((i + 1))
  if [ $i -ge 400 ] || ! kill -0 $xvfb 2>/dev/null; then
    echo "Xvfb did not start:" >&2; cat /tmp/xvfb.log >&2; exit 1
  fi
  sleep 0.025
done
cp -r {inside}/home/. "$HOME"/   # the applications' first-start settings (session_files.HOME_FILES)
eval "$(dbus-launch --sh-syntax)"
export DBUS_SESSION_BUS_ADDRESS
openbox --config-file {inside}/openbox-rc.xml >/tmp/openbox.log 2>&1 &
i=0
# Ready once its key bindings work (it names itself as the WM before it grabs keys): press the
# probe binding until the file it touches appears.
until [ -e /tmp/.rla-openbox-ready ]; do
  i=$((i + 1)); [ $i -lt 400 ] || {{ echo "openbox did not start:" >&2; cat /tmp/openbox.log >&2; exit 1; }}
  xdotool key ctrl+alt+shift+F12 2>/dev/null || true
  sleep 0.025
done
exec python3 {inside}/desktop_server.py --unix-socket {run_dir}/{socket} --display {display}
"""

_OPENBOX_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <placement><policy>Smart</policy><center>yes</center></placement>
  <desktops><number>1</number></desktops>
  <keyboard>
    <keybind key="C-A-t"><action name="Execute"><command>rla-terminal</command></action></keybind>
    <keybind key="C-A-S-F12"><action name="Execute"><command>touch /tmp/.rla-openbox-ready</command></action></keybind>
  </keyboard>
  <applications><application class="*"><decor>yes</decor></application></applications>
</openbox_config>
"""

# xterm logs what it shows, for /terminal, in a file named by its pid (exec keeps $$); allowTitleOps
# keeps the title "Terminal" whatever the shell sets.
_TERMINAL = """#!/bin/sh
mkdir -p /tmp/rla-terminal
exec xterm -T Terminal -xrm 'XTerm*allowTitleOps: false' -fa Monospace -fs 12 -geometry 100x30 \\
  -l -lf /tmp/rla-terminal/$$.log
"""

# Tasks run `echo {{CLIENT_PASSWORD}} | sudo -S cmd`; the session has no root, so the shim checks the
# password and runs the command as the session user.
_SUDO = """#!/bin/sh
from_stdin=0
while [ $# -gt 0 ]; do
  case "$1" in
    -S) from_stdin=1; shift ;;
    -u|-g|-p|-C|-h) shift 2 ;;
    --) shift; break ;;
    -*) case "$1" in *S*) from_stdin=1 ;; esac; shift ;;
    *) break ;;
  esac
done
if [ "$from_stdin" = 1 ]; then
  IFS= read -r password || true
  if [ "$password" != '{password}' ]; then echo "Sorry, try again." >&2; exit 1; fi
fi
[ $# -gt 0 ] || exit 0
exec "$@"
"""

# OSWorld's tasks launch Chrome as `google-chrome` and read its profile under ~/.config/google-chrome;
# Debian has Chromium, which the session shows at Google Chrome's place (CHROME_DIR, local_desktop binds it), its
# binary named `chrome` so that a task's `pkill chrome` finds it (Chromium's own sandbox needs namespaces the
# session's sandbox does not give; the session is the sandbox).
CHROME_DIR = "/opt/google/chrome"
_GOOGLE_CHROME = f"""#!/bin/sh
exec {CHROME_DIR}/chrome --no-sandbox --no-first-run --no-default-browser-check --password-store=basic \\
  --user-data-dir="$HOME/.config/google-chrome" "$@"
"""

# Settings the applications would otherwise ask about at their first start (OSWorld's VM has them set):
# LibreOffice's tip of the day, its Keep Current Format question on Ctrl+S (tasks save xlsx, docx and pptx with
# Ctrl+S alone), Impress's template chooser, VLC's privacy question.
HOME_FILES = {
    ".config/libreoffice/4/user/registrymodifications.xcu": """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse">\
<value>false</value></prop></item>
<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="FirstStartWizardCompleted" oor:op="fuse">\
<value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" oor:op="fuse">\
<value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Impress/Misc"><prop oor:name="StartWithTemplate" oor:op="fuse">\
<value>false</value></prop></item>
</oor:items>
""",
    ".config/vlc/vlcrc": "[qt] # Qt interface\nqt-privacy-ask=0\n",
}

_PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:{uid}:{uid}:user:{home}:/bin/bash\n" \
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
_GROUP = "root:x:0:\nsudo:x:27:user\nuser:x:{uid}:\nnogroup:x:65534:\n"
_HOSTS = "127.0.0.1\tlocalhost\n127.0.1.1\trla-desktop\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def session_env(width: int, height: int) -> dict[str, str]:
    """The environment the session starts with (nothing of the host's)."""
    return {
        "HOME": SESSION_HOME, "USER": "user", "LOGNAME": "user", "SHELL": "/bin/bash",
        "PATH": f"{INSIDE_DIR}/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "PYTHONPATH": f"{INSIDE_DIR}/python", "PYTHONDONTWRITEBYTECODE": "1",
        "DISPLAY": DISPLAY, "XDG_SESSION_TYPE": "x11", "XAUTHORITY": "/tmp/.Xauthority",
        "XDG_RUNTIME_DIR": f"/tmp/runtime-{SESSION_UID}", "LANG": "C.UTF-8", "TERM": "xterm-256color",
        "SCREEN_WIDTH": str(width), "SCREEN_HEIGHT": str(height),
    }


def write_session_files(directory: Path, width: int, height: int, depth: int = 24,
                        sudo_password: str = "password") -> Path:
    """Writes every file into `directory` (created fresh, world-readable) and returns it."""
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "bin").mkdir(parents=True)
    (directory / "python").mkdir()
    executables = {
        "start-session": _START_SCRIPT.format(display=DISPLAY, display_number=DISPLAY[1:], width=width,
                                              height=height, depth=depth, inside=INSIDE_DIR,
                                              run_dir=INSIDE_RUN_DIR, socket=SOCKET_NAME),
        "bin/rla-terminal": _TERMINAL,
        "bin/sudo": _SUDO.format(password=sudo_password.replace("'", "")),
        "bin/google-chrome": _GOOGLE_CHROME,
    }
    files = {
        "openbox-rc.xml": _OPENBOX_RC,
        "etc/passwd": _PASSWD.format(uid=SESSION_UID, home=SESSION_HOME),
        "etc/group": _GROUP.format(uid=SESSION_UID),
        "etc/hosts": _HOSTS,
        "etc/hostname": "rla-desktop\n",
        "etc/machine-id": uuid.uuid4().hex + "\n",   # dbus refuses to start without one
        **{f"home/{name}": text for name, text in HOME_FILES.items()},
    }
    for name, text in {**executables, **files}.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if name in executables else 0o644)
    shutil.copyfile(desktop_server.__file__, directory / "desktop_server.py")
    shutil.copyfile(pyautogui_xdotool.__file__, directory / "python" / "pyautogui.py")
    os.symlink("/usr/bin/python3", directory / "bin" / "python")          # actions run `python -c`
    os.symlink("rla-terminal", directory / "bin" / "gnome-terminal")      # tasks may launch it by name
    os.symlink("rla-terminal", directory / "bin" / "x-terminal-emulator")
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        elif path.is_file() and not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o444)
    return directory
