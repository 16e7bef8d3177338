"""A run's trained policy or reward model as a Hugging Face directory (weights, config, tokenizer, chat
template) that transformers, vLLM or another evaluation suite loads.

    python -m rlanything_jax.export --workdir=W [--step=N] --role=policy|reward --out=DIR [--dtype=D]

The run's own config (W/config.json) rebuilds its models; the checkpoint of step N (default: the newest)
gives their weights. A bfloat16 model trained with a float32 master copy is written from the master copy
in float32 (the weights the optimizer holds; --dtype=bfloat16 writes the bfloat16 ones the run sampled
with). Scanned layers are written as the per-layer tensors of an unrolled model. The tokenizer files and
chat template are copied from the model the run started from. The last line of output is
{"out": ..., "role": ..., "step": ..., "dtype": ...}. A run writes the same at its end with
`loop.export_at_end` (W/export/<role>).
"""

from __future__ import annotations

import argparse
import json
import sys

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.assemble import ROLES
from rlanything_jax.system.model_export import export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the newest)")
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")
    parser.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: as trained, see above)")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(export(args.workdir, args.role, args.out, args.step, args.dtype)))
        return 0
    except (ConfigError, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
