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
    # Enough warm start that the policy walks and the judge reads its steps (token NLL about 0.05).
    cfg.warm_start.update(enabled=True, num_tasks=4, policy_epochs=10, reward_epochs=4, learning_rate=3e-3,
                          batch_size=8)
    # Every task's rollouts are policy data (the reference's OSWorld band): a warm-started walker wins most
    # groups, and the test wants an update in each step whatever the machine's sampling draws.
    cfg.train.update(policy_acc_low=0.0, policy_acc_high=1.0)
    cfg.eval.judge_probe_tasks = 1
    cfg.workdir = "runs/walk"
    return cfg
