"""The walk scenario's config: small scratch models, 2 RL steps (tests/test_new_scenario.py)."""

import tests.walk_scenario  # noqa: F401  (registers the scenario)
from configs import common


def get_config(variant: str = "smoke"):
    common.check_variant("tests/walk_scenario/config.py", variant, ("smoke",))
    cfg = common.base_config("walk")
    common.smoke(cfg)
    cfg.rollout.max_turns = 6
    cfg.eval.max_turns = 6
    cfg.curriculum.generator = "procedural"
    cfg.warm_start.update(enabled=True, num_tasks=4, policy_epochs=2, reward_epochs=1, learning_rate=1e-3,
                          batch_size=8)
    cfg.eval.judge_probe_tasks = 1
    cfg.workdir = "runs/walk"
    return cfg
