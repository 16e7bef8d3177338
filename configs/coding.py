"""Coding with unit tests (reference: configs/coding_rl.yaml).

Single-turn: G = 32 responses per task, the RM writes unit tests instead of judging steps.
Variants: `paper` (4 nodes), `cpu` (HumanEval on the packaged model).
"""

from configs import common

VARIANTS = ("paper", "cpu")


def get_config(variant: str = "paper"):
    common.check_variant("configs/coding.py", variant, VARIANTS)
    cfg = common.base_config("coding")
    cfg.loop.update(total_steps=300, save_every=30, eval_every=10)
    cfg.rollout.update(tasks_per_step=64, group_size=32, max_turns=1, temperature=1.0, top_p=1.0,
                       max_new_tokens=2048)
    cfg.reward.update(num_judgments=16, max_new_tokens=2048)   # m = unit tests written per task
    cfg.curriculum.update(candidates_per_task=3, max_new_tokens=8096)
    cfg.train.update(policy_acc_low=0.2, policy_acc_high=0.8)
    cfg.train.policy.updates_per_step = 2
    cfg.train.reward.update(updates_per_step=2, max_response_tokens=4096)
    cfg.env.update(kind="coding", task_types="humaneval", num_train_tasks=128, num_eval_tasks=36, knobs={})
    if variant == "paper":
        cfg.model.policy.path = "checkpoints/Qwen2.5-7B-Instruct"
        cfg.model.reward.path = "checkpoints/Qwen2.5-7B-Instruct"
        cfg.model.environment.path = "checkpoints/Qwen3-8B"
    else:
        common.use_float32_models(cfg)
        cfg.loop.update(total_steps=4, save_every=2, eval_every=2)
        cfg.rollout.update(tasks_per_step=2, group_size=4, max_new_tokens=128)
        cfg.reward.update(num_judgments=4, max_new_tokens=128)
        cfg.env.update(task_types="stdio", num_train_tasks=4, num_eval_tasks=1)
    return cfg
