"""TextWorld text games (coin collector by default), with the ALFWorld text games' algorithm and prompts.

Variants: `cpu` (a small run on the packaged SmolLM2), `smoke` (2 tiny steps with scratch models).
"""

from configs import common

VARIANTS = ("cpu", "smoke")


def get_config(variant: str = "cpu"):
    common.check_variant("configs/textworld.py", variant, VARIANTS)
    cfg = common.base_config("textworld")
    cfg.tasks.update(task_types="coin_collector", knobs={"level": 1})
    cfg.curriculum.generator = "procedural"
    if variant == "cpu":
        common.use_float32_models(cfg)
        cfg.loop.update(total_steps=10, save_every=5, eval_every=5)
        cfg.rollout.update(tasks_per_step=2, group_size=4, max_turns=8, max_new_tokens=96)
        cfg.reward.max_new_tokens = 96
    if variant == "smoke":
        common.smoke(cfg)
        cfg.tasks.prompt_style = "compact"
        cfg.rollout.max_turns = 4
        cfg.eval.max_turns = 4
    return cfg
