"""Runs Tunix 0.1.7's GRPO learner on a tiny random Qwen3 and prints its step times as JSON.

Executed by bench/train_step.py with the interpreter of Tunix's own virtual environment
(never the project's): `python tunix_grpo_worker.py '<json settings>'`. The last stdout
line is JSON: {"jax": version, "results": [one dict per setting]}.

For each setting it runs `GRPOLearner.train` for `warmup + repeats` global steps (one
optimizer update each: no mini/micro-batching, num_iterations 1, so no old-policy
forward) with a separate reference model (beta > 0) and the vanilla rollout engine on
the same one-device mesh as the actor, and measures:

- `whole_s`: wall time between the ends of consecutive global steps, i.e. one whole GRPO
  step: rollout (prefill + decode), reference log-probs, rewards and advantages, and the
  trainer's update call. The first `warmup` steps (compilation) are dropped. The
  `rollout_all_s` (RLCluster.generate) and `reference_all_s` (get_ref_per_token_logps,
  blocked until ready) lists break it down; `*_all_s` hold every steady step.
- `trainer_update_s`: `RLCluster.update_actor` on the prepared TrainExample, i.e.
  `PeftTrainer.train` over one batch (input sharding, the jitted update, metric
  buffering and logging), timed until the updated parameters are ready.
- `jitted_update_s`: afterwards, the trainer's own compiled train step
  (`jit_train_and_eval_step`) called alone on the last captured TrainExample, timed
  until its outputs and the updated parameters are ready: the closest match to our
  jitted `train_step`.
"""

import json
import statistics
import sys
import time

import jax
import numpy as np
import optax
from counting_tokenizer import CountingTokenizer  # bench/ is on sys.path for these scripts
from flax import nnx
from tunix.models.qwen3 import model as qwen3_lib
from tunix.rl import rl_cluster as rc
from tunix.rl.grpo import grpo_learner as grpo
from tunix.rl.rollout import base_rollout
from tunix.sft import sharding_utils


def even_token_reward(prompts, completions, **kwargs):
    """Fraction of even token ids in each completion (cheap, and the same rule as ours)."""
    rewards = []
    for text in completions:
        ids = [int(piece[1:]) for piece in text.split()]
        rewards.append(sum(i % 2 == 0 for i in ids) / max(len(ids), 1))
    return rewards


def _model(m):
    cfg = qwen3_lib.ModelConfig(num_layers=m["num_layers"], vocab_size=m["vocab_size"], embed_dim=m["hidden_size"],
                                hidden_dim=m["intermediate_size"], num_heads=m["num_heads"], head_dim=m["head_dim"],
                                num_kv_heads=m["num_kv_heads"], rope_theta=m["rope_theta"], norm_eps=1e-6,
                                use_tied_embedding=True)
    return qwen3_lib.Qwen3(cfg, rngs=nnx.Rngs(0))


def _optimizer(o):
    """Exactly the optax chain of our make_optimizer: global-norm clipping, then AdamW."""
    adamw = optax.adamw(o["learning_rate"], b1=o["adam_b1"], b2=o["adam_b2"], eps=o["adam_eps"],
                        weight_decay=o["weight_decay"])
    return optax.chain(optax.clip_by_global_norm(o["max_grad_norm"]), adamw) if o["max_grad_norm"] > 0 else adamw


def _block_on_model(model):
    jax.block_until_ready(jax.tree.leaves(nnx.state(model, nnx.Param)))


def run_setting(spec, setting, mesh):
    m, warmup, repeats = spec["model"], spec["warmup"], spec["repeats"]
    steps = warmup + repeats
    actor, reference = _model(m), _model(m)  # same seed: the reference starts equal to the policy
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(actor, nnx.Param)))
    cluster_config = rc.ClusterConfig(
        role_to_mesh={rc.Role.ACTOR: mesh, rc.Role.REFERENCE: mesh, rc.Role.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=rc.RLTrainingConfig(actor_optimizer=_optimizer(spec["optimizer"]),
                                            eval_every_n_steps=10_000, max_steps=steps, pbar_description=None),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=setting["new"], max_prompt_length=setting["prompt"],
            kv_cache_size=setting["cache"], temperature=spec["temperature"], top_p=1.0, top_k=None,
            eos_tokens=[-1]))  # no token stops a row: every completion has exactly `new` tokens
    cluster = rc.RLCluster(actor=actor, reference=reference, tokenizer=CountingTokenizer(),
                           cluster_config=cluster_config)
    algo = grpo.GRPOConfig(num_generations=setting["generations"], num_iterations=1, beta=spec["kl_beta"],
                           epsilon=spec["clip_eps"], kl_loss_mode="low_var_kl",  # k3, as ours
                           loss_agg_mode="sequence-mean-token-mean")  # = our "sequence_mean"
    learner = grpo.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=even_token_reward)

    # Wrap update_actor (the learner looks it up on the instance) to time it and keep its batch.
    update_times, step_ends, captured = [], [], []
    update_actor = cluster.update_actor

    def timed_update_actor(train_ds, eval_ds, skip_jit=False):
        start = time.perf_counter()
        update_actor(train_ds, eval_ds, skip_jit)
        _block_on_model(cluster.actor_trainer.model)
        end = time.perf_counter()
        update_times.append(end - start)
        step_ends.append(end)
        captured.append(train_ds)

    cluster.update_actor = timed_update_actor
    # Rollout and reference log-probs, for the breakdown (the latter blocks until ready).
    phase_times = {"rollout": [], "reference": []}

    def timed(name, fn, block):
        def call(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if block:
                jax.block_until_ready(out)
            phase_times[name].append(time.perf_counter() - start)
            return out
        return call

    cluster.generate = timed("rollout", cluster.generate, block=False)  # returns host tokens
    cluster.get_ref_per_token_logps = timed("reference", cluster.get_ref_per_token_logps, block=True)
    # Tunix adds BOS, so prompt - 1 text tokens give `prompt` tokens (no padding).
    prompts = [" ".join(f"t{3 + (row * 7 + i) % (m['vocab_size'] - 3)}" for i in range(setting["prompt"] - 1))
               for row in range(setting["prompts"])]
    dataset = [{"prompts": np.array(prompts)} for _ in range(steps)]  # an array: Tunix np.repeat-s it G times
    learner.train(dataset)
    if len(step_ends) != steps:
        raise RuntimeError(f"expected {steps} updates, saw {len(step_ends)}")
    whole = [b - a for a, b in zip(step_ends[warmup - 1:-1], step_ends[warmup:])]
    trainer_update = update_times[warmup:]

    # The compiled update alone, on the last prepared batch (already on device).
    trainer = cluster.actor_trainer
    train_step, _ = trainer.jit_train_and_eval_step(skip_jit=False, cache_nnx_graph=True)
    example = captured[-1][0]
    example = sharding_utils.shard_input(trainer._prepare_inputs(example), trainer.config.data_sharding_axis)
    jitted = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        jax.block_until_ready(train_step(example))
        _block_on_model(trainer.model)
        if i >= warmup:
            jitted.append(time.perf_counter() - start)

    return {**setting, "n_params": int(n_params), "repeats": repeats,
            "whole_s": statistics.median(whole), "trainer_update_s": statistics.median(trainer_update),
            "jitted_update_s": statistics.median(jitted),
            "rollout_all_s": phase_times["rollout"][warmup:], "reference_all_s": phase_times["reference"][warmup:],
            "whole_all_s": whole, "trainer_update_all_s": trainer_update, "jitted_update_all_s": jitted,
            "prompt_shape": list(example.prompt_ids.shape), "completion_shape": list(example.completion_ids.shape),
            "loss_tokens": int(example.completion_mask.sum()),
            "has_ref_logps": example.ref_per_token_logps is not None,
            "has_old_logps": example.old_per_token_logps is not None}


def main() -> None:
    spec = json.loads(sys.argv[1])
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    results = []
    with jax.set_mesh(mesh):
        for setting in spec["settings"]:
            results.append(run_setting(spec, setting, mesh))
    print(json.dumps({"jax": jax.__version__, "results": results}))


if __name__ == "__main__":
    main()
