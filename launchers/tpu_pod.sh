#!/usr/bin/env bash
# Starts the same run on every host of a Cloud TPU pod slice (v5e-64, v5p-...), one process per host.
#
#   launchers/tpu_pod.sh NAME ZONE [--setup] -- --config=configs/alfworld.py:tpu_v5e_64 --config.workdir=/mnt/shared/run
#
# --setup first copies this checkout to every host (~/rlanything_jax) and runs scripts/setup.sh there
# (a fresh pod's hosts have Python but not the project). JAX finds the other hosts by itself on a TPU VM
# (`distributed.mode=on`: rlanything_jax/core/distributed.py). Keep the workdir on shared storage (a GCS FUSE
# mount, Filestore or NFS, the same path on every host): every host takes part in each checkpoint save. Re-running
# the same command resumes from the newest checkpoint. The first host's log is what the run prints; the
# others print theirs with their process tag.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
name=$1 zone=$2; shift 2
setup=0
if [ "${1:-}" = "--setup" ]; then setup=1; shift; fi
[ "${1:-}" = "--" ] && shift
cd "$(dirname "$0")/.."
ssh_all() { gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" --worker=all --command="$1"; }
if [ "$setup" = 1 ]; then
  git archive --format=tar.gz -o /tmp/rlanything_jax.tar.gz HEAD
  gcloud compute tpus tpu-vm scp /tmp/rlanything_jax.tar.gz "$name":/tmp/ --zone="$zone" --worker=all
  ssh_all "mkdir -p ~/rlanything_jax && tar xzf /tmp/rlanything_jax.tar.gz -C ~/rlanything_jax && cd ~/rlanything_jax && bash scripts/setup.sh && .venv/bin/pip install -q 'jax[tpu]'"
fi
args=$(printf '%q ' "$@")
ssh_all "cd ~/rlanything_jax && HF_HUB_OFFLINE=1 .venv/bin/python -m rlanything_jax.main --config.distributed.mode=on $args"
