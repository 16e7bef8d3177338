"""ALFWorld-style text games (reference: configs/alfworld_rl.yaml).

Variants: `paper` (the reference's constants, Qwen2.5-7B-Instruct policy),
`cpu` (a small run on the packaged model), `tpu_v5e_64` (paper constants on a v5e-64 pod).
"""

from configs import common

VARIANTS = ("paper", "cpu", "tpu_v5e_64")


def get_config(variant: str = "paper"):
    common.check_variant("configs/alfworld.py", variant, VARIANTS)
    cfg = common.base_config("alfworld")
    if variant in ("paper", "tpu_v5e_64"):
        cfg.model.policy.path = "checkpoints/Qwen2.5-7B-Instruct"
        cfg.model.reward.path = "checkpoints/Qwen2.5-7B-Instruct"
        cfg.model.environment.path = "checkpoints/Qwen3-8B"
    if variant == "tpu_v5e_64":
        cfg.mesh.shape = {"data": 4, "fsdp": 4, "tensor": 4}
    if variant == "cpu":
        common.use_float32_models(cfg)
        cfg.loop.update(total_steps=10, save_every=5, eval_every=5)
        cfg.rollout.update(tasks_per_step=2, group_size=4, max_turns=8, max_new_tokens=96)
        cfg.reward.max_new_tokens = 96
        cfg.curriculum.update(candidates_per_task=2, max_new_tokens=128)
    return cfg
