#!/usr/bin/env bash
# Runs the main job on this machine. Any arguments go to rlanything_jax.main, e.g.
#   launchers/local.sh --config=configs/alfworld.py:cpu --config.rollout.group_size=4
# On a CPU-only machine, RLANYTHING_FAKE_DEVICES=N splits the CPU into N devices to try a mesh.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
export HF_HUB_OFFLINE=1
if [ -n "${RLANYTHING_FAKE_DEVICES:-}" ]; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=${RLANYTHING_FAKE_DEVICES}"
fi
exec "$python" -m rlanything_jax.main "$@"
