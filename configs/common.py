"""What every config file starts from, and small helpers the variants share.

The defaults (the reference's constants, ALGORITHM.md) are those of the typed sections in
`rlanything_jax/system/config_sections.py`; a scenario file changes what differs. Every key can be set from
the command line (`--config.rollout.group_size=4`).
"""

from __future__ import annotations

import ml_collections

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import default_config_dict
from rlanything_jax.system.config_sections import SMOLLM2  # noqa: F401  (SMOLLM2: for config files)


def base_config(scenario: str) -> ml_collections.ConfigDict:
    return default_config_dict(scenario)


def check_variant(config_file: str, variant: str, variants: tuple[str, ...]) -> None:
    if variant not in variants:
        raise ConfigError("variant", f"{config_file} has no such variant (variants: {', '.join(variants)})", variant)


def use_float32_models(cfg: ml_collections.ConfigDict) -> None:
    """CPUs have no fast bfloat16 matmuls: small runs keep every model in float32."""
    for role in ("policy", "reward", "environment"):
        cfg.model[role].update(dtype="float32", compute_dtype="float32")


def use_8b_models(cfg: ml_collections.ConfigDict, policy: str, reward: str, environment: str) -> None:
    """The paper's checkpoints, with stacked and scanned layers: 28-36 unrolled layers would make every
    program's compile time (and the planner's) grow with depth."""
    for role, path in (("policy", policy), ("reward", reward), ("environment", environment)):
        cfg.model[role].update(path=path, scan_layers=True)


def smoke(cfg: ml_collections.ConfigDict) -> None:
    """Tiny everything: 2 RL steps end to end in about a minute on a 2-core CPU (tests, multi-process checks)."""
    use_float32_models(cfg)
    for role in ("policy", "reward", "environment"):
        cfg.model[role].path = "scratch"
    cfg.model.scratch.update(num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1,
                             head_dim=32, vocab_size=512)
    cfg.loop.update(total_steps=2, save_every=1, eval_every=2)
    cfg.rollout.update(tasks_per_step=2, group_size=2, max_new_tokens=8, max_prompt_tokens=256, temperature=1.0,
                       top_p=1.0)
    cfg.reward.update(max_new_tokens=6, temperature=1.0, top_p=1.0)
    cfg.curriculum.update(candidates_per_task=2, max_new_tokens=32)
    cfg.env.update(num_train_tasks=4, num_eval_tasks=2, workers=1)
    cfg.eval.update(group_size=1, judge_probe_tasks=0)
    cfg.warm_start.update(enabled=False, num_tasks=2)
    for role in ("policy", "reward"):
        cfg.train[role].update(learning_rate=1e-4, updates_per_step=1, micro_batch_size=4, max_prompt_tokens=256,
                               max_response_tokens=64, aggregation="token_mean")
    # A judge prompt holds the policy's step prompt, its response and the next observation, and is judged
    # whole (never cut): the reward model trains on prompts that long, or it judges text it never saw.
    cfg.train.reward.max_prompt_tokens = 1024
