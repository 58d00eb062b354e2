"""Load-time config overrides: try a version policy or batch settings without writing the
config file (Triton's load API with a ``config`` parameter).

"Try" versus "keep": the Models tab's version policy and the notebook widgets apply their
changes as a load of ``name`` with a full config JSON (:func:`override_config`); the file on
disk is untouched and a later plain load or "Reload" reads ``config.pbtxt`` again, as in
Triton. The Config tab is where a change is kept (``write_model_config``: validated atomic
write, backup, hot reload).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import ModelNotFound, ModelNotReady
from workbench.config_edits.knobs import ConfigKnobs, KnobValues, apply_knobs, parse_text, read_knobs

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from workbench.remote import AnyServer

#: version policy kinds (Triton's ``version_policy`` oneof)
POLICY_KINDS = ("latest", "all", "specific")


@dataclass(frozen=True)
class VersionPolicy:
    """A model's version policy.

    Attributes:
        kind: ``latest`` (the ``num_versions`` highest versions), ``all`` or ``specific``.
        num_versions: how many of the latest versions (``latest`` only; at least 1).
        versions: the versions to serve (``specific`` only; at least one).
    """

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def apply(self, config: ModelConfig) -> None:
        """Set ``config.version_policy`` to this policy.

        Raises:
            ValueError: an unknown kind, ``num_versions`` < 1, or ``specific`` without versions.
        """
        policy = config.version_policy
        if self.kind == "latest":
            if self.num_versions < 1:
                raise ValueError("latest: num_versions must be at least 1")
            policy.latest.num_versions = self.num_versions
        elif self.kind == "all":
            policy.all.SetInParent()
        elif self.kind == "specific":
            if not self.versions:
                raise ValueError("specific: name at least one version")
            del policy.specific.versions[:]
            policy.specific.versions.extend(self.versions)
        else:
            raise ValueError(f"version policy must be one of {POLICY_KINDS}, got '{self.kind}'")


def read_policy(config: ModelConfig) -> VersionPolicy:
    """The version policy ``config`` sets (Triton's default: the latest one version)."""
    which = config.version_policy.WhichOneof("policy_choice")
    if which == "all":
        return VersionPolicy("all")
    if which == "specific":
        return VersionPolicy("specific", versions=tuple(config.version_policy.specific.versions))
    if which == "latest":
        return VersionPolicy("latest", num_versions=config.version_policy.latest.num_versions)
    return VersionPolicy()


async def current_config(server: AnyServer, name: str) -> ModelConfig:
    """What ``name`` serves with now (its normalized config, overrides included) when a version
    is READY, otherwise its ``config.pbtxt`` as written (an empty config with its name when
    there is none: the engine auto-completes it).

    Raises:
        ModelNotFound: ``name`` is neither loaded nor a model folder of the repositories.
        google.protobuf.text_format.ParseError: not loaded, and its file does not parse.
    """
    try:
        served = await server.model_config(name)
    except (ModelNotFound, ModelNotReady):
        described = await server.config_files.model_config_file(name)
        return parse_text(described["text"]) if described["text"] else ModelConfig(name=name)
    config = ModelConfig()
    config.CopyFrom(served)
    return config


def override_config(config: ModelConfig, policy: VersionPolicy | None = None,
                    knobs: ConfigKnobs | None = None) -> dict:
    """``config`` with ``policy`` and ``knobs`` applied, as the load API's ``config`` JSON
    (fields left at their defaults are omitted).

    Raises:
        ValueError: as :meth:`VersionPolicy.apply` / ``apply_knobs``.
    """
    updated = apply_knobs(config, knobs) if knobs is not None else config
    if policy is not None:
        if updated is config:
            updated = ModelConfig()
            updated.CopyFrom(config)
        policy.apply(updated)
    return json_format.MessageToDict(updated, preserving_proto_field_name=True)


async def load_with(server: AnyServer, name: str, policy: VersionPolicy | None = None,
                    **knob_values: Unpack[KnobValues]) -> dict:
    """Reload ``name`` with its current config (:func:`current_config`) changed by ``policy``
    and knob values (``max_queue_delay_us=100``); the file is not written. Returns the
    config JSON loaded.

    Raises:
        ModelNotFound, ParseError: as :func:`current_config`.
        ValueError: a bad policy or knob value; TypeError: an unknown knob name.
        Unavailable: the server is not in explicit model control mode.
        InvalidArgument / InvalidModelConfig: the load failed (the serving versions stay).
    """
    config = await current_config(server, name)
    knobs = None
    if knob_values:
        knobs = replace(read_knobs(config), **knob_values)
    override = override_config(config, policy, knobs)
    await server.load_model(name, config=override)
    return override


__all__ = ["POLICY_KINDS", "VersionPolicy", "current_config", "load_with", "override_config",
           "read_policy"]
