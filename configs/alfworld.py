"""ALFWorld-style text games (reference: configs/alfworld_rl.yaml).

Variants: `paper` (the reference's constants, Qwen2.5-7B-Instruct policy), `cpu` (a small run on
the packaged SmolLM2; not timed end to end: its start evaluation alone ran over 11 minutes on 2 cores,
issue 33; its phases print progress lines every 30 s), `tpu_v5e_64` (paper constants on a v5e-64 pod),
`scratch` (the embedded CPU run: small models built from scratch, warm-started on expert games, easy
pick-and-place games, procedural task rewrites), `smoke` (2 tiny steps in about a minute).

Games are generated (offline) unless `--config.tasks.data_dir=$ALFWORLD_DATA/json_2.1.1` names the official
ones (`alfworld-download`, which needs the internet): the pool and warm start then come from train/, the
held-out evaluation from valid_seen/ (split "eval_in_distribution"; env.num_eval_tasks of its 140 games)
and the split "eval_out_of_distribution" from valid_unseen/.
"""

from configs import common

VARIANTS = ("paper", "cpu", "tpu_v5e_64", "scratch", "smoke")


def get_config(variant: str = "paper"):
    common.check_variant("configs/alfworld.py", variant, VARIANTS)
    cfg = common.base_config("alfworld")
    if variant in ("paper", "tpu_v5e_64"):
        paper_constants(cfg)
    if variant == "tpu_v5e_64":
        # `python -m rlanything_jax.plan --config=configs/alfworld.py:tpu_v5e_64 --devices=64
        # --device_memory_gib=16 --analytic_only`: 6.2 GiB per device (policy train step), with the float32
        # master copies of bfloat16 parameters; 4 data replicas of a 16-way sharding (data 4, fsdp 4, tensor 4)
        # needed 18.2 GiB, and 16.2 GiB without remat before the copies.
        cfg.mesh.shape = {"data": 1, "fsdp": 16, "tensor": 4}
        cfg.train.policy.remat = "full"
        cfg.train.reward.remat = "full"
    if variant == "cpu":
        common.use_float32_models(cfg)
        cfg.loop.update(total_steps=10, save_every=5, eval_every=5)
        cfg.rollout.update(tasks_per_step=2, group_size=4, max_turns=8, max_new_tokens=96)
        cfg.reward.max_new_tokens = 96
        cfg.curriculum.update(candidates_per_task=2, max_new_tokens=128)
    if variant == "scratch":
        scratch_run(cfg)
    if variant == "smoke":
        common.smoke(cfg)
        easy_games(cfg)
        cfg.rollout.max_turns = 4
        cfg.eval.max_turns = 4
        cfg.curriculum.generator = "procedural"
    return cfg


def paper_constants(cfg) -> None:
    """The reference's models and what its ALFWorld config and code set beyond the sections' defaults
    (docs/deviations.md lists where these differ from it, and why)."""
    common.use_8b_models(cfg, "checkpoints/Qwen2.5-7B-Instruct", "checkpoints/Qwen2.5-7B-Instruct",
                         "checkpoints/Qwen3-8B")
    # Each turn's prompt holds the whole trajectory (about 40 tokens a turn: 516 at turn 7 of the expert's
    # games, about 2,700 at turn 60), within a dense cache bounded here; the reference's vLLM holds 20,000
    # tokens in a paged cache. Training drops the steps whose prompt is over train.policy.max_prompt_tokens.
    cfg.rollout.update(max_prompt_tokens=6144, stop_strings=("</answer>",))
    # Evaluation as the reference's RL loop runs it: 3 rollouts per task, 60 steps, temperature 0.8.
    cfg.eval.update(group_size=3, max_turns=60, temperature=0.8)


def easy_games(cfg) -> None:
    """Pick-and-place games in small rooms, with the compact prompts small scratch models can read."""
    cfg.tasks.update(task_types="pick_and_place_simple", prompt_style="compact",
                     knobs={"num_receptacles": 4, "num_distractors": 0, "target_instances": 1})


def scratch_run(cfg) -> None:
    """Small models built from the run's own text, trained in minutes on 2 CPU cores."""
    common.use_float32_models(cfg)
    for role in ("policy", "reward"):
        cfg.model[role].path = "scratch"
    easy_games(cfg)
    cfg.tasks.update(demonstrations="search", step_labels="search")
    cfg.env.update(num_train_tasks=32, num_eval_tasks=48)
    cfg.loop.update(total_steps=10, save_every=1, eval_every=5)
    cfg.rollout.update(tasks_per_step=8, group_size=4, max_turns=10, max_new_tokens=12, max_prompt_tokens=512,
                       temperature=1.0, top_p=1.0)
    cfg.reward.update(max_new_tokens=6, temperature=1.0, top_p=1.0)
    cfg.eval.update(group_size=2, temperature=1.0, max_turns=10, judge_probe_tasks=16)
    cfg.curriculum.generator = "procedural"
    cfg.warm_start.update(enabled=True, num_tasks=96, policy_epochs=12, reward_epochs=1, learning_rate=1e-3,
                          batch_size=8)
    for role in ("policy", "reward"):
        cfg.train[role].update(learning_rate=1e-4, updates_per_step=2, micro_batch_size=8, kl_beta=0.0,
                               max_prompt_tokens=512, max_response_tokens=512, aggregation="token_mean")
    cfg.train.reward.max_prompt_tokens = 1024   # judge prompts are judged whole (see common.smoke)
