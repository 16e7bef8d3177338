"""Full-sequence forward throughput: our JAX decoder against transformers' PyTorch model.

    .venv/bin/python bench/forward.py [--model DIR] [--batch 8] [--length 128] [--repeats 5]

Both run the same SmolLM2-135M-Instruct weights (converted from the packaged GGUF
unless --model is given) in float32 on this machine's CPU, in one process, and the
script prints tokens/s for each and the ratio. It also checks that the two agree.
Needs the test extras (torch==2.13.0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core.models import load_pretrained  # noqa: E402
from rlanything_jax.core.models.registry import resolve_model_dir  # noqa: E402


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (compilation for JAX)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="package:smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    model_dir = resolve_model_dir(args.model)
    ours = load_pretrained(model_dir, dtype="float32")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = np.random.RandomState(0).randint(0, ours.config.vocab_size, (args.batch, args.length)).astype(np.int32)

    forward = nnx.jit(lambda model, tokens: model(tokens))
    ids_jax = jnp.asarray(ids)
    ids_torch = torch.tensor(ids, dtype=torch.long)

    def run_ours():
        return jax.block_until_ready(forward(ours, ids_jax))

    def run_theirs():
        with torch.no_grad():
            return theirs(ids_torch).logits

    difference = float(np.abs(np.asarray(run_ours()) - run_theirs().numpy()).max())
    ours_s, theirs_s = _time(run_ours, args.repeats), _time(run_theirs, args.repeats)
    tokens = args.batch * args.length
    print(f"model {model_dir.name}: batch {args.batch} x {args.length} tokens, float32, "
          f"{jax.devices()[0].platform} ({os.cpu_count()} cores), torch threads {torch.get_num_threads()}")
    print(f"max |logit difference| = {difference:.2e}")
    print(f"rlanything_jax forward : {tokens / ours_s:10.0f} tokens/s ({ours_s * 1e3:.1f} ms)")
    print(f"transformers forward   : {tokens / theirs_s:10.0f} tokens/s ({theirs_s * 1e3:.1f} ms)")
    print(f"ratio (ours / transformers) = {theirs_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
