"""Where the samplers and the learners run: on the same devices, or on two disjoint groups.

`colocated` (the reference's way, the default): the policy and reward-model samplers and learners share
every device and take turns. `split`: each process's local devices are cut in two halves, the learners
get the first and the samplers the second, so that both sub-meshes still span every process (every
process takes part in every program, as multi-controller JAX requires). The sampler mesh is the learner
mesh with each device replaced by its partner in the same process, so an array laid out alike on both
meshes moves learner -> sampler by device-to-device copies inside each process
(`multihost.to_device`), with no host round trip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from rlanything_jax.core import sharding

PLACEMENTS = ("colocated", "split")


@dataclasses.dataclass(frozen=True)
class Meshes:
    learner: Mesh
    sampler: Mesh

    @property
    def split(self) -> bool:
        return self.learner is not self.sampler


def build_meshes(shape: Mapping[str, int], placement: str = "colocated",
                 devices: Sequence[jax.Device] | None = None) -> Meshes:
    """The learners' and the samplers' meshes, each of `shape` (an axis of -1 takes the group's rest)."""
    devices = list(devices if devices is not None else jax.devices())
    if placement == "colocated":
        mesh = sharding.build_mesh(shape, devices)
        return Meshes(learner=mesh, sampler=mesh)
    if placement != "split":
        raise ValueError(f"mesh.placement must be one of {PLACEMENTS}, got {placement!r}")
    by_process: dict[int, list[jax.Device]] = {}
    for device in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(device.process_index, []).append(device)
    counts = {len(local) for local in by_process.values()}
    if len(counts) != 1 or counts.pop() % 2:
        raise ValueError("mesh.placement=split gives half of each process's devices to the learners and half to "
                         "the samplers: every process needs the same, even number of devices "
                         f"(got {[len(local) for local in by_process.values()]})")
    partner = {}
    learner_devices = []
    for local in by_process.values():
        half = len(local) // 2
        learner_devices += local[:half]
        partner.update(zip(local[:half], local[half:]))
    learner = sharding.build_mesh(shape, learner_devices)
    sampler_devices = np.vectorize(partner.__getitem__, otypes=[object])(learner.devices)
    return Meshes(learner=learner, sampler=Mesh(sampler_devices, learner.axis_names, axis_types=learner.axis_types))
