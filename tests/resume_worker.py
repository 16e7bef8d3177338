"""Trains a tiny policy for some steps with checkpoints; run as a separate process by test_checkpoint.

    python -m tests.resume_worker CHECKPOINT_DIR TOTAL_STEPS OUT.npz [--stop-after N]

Resumes from the newest checkpoint in CHECKPOINT_DIR when there is one. Batches come
from a counter-driven iterator whose position is checkpointed as JSON state. OUT.npz
holds every leaf of the final train state (update count, params, optimizer moments),
keyed by its pytree path, and the iterator's position.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like  # noqa: E402
from rlanything_jax.core.models import Decoder, DecoderConfig  # noqa: E402
from rlanything_jax.core.rl.train_state import init_train_state, make_optimizer  # noqa: E402
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, train_step  # noqa: E402

CFG = DecoderConfig(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8)


class CountingBatches:
    """Deterministic batches: the i-th one depends only on i."""

    def __init__(self):
        self.position = 0

    def next(self) -> TrainBatch:
        rng = np.random.RandomState(self.position)
        self.position += 1
        ids = rng.randint(0, CFG.vocab_size, (4, 10)).astype(np.int32)
        return TrainBatch(input_ids=ids, attention_mask=np.ones_like(ids), targets=np.roll(ids, -1, axis=1),
                          loss_mask=np.tile(np.arange(10) >= 5, (4, 1)).astype(np.float32),
                          old_logp=np.full(ids.shape, -4.0, np.float32), advantages=rng.randn(4).astype(np.float32))

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def main() -> None:
    directory, total, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    stop_after = int(sys.argv[5]) if len(sys.argv) > 5 else total
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    tx = make_optimizer(dict(learning_rate=1e-2, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.01,
                             max_grad_norm=1.0))
    state = init_train_state(params, tx)
    batches = CountingBatches()
    checkpointer = SystemCheckpointer(directory, max_to_keep=3)
    checkpointer.register("data", batches)
    restored = checkpointer.restore_latest(abstract_like({"policy": state}))
    if restored is not None:
        state = restored.arrays["policy"]
        print(f"resumed at step {restored.step}", flush=True)
    step = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx)))
    while int(state.step) < min(total, stop_after):
        state, _ = step(state, batches.next())
        checkpointer.save(int(state.step), {"policy": state})
    checkpointer.close()
    leaves = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}
    np.savez(out, data_position=batches.position, **leaves)


if __name__ == "__main__":
    main()
