"""The shapes a run's programs take, derived from its config as the run's own code buckets them.

Train steps: `micro_batch_size` rows of `max_prompt_tokens + max_response_tokens` (rounded up as
`core/rl/data.collate` rounds a batch's width), in a scan of `micro_batches` micro-batches (the Learner's
path for more than one: it carries a gradient accumulator). Samplers: the rollout's rows (tasks x
group, or `max_live_episodes` slots) with a cache as `agents/rollout` sizes it, and the
judge's calls (`judging.BATCH_SIZE // m` prompts, each sampled m times). Images: a vision-language
model's (`VisionPlan`) screenshots per row (`tasks.image_history` for the policy, before and after a step for
the reward model), resized as the agent resizes them.
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.agents import judging
from rlanything_jax.core.models.family import VisionPlan
from rlanything_jax.core.rl.data import _bucket as train_width_bucket
from rlanything_jax.core.sampling.sampler import SamplerConfig, bucket_length
from rlanything_jax.system.config import RunConfig

ROLES = ("policy", "reward")


@dataclasses.dataclass(frozen=True)
class TrainShapes:
    rows: int                 # micro_batch_size
    micro_batches: int
    length: int               # L: the batch's width
    window: int               # W: the loss window (logits are computed there)
    image_patches: int = 0    # P per row (packed, bucketed); 0: text only


@dataclasses.dataclass(frozen=True)
class SamplerShapes:
    prefill_rows: int         # bucketed
    decode_rows: int          # bucketed (judging replicates each prompt m times after its prefill)
    prompt_length: int        # bucketed
    cache_length: int
    max_new_tokens: int
    min_window: int
    images_per_row: int = 0
    patches_per_image: int = 0   # bucketed, as the sampler's vision program sees one image
    image_tokens: int = 0        # of one image (its real patches / merge^2)


@dataclasses.dataclass(frozen=True)
class Workload:
    train: dict[str, TrainShapes]      # by role
    sampler: dict[str, SamplerShapes]  # by role


def screenshot_patches(cfg: RunConfig, vision: VisionPlan | None) -> int:
    """Patches of one screenshot as the model resizes it (0 for a text model or a scenario without screens)."""
    tasks = cfg.tasks
    if vision is None or not all(hasattr(tasks, key) for key in ("screen_width", "screen_height", "max_pixels")):
        return 0
    return vision.screenshot_patches(tasks.screen_height, tasks.screen_width, tasks.max_pixels)


def images_per_row(cfg: RunConfig, role: str, vision: VisionPlan | None) -> int:
    if not screenshot_patches(cfg, vision):
        return 0
    return getattr(cfg.tasks, "image_history", 1) if role == "policy" else 2   # the judge: before and after


def train_shapes(cfg: RunConfig, role: str, vision: VisionPlan | None, micro_batches: int) -> TrainShapes:
    train = getattr(cfg.train, role)
    length = train_width_bucket(train.max_prompt_tokens + train.max_response_tokens, 32)
    # A packed multi-turn episode has responses from its first turn on: its loss window is the whole row.
    multi_turn = role == "policy" and train.pack_turns and cfg.rollout.max_turns > 1
    window = length if multi_turn else min(length, train_width_bucket(train.max_response_tokens, 32))
    images = images_per_row(cfg, role, vision)
    patches = vision.bucket_patches(images * screenshot_patches(cfg, vision)) if images else 0
    return TrainShapes(rows=train.micro_batch_size, micro_batches=micro_batches, length=length, window=window,
                       image_patches=patches)


def sampler_shapes(cfg: RunConfig, role: str, vision: VisionPlan | None) -> SamplerShapes:
    rollout, config = cfg.rollout, SamplerConfig()
    images = images_per_row(cfg, role, vision)
    patches = vision.bucket_patches(screenshot_patches(cfg, vision)) if images else 0
    image_tokens = vision.image_tokens(screenshot_patches(cfg, vision)) if images else 0
    if role == "policy":
        episodes = rollout.tasks_per_step * rollout.group_size
        if rollout.max_live_episodes:   # slots refilled one episode at a time, or waves of whole tasks
            # The planner sizes accelerator meshes: "auto" refills slots there.
            slots = (rollout.max_live_episodes if rollout.refills_episodes("accelerator")
                     else max(1, rollout.max_live_episodes // rollout.group_size) * rollout.group_size)
            episodes = min(episodes, slots)
        rows = bucket_length(episodes, 1)
        prompt = bucket_length(rollout.max_prompt_tokens, 16)
        # assemble.sampler_for's limit, and agents/rollout's cache: room for two turns, a power of two below it.
        limit = max(2 * (rollout.max_prompt_tokens + rollout.max_new_tokens), 1024)
        wanted = min(2 * (prompt + rollout.max_new_tokens), limit)
        cache = config.min_window
        while cache < wanted:
            cache *= 2
        return SamplerShapes(rows, rows, prompt, min(cache, limit), rollout.max_new_tokens, config.min_window,
                             images, patches, image_tokens)
    m = cfg.reward.num_judgments
    prompts = max(1, judging.BATCH_SIZE // m)
    prompt = bucket_length(cfg.train.reward.max_prompt_tokens, 16)
    cache = bucket_length(prompt + cfg.reward.max_new_tokens, config.min_window)
    return SamplerShapes(bucket_length(prompts, 1), bucket_length(prompts * m, 1), prompt, cache,
                         cfg.reward.max_new_tokens, config.min_window, images, patches, image_tokens)


def workload(cfg: RunConfig, visions: dict[str, VisionPlan | None], micro_batches: int = 2) -> Workload:
    """The run's shapes; `visions`: each role's model's `VisionPlan` (None for a text model)."""
    return Workload(train={role: train_shapes(cfg, role, visions[role], micro_batches) for role in ROLES},
                    sampler={role: sampler_shapes(cfg, role, visions[role]) for role in ROLES})
