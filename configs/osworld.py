"""OSWorld-format desktop tasks (reference: configs/osworld_rl.yaml; ALGORITHM.md 5.1).

A Qwen3-VL policy acts on desktops from screenshots (the last 3, resized with smart_resize), a
Qwen3-VL reward model judges every step m = 3 times from the screenshots before and after it, and
a frozen text LLM rewrites tasks (another evaluator key, or more or fewer hints).

Variants:
- `paper` (default): the reference's constants on OSWorld VM servers (`tasks.endpoints`) with local
  Hugging Face directories of Qwen3-VL-8B-Thinking and Qwen3-8B. Without them it stops at start-up
  and says what to provide.
- `local`: the same loop on one accelerator host, with local desktop sessions and the bundled tasks.
- `cpu`: a small random Qwen3-VL built from the run's own text, 4 local desktops at 640x360, the
  bundled tasks, a warm start on the scripted experts, then a few RLAnything steps (2 CPU cores).
- `smoke`: the cpu run cut to 1 step without warm start (tests).
"""

from configs import common

VARIANTS = ("paper", "local", "cpu", "smoke")


def paper_constants(cfg) -> None:
    cfg.loop.update(total_steps=400, save_every=20, eval_every=20)
    # A turn's prompt holds 3 screenshots (2,040 tokens each at 1920x1080), the two previous answers (up to
    # 4,096 tokens each, as sampled) and the instructions: 16,384 tokens hold them, so an episode never dies of a
    # full context (the reference's vLLM has the model's whole context); training drops the steps whose prompt
    # is over train.policy.max_prompt_tokens (8,192), as the reference skips them (docs/deviations.md).
    cfg.rollout.update(tasks_per_step=12, group_size=8, max_turns=30, temperature=1.0, top_p=0.9,
                       max_new_tokens=4096, max_prompt_tokens=16384)
    cfg.reward.update(num_judgments=3, temperature=0.8, top_p=1.0, max_new_tokens=8096)
    cfg.curriculum.update(candidates_per_task=3, temperature=0.8, max_new_tokens=8096)
    # The reference keeps every task for the policy (no --acc-lower/--acc-upper): all-fail and all-success
    # groups still learn from the reward model's step scores.
    cfg.train.update(policy_acc_low=0.0, policy_acc_high=1.0)
    cfg.train.policy.update(updates_per_step=4, max_prompt_tokens=8192, max_response_tokens=4096)
    cfg.train.reward.update(updates_per_step=2, max_prompt_tokens=8192, max_response_tokens=8096)
    cfg.eval.update(group_size=3, temperature=0.0, max_turns=30)
    cfg.tasks.update(max_steps=30)
    cfg.env.update(num_train_tasks=36, num_eval_tasks=19, step_timeout_s=180.0)
    common.use_8b_models(cfg, "checkpoints/Qwen3-VL-8B-Thinking", "checkpoints/Qwen3-VL-8B-Thinking",
                         "checkpoints/Qwen3-8B")


def cpu_run(cfg) -> None:
    """Small enough for 2 CPU cores: ~80 image tokens per screenshot, 3-step episodes, 4 desktops at once."""
    common.use_float32_models(cfg)
    for role in ("policy", "reward"):
        cfg.model[role].path = "scratch_vl"
    for role in ("policy", "reward", "environment"):
        cfg.model[role].scan_layers = False   # 2 layers: nothing to gain, and XLA:CPU decodes unrolled faster
    cfg.model.scratch.update(num_layers=2, hidden_size=128, intermediate_size=256, num_heads=4, num_kv_heads=2,
                             head_dim=32, vocab_size=2048)
    # Four task families and infeasible requests: the warm start's tasks are the pool's families with other
    # seeds (a 2-layer model from scratch learns a family from its demonstrations, not a new one).
    cfg.tasks.update(provider="local", screen_width=640, screen_height=360, max_pixels=352 * 192, max_steps=3,
                     settle_s=0.3, families="make-dirs,rename-dir,write-file,infeasible")
    cfg.env.update(num_train_tasks=4, num_eval_tasks=4, workers=2, step_timeout_s=120.0)
    cfg.loop.update(total_steps=5, save_every=1, eval_every=5)
    # 192 new tokens: the bundled experts' longest answer is 188 tokens of the run's own tokenizer.
    # Two cohorts of 2 slots: one's desktops act, settle and take screenshots while the other decodes.
    cfg.rollout.update(tasks_per_step=2, group_size=2, max_turns=3, max_new_tokens=192, max_prompt_tokens=2048,
                       max_live_episodes=4, overlap_env_steps=True)
    cfg.reward.update(num_judgments=3, max_new_tokens=32, temperature=0.8, top_p=1.0)
    cfg.eval.update(group_size=1, temperature=0.0, max_turns=3, judge_probe_tasks=2)
    cfg.curriculum.generator = "procedural"
    cfg.warm_start.update(enabled=True, num_tasks=6, policy_epochs=30, reward_epochs=10, learning_rate=1e-3,
                          batch_size=4, negatives_per_step=1)
    for role in ("policy", "reward"):
        cfg.train[role].update(learning_rate=1e-4, updates_per_step=1, micro_batch_size=4, max_prompt_tokens=2048,
                               max_response_tokens=200, aggregation="token_mean")


def get_config(variant: str = "paper"):
    common.check_variant("configs/osworld.py", variant, VARIANTS)
    cfg = common.base_config("osworld")
    paper_constants(cfg)
    if variant == "local":
        cfg.tasks.provider = "local"
        cfg.env.update(workers=8)
        cfg.rollout.max_live_episodes = 16   # local desktops cost ~200 MB and a core's share each
        cfg.rollout.overlap_env_steps = True   # a desktop step (action, settle, screenshot) takes ~0.5-1.5 s
        # Refilled slots on every platform: "auto" plays waves on CPUs (measured faster for text games, whose
        # steps are cheap), but a wave waits for its slowest desktop while the ended ones idle.
        cfg.rollout.continuous_batching = True
    if variant in ("cpu", "smoke"):
        cpu_run(cfg)
    if variant == "smoke":
        cfg.loop.update(total_steps=1, eval_every=1)
        cfg.warm_start.enabled = False
        cfg.eval.update(judge_probe_tasks=0)
        cfg.env.update(num_eval_tasks=1)
    return cfg
