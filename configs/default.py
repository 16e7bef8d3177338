"""The embedded CPU default: small packaged model, tiny batches, runs on a 2-core laptop.

`python -m rlanything_jax.main` uses this file when --config is not given.
"""

from configs import common


def get_config(variant: str = "cpu"):
    common.check_variant("configs/default.py", variant, ("cpu",))
    cfg = common.base_config("default")
    common.use_float32_models(cfg)
    cfg.loop.update(total_steps=4, save_every=2, eval_every=2)
    cfg.rollout.update(tasks_per_step=2, group_size=4, max_turns=6, max_new_tokens=64, max_prompt_tokens=1024)
    cfg.reward.max_new_tokens = 64
    cfg.curriculum.update(candidates_per_task=2, max_new_tokens=128)
    for role in ("policy", "reward"):
        cfg.train[role].update(updates_per_step=1, learning_rate=1e-5, max_prompt_tokens=1024,
                               max_response_tokens=64)
    cfg.demo.prompt = "What is the capital of France? Answer in one sentence."
    return cfg
