"""OSWorld-format desktop tasks (reference: configs/osworld_rl.yaml).

Variants: `paper` (Qwen3-VL-8B-Thinking policy and RM, 12 x 8 GPUs), `cpu`.
"""

from configs import common

VARIANTS = ("paper", "cpu")


def get_config(variant: str = "paper"):
    common.check_variant("configs/osworld.py", variant, VARIANTS)
    cfg = common.base_config("osworld")
    cfg.env.update(kind="osworld", task_types="", knobs={})
    cfg.loop.update(total_steps=400, save_every=20, eval_every=20)
    cfg.rollout.update(tasks_per_step=12, group_size=8, max_turns=30, temperature=1.0, top_p=0.9,
                       max_new_tokens=4096, max_prompt_tokens=8192)
    cfg.reward.update(top_p=1.0, max_new_tokens=8096)
    cfg.curriculum.update(candidates_per_task=3, max_new_tokens=8096)
    # The reference keeps every task for policy data (no accuracy filter).
    cfg.train.update(policy_acc_low=0.0, policy_acc_high=1.0)
    cfg.train.policy.update(updates_per_step=4, max_prompt_tokens=8192, max_response_tokens=4096)
    cfg.train.reward.update(updates_per_step=2, max_prompt_tokens=8192, max_response_tokens=8096)
    if variant == "paper":
        cfg.model.policy.path = "checkpoints/Qwen3-VL-8B-Thinking"
        cfg.model.reward.path = "checkpoints/Qwen3-VL-8B-Thinking"
        cfg.model.environment.path = "checkpoints/Qwen3-8B"
    else:
        common.use_float32_models(cfg)
        cfg.loop.update(total_steps=4, save_every=2, eval_every=2)
        cfg.rollout.update(tasks_per_step=1, group_size=2, max_turns=4, max_new_tokens=96,
                           max_prompt_tokens=2048)
        cfg.reward.max_new_tokens = 96
    return cfg
