"""Batched generation from a Hugging Face directory with the KV-cache sampler.

  python -m rlanything_jax.generate --model DIR --prompt TEXT [--prompt TEXT ...] [--chat]
      --max-new-tokens N [--temperature T --top-p P --top-k K --seed S] [--stop STR ...] [--output json]

`--temperature 0` (the default) is greedy. `--model package:smollm2-135m-instruct`
uses the small model shipped on PyPI. With `--output json`, one JSON object per
prompt (text, token_ids, logprobs, finish_reason) is printed per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rlanything_jax.generate",
                                     description="Batched text generation with the KV-cache sampler.")
    parser.add_argument("--model", required=True, help="local Hugging Face directory or package:NAME")
    parser.add_argument("--prompt", action="append", required=True, help="a prompt; repeat for a batch")
    parser.add_argument("--chat", action="store_true", help="wrap each prompt as a user turn of the chat template")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop", action="append", default=[], help="a stop string; repeatable")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    return parser


def _one_line(error: BaseException, model: str | None = None) -> str:
    """The error as one line, naming the model path when the message does not already."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    text = " ".join(str(message).split())
    return f"{model}: {text}" if model and model not in text else text


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from rlanything_jax.core.models import load_pretrained
    from rlanything_jax.core.models.gguf_io import ConversionError
    from rlanything_jax.core.models.registry import resolve_model_dir
    from rlanything_jax.core.models.tokenizer import Tokenizer
    from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
    from rlanything_jax.core.sampling.strategies import make_strategy

    try:
        strategy = make_strategy(args.temperature, args.top_k, args.top_p)
        if args.max_new_tokens < 1:
            raise ValueError("--max-new-tokens must be at least 1")
    except ValueError as error:
        return _fail(_one_line(error))
    # Bad model inputs (no directory, no weights or tokenizer, broken config, an
    # architecture we do not support, a missing package) are user errors: one line, no traceback.
    model_dir = args.model
    try:
        model_dir = str(resolve_model_dir(args.model))
        model = load_pretrained(model_dir, dtype=args.dtype)
        tokenizer = Tokenizer.from_dir(model_dir)
    except (ValueError, OSError, KeyError, ConversionError) as error:
        return _fail(_one_line(error, model_dir))
    sampler = Sampler(model, tokenizer, config=SamplerConfig(max_cache_length=model.config.max_position_embeddings))
    start = time.perf_counter()
    try:
        completions = sampler.generate(args.prompt, args.max_new_tokens, strategy, seed=args.seed,
                                       chat=args.chat, stop_strings=args.stop)
    except ValueError as error:
        return _fail(_one_line(error))
    elapsed = time.perf_counter() - start
    total = sum(len(c.token_ids) for c in completions)
    print(f"[rlanything_jax.generate] {total} tokens in {elapsed:.2f}s (including compilation)", file=sys.stderr)
    for prompt, completion in zip(args.prompt, completions):
        if args.output == "json":
            print(json.dumps({"prompt": prompt, "text": completion.text, "token_ids": completion.token_ids,
                              "logprobs": completion.logprobs, "finish_reason": completion.finish_reason}))
        else:
            print(f"### {prompt}\n{completion.text}\n")
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
