"""Policy train step against Tunix 0.1.7's GRPO learner, run side by side on this machine.

    .venv/bin/python bench/train_step.py [--repeats 5] [--skip-tunix]

Both sides train the same tiny Qwen3 (2 layers, vocab 1024, hidden 64, MLP 128, 4 heads /
2 kv heads, head_dim 16, rope theta 1e6, tied embeddings, random weights, float32) on the
same work: (a) 2 prompts x 4 generations, prompt 16 + 32 generated tokens, and (b) 8
prompts x 8 generations, prompt 64 + 64 generated tokens; KV cache 128 on both. Same
settings: AdamW (lr 1e-5, b1 0.9, b2 0.999, eps 1e-8, weight decay 0.01) after global-norm
clipping at 1.0, PPO clip 0.2, k3 KL to a separate reference model with beta 0.04,
sequence-mean aggregation, one optimizer update per step, no micro-batching, sampling
at temperature 1 with no stop token (every completion has exactly the generated length).
Tunix runs in its own virtual environment through bench/tunix_grpo_worker.py (its
docstring says exactly what it times), one worker per setting right after our run of the
same setting; never in our requirements.

Timings (median of --repeats steady steps after 2 warm-up steps that compile):
- update only: ours is the jitted `train_step` (jit_train_step: explicit shardings, donated
  state) on a batch already on device, until the new state and metrics are ready. Tunix's
  is the trainer's own compiled train step (nnx.jit of PeftTrainer._train_step) on a
  prepared TrainExample on device, until the updated params are ready; its trainer call
  (`RLCluster.update_actor` = PeftTrainer.train over that one batch) is shown as well.
  Both do one forward + backward over the prompt + response tokens and an AdamW update;
  neither runs an old-policy forward (ours takes the sampler's log-probs, Tunix with
  num_iterations 1 uses stop_gradient of the current ones). Tunix runs every row's
  prompt + completion and computes logits for every position, then slices the
  completion's. Ours, on the same rows and the same loss: each group's prompt runs once
  as a shared prefix that its G rows attend to (`share_prompt_prefixes`), and the output
  layer and the last layer's queries and MLP run for the loss window only (the batch
  carries its targets for the last W positions); the reference log-probs likewise. The
  rollout prefills each prompt once and copies its cache to the G rows (Tunix's
  sampler prefills every row).
- whole GRPO step: Tunix's GRPOLearner global step (rollout, reference log-probs, rewards,
  advantages, update, its bookkeeping). Ours is the same pipeline assembled here from
  library calls, as the project has no trainer loop yet: weights to the Sampler, prefill +
  decode, the same even-token reward, group z-score advantages, a jitted reference
  log-prob forward, and the train step. Each side's step is also broken down: rollout,
  reference log-probs (blocked until ready), update (for Tunix its update_actor call) and
  the rest (rewards, advantages, batch assembly, loop bookkeeping).
The machine's 2 cores are shared, so timings move by 10-30% from run to run: the [min-max]
spread and the ratio of minima are printed next to the medians.
FLOPs are the model FLOPs of the work (what skipping unused positions saves counts as speed):
2 * params per token for a forward and 6 * params for forward + backward over
the prompt + response tokens (the attention score/value matmuls are left out and shown
separately); the whole step adds the reference forward and the rollout (one forward).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core import sharding  # noqa: E402
from rlanything_jax.core.models import Decoder, DecoderConfig, RopeConfig  # noqa: E402
from rlanything_jax.core.rl.normalize import masked_zscore  # noqa: E402
from rlanything_jax.core.rl.train_state import init_train_state, make_optimizer  # noqa: E402
from rlanything_jax.core.rl.train_step import (  # noqa: E402
    TrainBatch,
    TrainSpec,
    batch_shardings,
    jit_train_step,
    share_prompt_prefixes,
    token_logprobs,
)
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig  # noqa: E402
from rlanything_jax.core.sampling.strategies import Sampling  # noqa: E402

HERE = Path(__file__).resolve().parent
TUNIX_PYTHON = HERE / ".venvs" / "tunix" / "bin" / "python"
TINY = dict(num_layers=2, vocab_size=1024, hidden_size=64, intermediate_size=128, num_heads=4, head_dim=16,
            num_kv_heads=2, rope_theta=1e6)
SETTINGS = [dict(name="(a)", prompts=2, generations=4, prompt=16, new=32, cache=128),
            dict(name="(b)", prompts=8, generations=8, prompt=64, new=64, cache=128)]
ADAMW = dict(learning_rate=1e-5, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.01, max_grad_norm=1.0)
KL_BETA, CLIP_EPS, TEMPERATURE, WARMUP = 0.04, 0.2, 1.0, 2


def _prompts(setting: dict, vocab: int) -> list[list[int]]:
    """BOS (1) + prompt - 1 tokens: the ids Tunix builds from its text prompts."""
    return [[1] + [3 + (row * 7 + i) % (vocab - 3) for i in range(setting["prompt"] - 1)]
            for row in range(setting["prompts"])]


def even_token_rewards(completions) -> np.ndarray:
    """Fraction of even token ids in each completion (the worker's reward function)."""
    return np.array([np.mean(np.array(c.token_ids) % 2 == 0) for c in completions], np.float32)


def _ready(tree) -> None:
    jax.block_until_ready(jax.tree.leaves(tree))


def run_ours(setting: dict, repeats: int) -> dict:
    cfg = DecoderConfig(model_type="qwen3", vocab_size=TINY["vocab_size"], hidden_size=TINY["hidden_size"],
                        intermediate_size=TINY["intermediate_size"], num_layers=TINY["num_layers"],
                        num_heads=TINY["num_heads"], num_kv_heads=TINY["num_kv_heads"], head_dim=TINY["head_dim"],
                        rope=RopeConfig(theta=TINY["rope_theta"]), tie_word_embeddings=True, qk_norm=True)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    _, ref_params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))  # the reference starts equal to the policy
    n_params = sum(x.size for x in jax.tree.leaves(params))
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    tx = make_optimizer(ADAMW)
    spec = TrainSpec(graphdef, tx, clip_eps=CLIP_EPS, kl_beta=KL_BETA, aggregation="sequence_mean",
                     num_micro_batches=1)
    state = init_train_state(params, tx)
    sampler = Sampler(model, mesh=mesh, config=SamplerConfig(max_cache_length=setting["cache"]))
    ref_logprobs = jax.jit(lambda p, ids, mask, targets, prefixes: token_logprobs(graphdef, p, ids, mask, targets,
                                                                                 prefixes))
    strategy = Sampling(temperature=TEMPERATURE)
    group, lp = setting["generations"], setting["prompt"]
    prompts = _prompts(setting, cfg.vocab_size)
    rows = [p for p in prompts for _ in range(group)]
    step = None
    phases = {"rollout": [], "reference": [], "update_phase": []}

    def grpo_step(state, seed):
        nonlocal step
        start = time.perf_counter()
        sampler.update_params(state.params)
        # Each prompt is prefilled once and its cache copied to its G rows.
        conversation = sampler.start(prompts, setting["new"], cache_length=setting["cache"], num_samples=group)
        completions = sampler.decode(conversation, setting["new"], strategy, seed=seed, stop_token_ids=[])
        phases["rollout"].append(time.perf_counter() - start)
        rewards = even_token_rewards(completions).reshape(-1, group)
        advantages = np.asarray(masked_zscore(rewards, np.ones_like(rewards), axis=1)).reshape(-1)
        ids = np.array([r + c.token_ids for r, c in zip(rows, completions)], np.int32)
        # The loss window: from the last prompt position (predicting the first generated token) on,
        # as core/rl/data.collate builds it; logits are computed there only.
        window = ids.shape[1] - lp + 1
        mask, targets = np.ones_like(ids), np.roll(ids, -1, axis=1)[:, -window:]
        loss_mask = np.zeros((len(ids), window), np.float32)
        loss_mask[:, :-1] = 1  # targets that are response tokens
        old_logp = np.zeros((len(ids), window), np.float32)
        old_logp[:, :-1] = [c.logprobs for c in completions]
        # The group's prompt (all but its last token, whose position predicts the first generated token)
        # becomes one shared prefix: the forward and backward run it once per group.
        batch = share_prompt_prefixes(TrainBatch(input_ids=ids, attention_mask=mask, targets=targets,
                                                 loss_mask=loss_mask, old_logp=old_logp, advantages=advantages),
                                      group_size=group, prefix_length=lp - 1)
        start = time.perf_counter()
        ref_logp = jax.block_until_ready(ref_logprobs(ref_params, batch.input_ids, batch.attention_mask,
                                                      batch.targets, (batch.prefix_ids, batch.prefix_mask,
                                                                      batch.prefix_index)))
        phases["reference"].append(time.perf_counter() - start)
        batch = batch.replace(ref_logp=ref_logp)
        start = time.perf_counter()
        if step is None:
            step = jit_train_step(spec, state, batch, mesh)
        state, metrics = step(state, batch)
        _ready((state, metrics))
        phases["update_phase"].append(time.perf_counter() - start)
        return state, batch

    whole = []
    for i in range(WARMUP + repeats):
        start = time.perf_counter()
        state, batch = grpo_step(state, seed=i)
        if i >= WARMUP:
            whole.append(time.perf_counter() - start)

    # Update only, on the last rollout's batch, already on device.
    batch = jax.device_put(batch, batch_shardings(batch, mesh, sharding.DEFAULT_LOGICAL_AXIS_RULES))
    update = []
    for i in range(WARMUP + repeats):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        _ready((state, metrics))
        if i >= WARMUP:
            update.append(time.perf_counter() - start)
    return {"n_params": int(n_params), "shape": [len(rows), lp + setting["new"]],
            "loss_tokens": int(np.asarray(batch.loss_mask).sum()), "update": update, "whole": whole,
            **{name: times[WARMUP:] for name, times in phases.items()}}


def run_tunix(setting: dict, repeats: int) -> dict:
    if not TUNIX_PYTHON.exists():
        raise SystemExit(f"{TUNIX_PYTHON} is missing: run bench/sampler.py once to create Tunix's venv, "
                         "or pass --skip-tunix")
    spec = {"model": TINY, "settings": [setting], "repeats": repeats, "warmup": WARMUP, "optimizer": ADAMW,
            "temperature": TEMPERATURE, "kl_beta": KL_BETA, "clip_eps": CLIP_EPS}
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([str(TUNIX_PYTHON), str(HERE / "tunix_grpo_worker.py"), json.dumps(spec)],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"the Tunix worker failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result["results"][0], "jax": result["jax"]}


def _row(label: str, times: list[float], ours: list[float] | None = None) -> str:
    """`label: median [min-max]`, and against our times the ratios (Tunix / ours) of medians and of minima."""
    line = f"    {label:<58}{statistics.median(times) * 1e3:7.1f} ms [{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}]"
    if ours is not None:
        line += (f"  ratio {statistics.median(times) / statistics.median(ours):.2f}x"
                 f" (of minima {min(times) / min(ours):.2f}x)")
    return line


def _breakdown(whole: list[float], rollout: list[float], reference: list[float], update: list[float]) -> str:
    """Medians of each phase over the steady steps; rest (rewards, advantages, batch, loop) per step."""
    rest = [w - r - f - u for w, r, f, u in zip(whole, rollout, reference, update)]
    m = {name: statistics.median(v) * 1e3 for name, v in
         dict(rollout=rollout, reference=reference, update=update, rest=rest).items()}
    return "        = " + " + ".join(f"{name} {value:.1f}" for name, value in m.items()) + " ms (medians)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-tunix", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    ours, tunix = [], []
    for setting in SETTINGS:  # each setting's two runs back to back, as the machine's load drifts
        ours.append(run_ours(setting, args.repeats))
        tunix.append(None if args.skip_tunix else run_tunix(setting, args.repeats))

    print(f"machine: {jax.devices()[0].platform}, {os.cpu_count()} cores (load average {os.getloadavg()[0]:.2f}),"
          f" jax {jax.__version__} (Tunix venv: {tunix[0]['jax'] if tunix[0] else '-'})")
    n = ours[0]["n_params"]
    print(f"model: tiny Qwen3, {n:,} params" + (f" (Tunix's: {tunix[0]['n_params']:,})" if tunix[0] else "")
          + "; AdamW lr 1e-5 + clip 1.0, beta 0.04 (k3), eps 0.2, 1 update/step, no micro-batching")
    print(f"times: median [min-max] of {args.repeats} steady steps after {WARMUP} warm-up steps; "
          "ratio = Tunix time / our time (> 1: ours is faster)")
    for i, setting in enumerate(SETTINGS):
        o = ours[i]
        rows, length = o["shape"]
        tokens = rows * length
        print(f"\n{setting['name']} {setting['prompts']} prompts x {setting['generations']} generations, prompt "
              f"{setting['prompt']} + {setting['new']} generated = {rows} x {length} tokens "
              f"({o['loss_tokens']} in the loss), cache {setting['cache']}")
        t = tunix[i]
        if t:
            assert [t["completion_shape"][0], t["prompt_shape"][1] + t["completion_shape"][1]] == o["shape"], t
            print(f"  (Tunix's TrainExample: {t['completion_shape'][0]} x ({t['prompt_shape'][1]} + "
                  f"{t['completion_shape'][1]}) tokens, {t['loss_tokens']} in the loss as its pad id 0 is also a "
                  f"sampled token; reference log-probs {t['has_ref_logps']}, old log-probs {t['has_old_logps']})")
        print("  update only")
        print(_row("ours   jitted train_step", o["update"]))
        if t:
            print(_row("Tunix  jitted PeftTrainer train step", t["jitted_update_all_s"], o["update"]))
            print(_row("Tunix  update_actor (PeftTrainer.train on the batch)", t["trainer_update_all_s"], o["update"]))
        print("  whole GRPO step")
        print(_row("ours   rollout + reference + reward + update (this file)", o["whole"]))
        print(_breakdown(o["whole"], o["rollout"], o["reference"], o["update_phase"]))
        if t:
            print(_row("Tunix  GRPOLearner global step", t["whole_all_s"], o["whole"]))
            print(_breakdown(t["whole_all_s"], t["rollout_all_s"], t["reference_all_s"], t["trainer_update_all_s"]))
        update_flops, whole_flops = 6 * n * tokens, 10 * n * tokens  # + reference forward + rollout forward
        attention = 3 * 4 * TINY["num_layers"] * rows * length ** 2 * TINY["num_heads"] * TINY["head_dim"]
        ours_update, ours_whole = statistics.median(o["update"]), statistics.median(o["whole"])
        print(f"  FLOPs, ours: update 6*N*D = {update_flops / 1e9:.3f} GFLOP -> {update_flops / ours_update / 1e9:.1f}"
              f" GFLOP/s; whole step 10*N*D = {whole_flops / 1e9:.3f} GFLOP -> "
              f"{whole_flops / ours_whole / 1e9:.1f} GFLOP/s")
        print(f"    (left out: the update's attention score/value matmuls, {attention / 1e9:.3f} GFLOP, "
              f"+{attention / update_flops:.0%})")
    print(f"\ntotal bench time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
