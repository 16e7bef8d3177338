"""The run's per-device memory on paper: what stays resident, what each program adds, and what to change.

Resident between programs (colocated placement, as system/run.py builds it): each learner's train state
(parameters, Adam moments, a frozen reference copy when kl_reference="initial"), the samplers sharing
their learner's parameter buffers (system/run.py hands the learned ones over after each phase), and the frozen
environment model's parameters when the curriculum rewrites tasks with it. Each program adds its own
working set on top; the run's peak is the largest sum.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.system.config import RunConfig
from rlanything_jax.system.planning import analytic
from rlanything_jax.system.planning.architectures import Architecture
from rlanything_jax.system.planning.workload import ROLES, Workload, workload

_ITEMSIZE = {"float32": 4, "bfloat16": 2}


@dataclasses.dataclass(frozen=True)
class Model:
    """A role's architecture and abstract parameters (full depth)."""

    arch: Architecture
    params: object


@dataclasses.dataclass(frozen=True)
class Estimate:
    resident: dict      # "policy parameters" -> bytes, ...
    programs: dict      # "policy train step" -> {"activations": bytes, ...}
    resident_of: dict   # program -> the resident entries that are its own arguments

    @property
    def resident_bytes(self) -> int:
        return sum(self.resident.values())

    def total(self, program: str) -> int:
        return self.resident_bytes + sum(self.programs[program].values())

    @property
    def peak(self) -> tuple[str, int]:
        name = max(self.programs, key=self.total)
        return name, self.total(name)


def uses_environment_model(cfg: RunConfig) -> bool:
    return (cfg.curriculum.enabled and cfg.curriculum.generator == "env_model"
            and cfg.ablation_switches.adapt_environment)


def estimate(cfg: RunConfig, models: dict, num_devices: int, micro_batches: int = 2,
             load: Workload | None = None) -> Estimate:
    """`models`: role -> Model for "policy" and "reward" (and "environment" when the curriculum uses it)."""
    mesh = analytic.Mesh(sharding_lib.mesh_axis_sizes(dict(cfg.mesh.shape), num_devices),
                         tuple(cfg.sharding.logical_axis_rules))
    load = load or workload(cfg, {role: models[role].arch.vision for role in ROLES}, micro_batches)
    resident, programs, resident_of = {}, {}, {}
    for role in ROLES:
        model, train_cfg = models[role], getattr(cfg.train, role)
        compute = _ITEMSIZE[getattr(cfg.model, role).compute_dtype]
        shapes = load.train[role]
        vision_params = () if model.arch.vision is None else model.arch.vision.vision_params
        learner = analytic.learner_bytes(model.params, mesh, train_cfg, shapes.micro_batches, cfg.model.freeze_vision,
                                         vision_params)
        resident[f"{role} parameters"] = learner.parameters
        resident[f"{role} optimizer"] = learner.optimizer
        if learner.master:
            resident[f"{role} master copy"] = learner.master
        if learner.reference:
            resident[f"{role} reference"] = learner.reference
        programs[f"{role} train step"] = {
            "gradients": learner.gradients,
            "activations": analytic.train_activation_bytes(
                model.arch, shapes, mesh, compute, train_cfg.remat,
                dense_attention=getattr(cfg.model, role).attention_impl == "xla"),
            "images": analytic.train_image_bytes(model.arch, shapes, mesh, compute, cfg.model.freeze_vision,
                                                 train_cfg.remat)}
        resident_of[f"{role} train step"] = [k for k in resident if k.startswith(role)]
        sampling = load.sampler[role]
        vocab = model.arch.text.vocab_size
        programs[f"{role} prefill"] = {
            "kv cache": analytic.kv_cache_bytes(model.arch, sampling.prefill_rows, sampling.cache_length, mesh,
                                                compute),
            "activations": analytic.prefill_activation_bytes(model.arch, sampling, mesh, compute),
            "images": analytic.sampler_image_bytes(model.arch, sampling, compute)}
        programs[f"{role} decode"] = {
            "kv cache": analytic.kv_cache_bytes(model.arch, sampling.decode_rows, sampling.cache_length, mesh,
                                                compute),
            "logits": 2 * analytic.rows_per_device(sampling.decode_rows, mesh) * vocab * 4}
        resident_of[f"{role} prefill"] = resident_of[f"{role} decode"] = [f"{role} parameters"]
    if "environment" in models and uses_environment_model(cfg):
        resident["environment parameters"] = analytic.per_device_bytes(models["environment"].params, mesh)
    return Estimate(resident, programs, resident_of)


# ---------------------------------------------------------------- what to change

# Slice and node sizes: multiples of 8 (GPU nodes) that are also common TPU slice sizes.
DEVICE_COUNTS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096)


@dataclasses.dataclass(frozen=True)
class Suggestion:
    overrides: tuple[str, ...]   # --config.KEY=VALUE settings (without the prefix)
    devices: int
    peak_bytes: int
    program: str


def mesh_override(sizes: dict) -> str:
    return f"mesh.shape={{'data': {sizes['data']}, 'fsdp': {sizes['fsdp']}, 'tensor': {sizes['tensor']}}}"


def mesh_candidates(num_devices: int) -> list[str]:
    """Meshes worth trying: tensor 1, 2, 4 or 8 (it shards attention heads, KV-cache heads, MLP and vocabulary,
    which fsdp leaves whole); fsdp the largest power of two left, since model dims are powers of two times
    small factors and an axis that does not divide a dim leaves it whole; data the rest."""
    out = []
    for tensor in (1, 2, 4, 8):
        if num_devices % tensor:
            continue
        rest = num_devices // tensor
        fsdp = rest & -rest
        out.append(mesh_override({"data": rest // fsdp, "fsdp": fsdp, "tensor": tensor}))
    return out


def candidate_changes(cfg: RunConfig, num_devices: int, over_budget: set[str]) -> list[tuple[str, ...]]:
    """Settings that shrink the programs over budget or the resident state: each alone, then the
    activation checkpointing of every over-budget train step together with each mesh."""
    changes: list[tuple[str, ...]] = []
    sizes = sharding_lib.mesh_axis_sizes(dict(cfg.mesh.shape), num_devices)
    remat = []
    for role in ROLES:
        train = getattr(cfg.train, role)
        if f"{role} train step" in over_budget and train.remat != "full":
            remat.append(f"train.{role}.remat=full")
        if f"{role} train step" in over_budget and train.micro_batch_size > 1:
            changes.append((f"train.{role}.micro_batch_size=1",))
    changes += [(r,) for r in remat]
    meshes = [m for m in mesh_candidates(num_devices) if m != mesh_override(sizes)]
    changes += [(m,) for m in meshes]
    if remat:
        changes += [tuple(remat) + (m,) for m in meshes]
    if over_budget & {"policy prefill", "policy decode"}:
        rows = cfg.rollout.max_live_episodes or cfg.rollout.tasks_per_step * cfg.rollout.group_size
        changes += [(f"rollout.max_live_episodes={live}",) for live in (rows // 2, rows // 4)
                    if live >= cfg.rollout.group_size]
    return changes


def suggest(cfg: RunConfig, reload, models: dict, num_devices: int, budget_bytes: int,
            micro_batches: int, over_budget: set[str]) -> list[Suggestion]:
    """Each candidate change's estimated peak (`reload(overrides)` gives the config with them), best first;
    and the fewest devices of `DEVICE_COUNTS` (the mesh's -1 axis taking the rest) at which the config fits."""
    out = []
    for overrides in candidate_changes(cfg, num_devices, over_budget):
        changed = reload(overrides)
        try:
            program, peak = estimate(changed, models, num_devices, micro_batches).peak
        except ValueError:   # a mesh these devices cannot form
            continue
        out.append(Suggestion(overrides, num_devices, peak, program))
    # The fewest devices at which some mesh (with the checkpointing above when a train step is over) fits.
    remat = tuple(f"train.{role}.remat=full" for role in ROLES
                  if f"{role} train step" in over_budget and getattr(cfg.train, role).remat != "full")
    for devices in DEVICE_COUNTS:
        fitting = []
        for mesh in mesh_candidates(devices):
            program, peak = estimate(reload(remat + (mesh,)), models, devices, micro_batches).peak
            if peak <= budget_bytes:
                fitting.append(Suggestion(remat + (mesh,), devices, peak, program))
        if fitting:
            out.append(min(fitting, key=lambda s: s.peak_bytes))
            break
    return sorted(out, key=lambda s: s.peak_bytes)


def gib(value: float) -> str:
    return f"{value / analytic.GIB:.2f}"


def parameter_count(params) -> int:
    import jax

    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
