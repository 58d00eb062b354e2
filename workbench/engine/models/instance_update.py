"""Instance updates: a reload that changes only a version's instances updates it in place.

Follows Triton's ``ModelLifeCycle::AsyncLoad``: when a version is READY, its files are
unchanged (``IsModelVersionModified``) and the new config differs from the serving one only in
the fields that need no reload (``ConfigChangeRequiresReload``: ``instance_group`` and
``version_policy``), the serving model is updated (``UpdateModelConfig`` ->
``TritonModel::UpdateInstanceGroup``) instead of loaded again: each instance the new config
asks for reuses a serving instance with the same signature (the group's settings but its
name and count, and the device: ``EquivalentInInstanceConfig``), only the missing ones are
created, and the serving ones nothing asks for any more are removed. The version stays READY
throughout, with its statistics, response cache entries and live sequences.

This module decides (on the model-load thread); :mod:`workbench.engine.models.loader` creates the
added instances, the scheduler takes them in and retires the removed ones
(:class:`~workbench.scheduling.base.InstanceScheduler`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.backends.base import InstanceSpec, ModelInstance
from workbench.config.normalize import is_ensemble
from workbench.repository.snapshot import version_fingerprint
from workbench.stats.statistics import MemoryUsage


@dataclass(frozen=True, slots=True)
class ServingVersion:
    """A READY version as a reload compares it: the config it serves, the fingerprint of the
    folder and files it was loaded from (:func:`files_fingerprint`), and its instances now."""

    config: ModelConfig
    fingerprint: str
    instances: tuple[ModelInstance, ...]


@dataclass(slots=True)
class InstanceUpdate:
    """An update of one serving version: its new config, the instances created for it (not
    serving yet), the serving instances to remove, and the memory each added instance holds
    (in ``added`` order; the version's statistics follow the instances it has)."""

    config: ModelConfig
    added: list[ModelInstance] = field(default_factory=list)
    removed: list[ModelInstance] = field(default_factory=list)
    memory: list[list[MemoryUsage]] = field(default_factory=list)


def config_change_requires_reload(old: ModelConfig, new: ModelConfig) -> bool:
    """True when ``new`` differs from ``old`` in more than ``instance_group`` and
    ``version_policy`` (Triton's ``ConfigChangeRequiresReload``)."""
    left, right = ModelConfig(), ModelConfig()
    left.CopyFrom(old)
    right.CopyFrom(new)
    for config in (left, right):
        config.ClearField("instance_group")
        config.ClearField("version_policy")
    return bool(left != right)


def instance_signature(group: ModelInstanceGroup, device_id: int) -> bytes:
    """What makes two instances interchangeable: the group's settings but its name and count,
    and the device (Triton's instance ``Signature``)."""
    settings = ModelInstanceGroup()
    settings.CopyFrom(group)
    settings.ClearField("name")
    settings.ClearField("count")
    return settings.SerializeToString(deterministic=True) + b"@" + str(device_id).encode()


def files_fingerprint(version_dir: Path) -> str:
    """Blocking: the version folder's path and the digest of what the version loads besides
    its config (:func:`~workbench.repository.snapshot.version_fingerprint`)."""
    return f"{version_dir}\0{version_fingerprint(version_dir.parent, version_dir)}"


def can_update(serving: ServingVersion | None, fingerprint: str, config: ModelConfig) -> bool:
    """True when the version ``serving`` describes can take ``config`` in place: same folder
    and files (``fingerprint``), no ensemble, and no change that requires a reload."""
    return (
        serving is not None and bool(fingerprint) and serving.fingerprint == fingerprint
        and not is_ensemble(config) and not config_change_requires_reload(serving.config, config)
    )


def plan_instances(
    specs: Sequence[InstanceSpec], serving: Sequence[ModelInstance]
) -> tuple[list[InstanceSpec], list[ModelInstance]]:
    """``(specs to create, serving instances to remove)``: each spec reuses the first serving
    instance with its signature not reused yet; the serving instances left over are removed."""
    free = list(serving)
    create: list[InstanceSpec] = []
    for spec in specs:
        match = next((i for i in free if i.spec.signature == spec.signature), None)
        if match is None:
            create.append(spec)
        else:
            free.remove(match)
    return create, free


__all__ = [
    "InstanceUpdate",
    "ServingVersion",
    "can_update",
    "config_change_requires_reload",
    "files_fingerprint",
    "instance_signature",
    "plan_instances",
]
