#!/usr/bin/env bash
# Accelerator check (issue 19): the policy train step's MFU and the sampler's decode tokens/s against the
# HBM-bandwidth roofline, for a Qwen2.5-0.5B-shaped model (--shape=1.5b: 1.5B) in bfloat16 on the first
# local GPU or TPU chip; under 5 minutes there. bench/device_check.py's docstring says what is timed.
#
#     bash bench/device_check.sh                     # 0.5B shape
#     bash bench/device_check.sh --shape=1.5b
#     bash bench/device_check.sh --peak_tflops=X --hbm_gbps=Y   # a chip not in the script's table
#     bash bench/device_check.sh --smoke             # tiny shapes, any machine (what runs on a CPU anyway)
#
# Arguments go to the script unchanged. Runs with the repository's .venv when there is one, else python3
# (which then needs JAX for the accelerator, e.g. jax[cuda12] or jax[tpu], and this package's
# requirements); the last line printed is one JSON object.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HF_HUB_OFFLINE=1   # nothing is downloaded: the weights are random
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"   # rlanything_jax without an install
PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" "$ROOT/bench/device_check.py" "$@"
