"""Sampler throughput against peers, run side by side on this machine.

    .venv/bin/python bench/sampler.py [--repeats 5] [--vocabs 1024,151936] [--skip-tunix] [--skip-transformers]

(a) Tunix 0.1.7's vanilla sampler and ours on the same tiny Qwen3 (2 layers, hidden 64,
    4 heads / 2 kv heads, head_dim 16, rope theta 1e6, random weights), with the same
    settings: batch 8 x prompt 16 x 32 new tokens (cache 128), and an agent-like batch
    32 x prompt 512 x 64 new tokens (cache 2048), at each vocabulary of `--vocabs`
    (151,936 is every Qwen checkpoint's). Tunix runs in its own virtual environment
    (bench/.venvs/tunix, created on first use; never in our requirements).
(b) transformers' `generate` and ours on SmolLM2-135M-Instruct in float32 and in
    bfloat16, batch 8 x prompt 16 x 32 new tokens, greedy.
Every call is timed after a warm-up (compilation) call; tokens/s counts generated
tokens over the whole call (prefill + decode). It also prints our decode's fraction
of the memory-bandwidth roofline at batch 8 and at batch 1: bytes of weights + live
KV read per step against this machine's best measured read bandwidth. Ends with one
JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core.models import Decoder, DecoderConfig, RopeConfig, load_pretrained  # noqa: E402
from rlanything_jax.core.models.registry import resolve_model_dir  # noqa: E402
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig  # noqa: E402
from rlanything_jax.core.sampling.strategies import Greedy, Sampling  # noqa: E402

HERE = Path(__file__).resolve().parent
TUNIX_VENV = HERE / ".venvs" / "tunix"
TINY = dict(num_layers=2, vocab_size=1024, hidden_size=64, intermediate_size=128, num_heads=4, head_dim=16,
            num_kv_heads=2, rope_theta=1e6)
SETTINGS = [dict(name="small", batch=8, prompt=16, new=32, cache=128),
            dict(name="agent-like", batch=32, prompt=512, new=64, cache=2048)]
SAMPLING = dict(temperature=1.0, top_p=0.9, top_k=10)


def _median_time(fn, repeats: int) -> float:
    fn(0)  # compilation
    times = []
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        fn(seed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    return [[3 + (row * 7 + i) % (vocab - 3) for i in range(length)] for row in range(batch)]


def _ensure_tunix() -> Path:
    python = TUNIX_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {TUNIX_VENV} with google-tunix==0.1.7 (about 2 minutes, 1.6 GB)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(TUNIX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "google-tunix==0.1.7", "jax[cpu]"], check=True)
    return python


def run_tunix(repeats: int, vocab: int) -> list[dict]:
    settings = [{k: s[k] for k in ("batch", "prompt", "new", "cache")} for s in SETTINGS]
    spec = {"model": dict(TINY, vocab_size=vocab), "settings": settings, "repeats": repeats, **SAMPLING}
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([str(_ensure_tunix()), str(HERE / "tunix_sampler_worker.py"), json.dumps(spec)],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_ours_tiny(repeats: int, vocab: int) -> list[dict]:
    cfg = DecoderConfig(model_type="qwen3", vocab_size=vocab, hidden_size=TINY["hidden_size"],
                        intermediate_size=TINY["intermediate_size"], num_layers=TINY["num_layers"],
                        num_heads=TINY["num_heads"], num_kv_heads=TINY["num_kv_heads"], head_dim=TINY["head_dim"],
                        rope=RopeConfig(theta=TINY["rope_theta"]), tie_word_embeddings=True, qk_norm=True)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    strategy = Sampling(**SAMPLING)
    results = []
    for setting in SETTINGS:
        sampler = Sampler(model, config=SamplerConfig(max_cache_length=setting["cache"]))
        prompts = _prompts(setting["batch"], setting["prompt"], cfg.vocab_size)

        def call(seed, sampler=sampler, prompts=prompts, setting=setting):
            conversation = sampler.start(prompts, setting["new"], cache_length=setting["cache"])
            return sampler.decode(conversation, setting["new"], strategy, seed=seed, stop_token_ids=[])

        seconds = _median_time(call, repeats)
        results.append({**setting, "seconds": seconds, "tokens_per_s": setting["batch"] * setting["new"] / seconds,
                        "compilations": dict(sampler.compilations)})
    return results


def memory_bandwidth() -> tuple[float, str]:
    """The best of three probes of this machine's memory read bandwidth (bytes/s) on a 512 MB array."""
    size = 128 * 1024 * 1024
    host = np.ones(size, np.float32)
    device = jax.numpy.ones((size,), jax.numpy.float32)
    total = jax.jit(lambda x: x.sum())
    probes = {
        "numpy copy (read + write)": 2 * host.nbytes / _median_time(lambda _: np.copyto(np.empty_like(host), host), 3),
        "numpy sum": host.nbytes / _median_time(lambda _: host.sum(), 3),
        "XLA sum": device.nbytes / _median_time(lambda _: jax.block_until_ready(total(device)), 3),
    }
    name = max(probes, key=probes.get)
    return probes[name], name


def run_smollm2(repeats: int, dtype: str, with_transformers: bool, batch: int = 8) -> dict:
    model_dir = resolve_model_dir("package:smollm2-135m-instruct")
    model = load_pretrained(model_dir, dtype=dtype)
    prompt_len, new = 16, 32
    prompts = _prompts(batch, prompt_len, model.config.vocab_size)
    sampler = Sampler(model)

    def ours(seed):
        conversation = sampler.start(prompts, new)
        return sampler.decode(conversation, new, Greedy(), stop_token_ids=[])

    result = {"ours_tokens_per_s": batch * new / _median_time(ours, repeats)}
    # Decode alone, for the roofline: bytes of weights + live KV read per step.
    step_times = []
    for _ in range(3):
        conversation = sampler.start(prompts, new)
        jax.block_until_ready(conversation.state)
        start = time.perf_counter()
        sampler.decode(conversation, new, Greedy(), stop_token_ids=[])
        step_times.append((time.perf_counter() - start) / new)
    cfg = model.config
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    mean_live = 16 + new / 2  # the prompt bucket plus half the generation, on average
    kv_bytes = 2 * cfg.num_layers * batch * mean_live * cfg.num_kv_heads * cfg.head_dim * np.dtype(model.dtype).itemsize
    result.update(step_ms=statistics.median(step_times) * 1e3, bytes_per_step=weight_bytes + kv_bytes)
    if with_transformers:
        import torch
        import transformers

        reference = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=getattr(torch, dtype)).eval()
        ids = torch.tensor(prompts, dtype=torch.long)

        def theirs(seed):
            with torch.no_grad():
                return reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                          max_new_tokens=new, min_new_tokens=new, pad_token_id=0)

        result["transformers_tokens_per_s"] = batch * new / _median_time(theirs, repeats)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocabs", default="1024,151936")
    parser.add_argument("--skip-tunix", action="store_true")
    parser.add_argument("--skip-transformers", action="store_true")
    args = parser.parse_args()
    print(f"machine: {jax.devices()[0].platform}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")
    figures: dict = {"bench": "sampler", "cpu_cores": os.cpu_count()}

    for vocab in (int(v) for v in args.vocabs.split(",")):
        ours = run_ours_tiny(args.repeats, vocab)
        tunix = None if args.skip_tunix else run_tunix(args.repeats, vocab)
        print(f"\n(a) tiny Qwen3, vocabulary {vocab}, sampling T=1.0 top-p 0.9 top-k 10 (tokens/s, whole call)")
        for i, setting in enumerate(SETTINGS):
            line = (f"  {setting['name']:>10}: batch {setting['batch']} x prompt {setting['prompt']} x "
                    f"{setting['new']} new, cache {setting['cache']}: ours {ours[i]['tokens_per_s']:9.0f}")
            key = f"{setting['name'].replace('-', '_')}_vocab{vocab // 1000}k"
            figures[f"ours_tokens_per_s_{key}"] = round(ours[i]["tokens_per_s"], 1)
            if tunix:
                ratio = ours[i]['tokens_per_s'] / tunix[i]['tokens_per_s']
                figures[f"vs_tunix_{key}"] = round(ratio, 2)
                line += f"  tunix {tunix[i]['tokens_per_s']:9.0f}  ratio {ratio:.2f}x"
            print(line + f"  (compilations {ours[i]['compilations']})")

    bandwidth, probe = memory_bandwidth()
    figures["read_bandwidth_gb_s"] = round(bandwidth / 1e9, 2)
    for dtype, batch in (("float32", 8), ("bfloat16", 8), ("float32", 1)):
        print(f"\n(b) SmolLM2-135M-Instruct {dtype}, greedy, batch {batch} x prompt 16 x 32 new (tokens/s, whole call)")
        smol = run_smollm2(args.repeats, dtype, not args.skip_transformers, batch)
        line = f"  ours {smol['ours_tokens_per_s']:6.1f}"
        key = f"smollm2_{dtype}_b{batch}"
        if "transformers_tokens_per_s" in smol:
            ratio = smol["ours_tokens_per_s"] / smol["transformers_tokens_per_s"]
            figures[f"vs_transformers_{key}"] = round(ratio, 2)
            line += f"  transformers generate {smol['transformers_tokens_per_s']:6.1f}  ratio {ratio:.2f}x"
        achieved = smol["bytes_per_step"] / (smol["step_ms"] / 1e3)
        figures[f"roofline_fraction_{key}"] = round(achieved / bandwidth, 3)
        line += (f"\n  roofline: decode step {smol['step_ms']:.1f} ms reads "
                 f"{smol['bytes_per_step'] / 1e6:.0f} MB (weights + live KV) = {achieved / 1e9:.1f} GB/s, "
                 f"{achieved / bandwidth:.0%} of the measured {bandwidth / 1e9:.1f} GB/s ({probe})")
        print(line)
    figures["b1_roofline_fraction"] = figures["roofline_fraction_smollm2_float32_b1"]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
