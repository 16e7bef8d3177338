"""Runs Tunix 0.1.7's vanilla sampler on a tiny random Qwen3 and prints tokens/s as JSON.

Executed by bench/sampler.py with the interpreter of Tunix's own virtual environment
(never the project's): `python tunix_sampler_worker.py '<json settings>'`.
"""

import json
import statistics
import sys
import time

import jax
from counting_tokenizer import CountingTokenizer  # bench/ is on sys.path for these scripts
from flax import nnx
from tunix.generate import sampler as sampler_lib
from tunix.models.qwen3 import model as qwen3_lib


def main() -> None:
    spec = json.loads(sys.argv[1])
    m = spec["model"]
    cfg = qwen3_lib.ModelConfig(num_layers=m["num_layers"], vocab_size=m["vocab_size"], embed_dim=m["hidden_size"],
                                hidden_dim=m["intermediate_size"], num_heads=m["num_heads"], head_dim=m["head_dim"],
                                num_kv_heads=m["num_kv_heads"], rope_theta=m["rope_theta"], norm_eps=1e-6,
                                use_tied_embedding=True)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    results = []
    with jax.set_mesh(mesh):
        model = qwen3_lib.Qwen3(cfg, rngs=nnx.Rngs(0))
        for setting in spec["settings"]:
            sampler = sampler_lib.Sampler(
                transformer=model, tokenizer=CountingTokenizer(),
                cache_config=sampler_lib.CacheConfig(cache_size=setting["cache"], num_layers=m["num_layers"],
                                                     num_kv_heads=m["num_kv_heads"], head_dim=m["head_dim"]))
            # Tunix adds BOS, so prompt_len - 1 text tokens give prompt_len tokens.
            prompts = [" ".join(f"t{3 + (row * 7 + i) % (m['vocab_size'] - 3)}" for i in range(setting["prompt"] - 1))
                       for row in range(setting["batch"])]

            def call(seed, sampler=sampler, prompts=prompts, setting=setting):
                out = sampler(input_strings=prompts, max_generation_steps=setting["new"],
                              max_prompt_length=setting["prompt"], temperature=spec["temperature"],
                              top_p=spec["top_p"], top_k=spec["top_k"], seed=seed, eos_tokens=[-1])
                return out

            call(0)  # compilation
            times = []
            for repeat in range(spec["repeats"]):
                start = time.perf_counter()
                out = call(repeat + 1)
                times.append(time.perf_counter() - start)
            generated = sum(len(t) for t in out.tokens)
            results.append({**setting, "seconds": statistics.median(times),
                            "tokens_per_s": setting["batch"] * setting["new"] / statistics.median(times),
                            "generated_per_call": generated})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
