"""A run meant to show learning on 2 CPU cores (issue 33): the packaged SmolLM2-135M-Instruct as the policy and
the reward model, each with its own LoRA adapters on one shared base, on TextWorld's coin collector at level 2
with numbered choices and a one-line instruction (`prompt_style="numbered_choice"`).

Why this task (step 0, `python -m rlanything_jax.evaluate`, 8 held-out games x 4 rollouts, temperature 0.8,
2026-12-06; docs/results.md): with the numbered-choice prompt SmolLM2 wins level 2 in 0.25 of its rollouts
within 6 turns (pass@4 0.75), level 3 in 0.05-0.19 within 12 turns; level 1 every time. Level 2 has an RL signal
in most groups and its episodes are short, which is what a 2-core machine can afford: every token SmolLM2 reads
costs about 2 ms to prefill and three times that to train on.

Held-out games are generated from seeds the pool never uses; the warm start trains the reward model only (on
the expert's labelled steps of training games), so the policy's start is SmolLM2 itself.

Variants: `default` (the run) and `smoke` (2 short steps: what the tests run).
"""

from configs import common

VARIANTS = ("default", "smoke")
LORA = {"rank": 16, "alpha": 32.0, "dropout": 0.0,
        "targets": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}


def get_config(variant: str = "default"):
    common.check_variant("configs/learn.py", variant, VARIANTS)
    cfg = common.base_config("textworld")
    common.use_float32_models(cfg)
    cfg.workdir = "runs/learn"
    cfg.tasks.update(task_types="coin_collector", knobs={"level": 2}, prompt_style="numbered_choice")
    cfg.curriculum.update(generator="procedural", candidates_per_task=2)
    cfg.model.reward.share_base = True
    cfg.env.update(num_train_tasks=32, num_eval_tasks=16)
    cfg.loop.update(total_steps=6, save_every=2, eval_every=3)
    # An answer is a number: 6 tokens hold it and its end of turn; a judgment is \boxed{1} or \boxed{-1}.
    cfg.rollout.update(tasks_per_step=4, group_size=4, max_turns=6, max_new_tokens=6, max_prompt_tokens=1024)
    cfg.reward.update(max_new_tokens=10, num_judgments=3)
    cfg.eval.update(group_size=4, max_turns=6, judge_probe_tasks=4)
    # The warm start teaches the reward model's adapters the judgment format on the expert's labelled steps of
    # games the pool and the held-out set never use (2 epochs at 1e-3: token NLL 0.39 after the first).
    cfg.warm_start.update(enabled=True, num_tasks=16, policy_epochs=0, reward_epochs=2, learning_rate=1e-3)
    for role in ("policy", "reward"):
        # A packed 6-turn episode is about 800 tokens: micro-batches of 4 without remat ran a 24 GB machine out
        # of memory in a step with 24 episodes (as did 8 packed rows of 12 turns); 2 rows, remat full.
        cfg.train[role].update(learning_rate=1e-4, updates_per_step=2, micro_batch_size=2, max_prompt_tokens=1024,
                               max_response_tokens=128, aggregation="token_mean", remat="full")
        cfg.train[role].lora.update(LORA)
    cfg.train.policy.learning_rate = 3e-4
    if variant == "smoke":
        cfg.loop.update(total_steps=2, save_every=1, eval_every=2)
        cfg.rollout.update(tasks_per_step=1, group_size=2, max_turns=3)
        cfg.reward.update(num_judgments=2)
        cfg.env.update(num_train_tasks=2, num_eval_tasks=1)
        cfg.eval.update(group_size=1, max_turns=3, judge_probe_tasks=1)
        cfg.warm_start.update(num_tasks=2, reward_epochs=1)
    return cfg
