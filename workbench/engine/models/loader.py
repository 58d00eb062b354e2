"""Blocking model loading: config (auto-complete, defaults, validation) then instances.

Runs on the model-load threads, never on the event loop. Follows Triton's
model lifecycle: a config error makes the whole model UNAVAILABLE with that
reason; a version whose instances fail to load is UNAVAILABLE with its own
reason while the other versions load. An ensemble (``platform: "ensemble"``) has
no backend and no instances: its versions load empty, and the engine checks it
against its composing models (:mod:`workbench.engine.models.ensembles`). A config with
``model_warmup`` samples runs them on each instance right after creating it
(:mod:`workbench.engine.models.warmup`); a failing sample makes the version UNAVAILABLE.
The instances of one version load on parallel threads (Triton's parallel instance
loading; a backend can opt out with ``Backend.parallel_instance_loading``); one that fails
makes the version UNAVAILABLE and the others are unloaded again.
A serving version whose reload changes only its instances is updated in place instead
(:mod:`workbench.engine.models.instance_update`): only the instances it lacks are created here.

Every file read here is opened as the poll's scan opens it (:mod:`workbench.files.model_files`:
regular files only, non-blocking, the small ones bounded in time and size), and a version
folder holding anything but regular files and folders is refused before a backend gets it
(:func:`check_files`): a FIFO never blocks a load thread, it fails that model with the reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendContext, InstanceSpec, ModelInstance
from workbench.backends.registry import backend_for, servable_backends
from workbench.common.errors import ModelLoadError, WorkbenchError
from workbench.common.frameworks import import_framework
from workbench.config.autocomplete import autocomplete_model_config
from workbench.config.model_config import read_model_config
from workbench.config.normalize import is_ensemble, normalize_model_config
from workbench.config.python_based import python_based_model_file
from workbench.config.validate import validate_model_config
from workbench.config.validate_ensemble import ENSEMBLE_PLATFORM
from workbench.config.versions import scan_version_dirs, select_versions
from workbench.engine.inference.classification import read_labels
from workbench.engine.models.instance_update import (
    InstanceUpdate,
    ServingVersion,
    can_update,
    files_fingerprint,
    instance_signature,
    plan_instances,
)
from workbench.engine.models.load_memory import LEDGER, Growth
from workbench.engine.models.warmup import WarmupSample, prepare_warmup, run_warmup
from workbench.files.model_files import check_model_tree
from workbench.gpu.devices import gpu_count
from workbench.scheduling.rate_limiter import ResourceKey, check_resources, explicit_pools
from workbench.startup.options import ServerOptions
from workbench.stats.statistics import MemoryUsage, merge_memory, sum_memory

log = logging.getLogger(__name__)

@dataclass(slots=True)
class LoadedVersion:
    """Result of loading one version: instances, or the reason it failed.

    ``load_ns``: nanoseconds spent preparing the model config plus creating this
    version's instances (Triton's ``nv_model_load_duration_secs``, in ns here).
    ``memory``: what the instances hold, summed per device (see :func:`measure_load`);
    ``instance_memory``: each instance's part of it, in ``instances`` order (what an instance
    update adds and takes away again).
    ``fingerprint``: the version's files as loaded
    (:func:`~workbench.repository.snapshot.version_fingerprint`; "" without a folder).
    ``update``: set when the version serves already and is updated in place (``instances``
    are then the instances added to it; :mod:`workbench.engine.models.instance_update`).
    """

    instances: list[ModelInstance] = field(default_factory=list)
    error: str = ""
    load_ns: int = 0
    memory: list[MemoryUsage] = field(default_factory=list)
    instance_memory: list[list[MemoryUsage]] = field(default_factory=list)
    fingerprint: str = ""
    update: InstanceUpdate | None = None


@dataclass(slots=True)
class LoadResult:
    """Result of loading one model (before schedulers exist).

    ``labels``: each output's classification labels (``label_filename``), by output name.
    ``chosen``: every version the version policy selects, ascending; ``versions`` holds
    those that were loaded (all of them, less the ones the caller keeps).
    """

    name: str
    config: ModelConfig | None = None
    versions: dict[int, LoadedVersion] = field(default_factory=dict)
    error: str = ""
    labels: dict[str, list[str]] = field(default_factory=dict)
    chosen: list[int] = field(default_factory=list)


def prepare_config(
    name: str, model_dir: Path | None, options: ServerOptions, override: ModelConfig | None
) -> ModelConfig:
    """Read (or take the override), auto-complete, fill defaults and validate a model config.

    Raises:
        InvalidModelConfig: the config cannot be read (a FIFO, larger than
            ``options.model_config_max_size``, no answer in time), parsed, or fails validation.
    """
    config = override
    if config is None and model_dir is not None:
        config = read_model_config(model_dir, options.model_config_name, options.model_config_max_size)
    config = autocomplete_model_config(
        config,
        name,
        model_dir if model_dir is not None else Path("/nonexistent"),
        strict=options.strict_model_config,
        default_max_batch_size=options.default_max_batch_size,
        backend_directory=options.backend_directory,
    )
    config = normalize_model_config(config, gpu_count=gpu_count())
    known = servable_backends() | {ENSEMBLE_PLATFORM}
    if python_based_model_file(config, options.backend_directory) is not None:
        known |= {config.backend}  # a Python-based backend of --backend-directory
    validate_model_config(config, name, known_backends=known)
    return config


def instance_specs(config: ModelConfig) -> list[InstanceSpec]:
    """Instances to create, named like Triton's (``<group>_<index>``, index per group)."""
    from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

    specs = []
    for group in config.instance_group:
        kind = ModelInstanceGroup.Kind.Name(group.kind)
        devices = list(group.gpus) if kind == "KIND_GPU" and group.gpus else [0]
        limits = group.rate_limiter
        resources = tuple((r.name, getattr(r, "global"), int(r.count)) for r in limits.resources)
        index = 0
        for device in devices:
            signature = instance_signature(group, device)
            for _ in range(max(1, group.count)):
                specs.append(InstanceSpec(f"{group.name}_{index}", group.name, kind, device,
                                          resources, int(limits.priority), signature))
                index += 1
    return specs


def load_model(
    name: str,
    model_dir: Path | None,
    options: ServerOptions,
    override: ModelConfig | None = None,
    context: BackendContext | None = None,
    keep: Collection[int] = (),
    on_versions: Callable[[list[int]], None] | None = None,
    serving: Mapping[int, ServingVersion] | None = None,
    registered_resources: Collection[ResourceKey] = (),
) -> LoadResult:
    """Load every version the version policy selects. Never raises for model errors.

    Args:
        context: handed to the backend (what a Python model's BLS calls go through).
        keep: versions the caller already serves unchanged: not loaded again even when
            selected (``chosen`` still lists them).
        on_versions: called (on this thread) with the versions about to be loaded, once the
            config is read and the policy applied: how the engine reports them LOADING.
        serving: the READY versions of the model now: one whose files are unchanged and
            whose config changes only in what needs no reload is updated, not loaded
            (its ``LoadedVersion.update``; :mod:`workbench.engine.models.instance_update`).
        registered_resources: the resources of the instances the rate limiter holds now
            (:func:`~workbench.scheduling.rate_limiter.check_resources`).

    ``model_warmup`` samples are prepared once (a bad sample or warmup file is a model-level
    error) and run on every instance of every version loaded before it is READY."""
    result = LoadResult(name)
    start = time.monotonic_ns()
    try:
        result.config = prepare_config(name, model_dir, options, override)
        result.labels = read_labels(result.config, model_dir)
        available = scan_version_dirs(model_dir) if model_dir is not None else {}
        chosen = select_versions(result.config, available)
        warmup = prepare_warmup(result.config, model_dir) if chosen else []
        if options.rate_limit == "execution_count":  # Triton refuses what it could never schedule
            check_resources(instance_specs(result.config), explicit_pools(options.rate_limit_resource),
                            registered_resources)
    except WorkbenchError as exc:
        result.error = exc.message
        return result
    if not chosen:
        result.error = f"failed to load '{name}', no version is available"
        return result
    result.chosen = list(chosen)
    to_load = [v for v in chosen if v not in keep]
    if on_versions is not None:
        on_versions(to_load)
    config_ns = time.monotonic_ns() - start
    for version in to_load:
        version_start = time.monotonic_ns()
        try:
            fingerprint = files_fingerprint(available[version]) if model_dir is not None else ""
        except OSError as exc:  # a tree too deep or too large to walk: that version's failure
            result.versions[version] = LoadedVersion(error=_version_error(name, version, exc))
            continue
        current = (serving or {}).get(version)
        if can_update(current, fingerprint, result.config):
            assert current is not None
            loaded = _update_version(result.config, available[version], context, warmup, current,
                                     options.backend_directory)
        else:
            loaded = _load_version(result.config, available[version], context, warmup,
                                   options.backend_directory)
            for retry in range(options.model_load_retry_count):  # Triton: --model-load-retry-count
                if not loaded.error:
                    break
                log.info("retrying the load of '%s' version %s (retry %d of %d)", name, version,
                         retry + 1, options.model_load_retry_count)
                loaded = _load_version(result.config, available[version], context, warmup,
                                       options.backend_directory)
        loaded.load_ns = config_ns + time.monotonic_ns() - version_start
        loaded.fingerprint = fingerprint
        result.versions[version] = loaded
    return result


def _load_version(
    config: ModelConfig,
    version_dir: Path,
    context: BackendContext | None,
    warmup: list[WarmupSample] | None = None,
    backend_directory: str = "",
) -> LoadedVersion:
    if is_ensemble(config):  # a scheduler over composing models; nothing to load
        return LoadedVersion()
    return _create_instances(config, version_dir, context, warmup, instance_specs(config), backend_directory)


def _update_version(
    config: ModelConfig,
    version_dir: Path,
    context: BackendContext | None,
    warmup: list[WarmupSample] | None,
    serving: ServingVersion,
    backend_directory: str = "",
) -> LoadedVersion:
    """Create only the instances ``serving`` lacks for ``config`` (an instance update); a
    failure fails the update as a whole (those created are unloaded again)."""
    create, removed = plan_instances(instance_specs(config), serving.instances)
    loaded = (_create_instances(config, version_dir, context, warmup, create, backend_directory)
              if create else LoadedVersion())
    if not loaded.error:
        loaded.update = InstanceUpdate(config, list(loaded.instances), removed, list(loaded.instance_memory))
        log.info("updating '%s' version %s in place: %d instance(s) added, %d removed",
                 config.name, version_dir.name, len(create), len(removed))
    return loaded


def _create_instances(
    config: ModelConfig,
    version_dir: Path,
    context: BackendContext | None,
    warmup: list[WarmupSample] | None,
    specs: list[InstanceSpec],
    backend_directory: str = "",
) -> LoadedVersion:
    loaded = LoadedVersion()
    try:
        check_files(version_dir)
        backend = backend_for(config, context, backend_directory)
        import_frameworks(backend.framework_modules)
        loads = [partial(backend.load_instance, config, version_dir, spec) for spec in specs]
        if backend.parallel_instance_loading:
            loaded.instances, loaded.instance_memory = measure_loads(loads, specs, loaded.instances)
        else:
            for load, spec in zip(loads, specs, strict=True):
                instance, usage = measure_load(load, spec)
                loaded.instances.append(instance)
                loaded.instance_memory.append(usage)
        if warmup:
            for instance in loaded.instances:
                run_warmup(instance, warmup, config)
    except Exception as exc:  # noqa: BLE001  # a broken model file must never take the server down
        message = exc.message if isinstance(exc, WorkbenchError) else f"{type(exc).__name__}: {exc}"
        log.error("failed to load '%s' version %s: %s", config.name, version_dir.name, message)
        for instance in loaded.instances:
            instance.unload()
        return LoadedVersion(error=message)
    loaded.memory = sum_memory(usage for usages in loaded.instance_memory for usage in usages)
    return loaded


def check_files(version_dir: Path) -> None:
    """Refuse a version folder holding anything a backend's framework could block on (it
    opens the files itself, blocking): every file below it must be a regular file
    (:func:`workbench.files.model_files.check_model_tree`). Beyond Triton, which hands the folder over
    as it is.

    Raises:
        ModelLoadError: "'<path>' is not a regular file (a FIFO)", the tree is too deep or
            too large to walk, or a folder does not answer in time.
    """
    try:
        check_model_tree(version_dir)
    except OSError as exc:
        raise ModelLoadError(str(exc)) from None


def _version_error(name: str, version: int, exc: OSError) -> str:
    message = f"failed to load '{name}' version {version}: {exc}"
    log.error("%s", message)
    return message


def measure_load(
    load: Callable[[], ModelInstance], spec: InstanceSpec | None = None,
) -> tuple[ModelInstance, list[MemoryUsage]]:
    """Run ``load`` (creating the instance ``spec`` describes) and return it with its memory
    footprint.

    ``CPU``: the growth of this process's resident set (bytes) while the instance loaded,
    never negative: the weights and sessions the instance allocated, plus whatever the
    backend cached for the first time (its framework is imported before, outside the
    measurement: :func:`import_frameworks`). Memory the allocator reuses (freed by an
    earlier version) does not grow the resident set: such a load can read 0. ``GPU`` (KIND_GPU
    and KIND_MODEL instances, where NVML reads the devices; :mod:`workbench.gpu.memory`): the
    growth of this process's used memory on each device that grew, bytes (a KIND_GPU
    instance's own device is listed even at 0); the first instance on a device also carries
    the CUDA context (hundreds of MiB). Loads of other models run at the same time (Triton
    loads models in parallel): what grew while several were measured is shared evenly among
    them (:mod:`workbench.engine.models.load_memory`); requests served meanwhile still can blur the
    figures: the
    measured entries are marked ``estimate``.

    :meth:`ModelInstance.reported_memory` entries replace the measured entry of the same
    (kind, device) (:func:`~workbench.stats.statistics.merge_memory`): a backend that knows its
    bytes is more precise than the process-wide growth, and is never added on top of it.
    Triton's ``memory_usage`` comes from the backends the same way (ONNX Runtime and
    PyTorch report it on GPU builds).
    """
    kind, device_id = (spec.kind, spec.device_id) if spec is not None else ("KIND_CPU", 0)
    on_gpu = kind in ("KIND_GPU", "KIND_MODEL")
    with LEDGER.section(on_gpu) as growth:
        instance = load()
    measured = _measured(growth, {device_id} if kind == "KIND_GPU" else set())
    return instance, merge_memory(measured, instance.reported_memory())


def measure_loads(
    loads: Sequence[Callable[[], ModelInstance]], specs: Sequence[InstanceSpec],
    created: list[ModelInstance] | None = None,
) -> tuple[list[ModelInstance], list[list[MemoryUsage]]]:
    """Run ``loads`` (creating the instances ``specs`` describe, in that order) on parallel
    threads, as Triton creates a model's instances concurrently, and return the instances
    with each one's memory footprint (as :func:`measure_load` measures one: process growth
    while they loaded, the backend's own reports winning per (kind, device)). The growth is
    measured for all of them together, so each instance gets an even share of it (an
    estimate); a (kind, device) any instance reports is taken from the reports alone, so
    the footprints add up to the measured growth joined with the reports.
    ``created`` (a list the caller holds) receives each instance as soon as it exists;

    Raises:
        Exception: the first error of ``loads`` in spec order, once every load finished
            (the instances created are in ``created``: the caller unloads them).
    """
    created = [] if created is None else created
    kinds = {spec.kind for spec in specs}
    on_gpu = bool(kinds & {"KIND_GPU", "KIND_MODEL"})
    with LEDGER.section(on_gpu) as growth:
        results: list[ModelInstance | BaseException] = []
        if len(loads) == 1:
            results = [_attempt(loads[0])]
        elif loads:
            with ThreadPoolExecutor(len(loads), thread_name_prefix="instance-load") as pool:
                results = list(pool.map(_attempt, loads))
    created.extend(r for r in results if isinstance(r, ModelInstance))
    for result in results:
        if isinstance(result, BaseException):
            raise result
    measured = _measured(growth, {spec.device_id for spec in specs if spec.kind == "KIND_GPU"})
    reports = [instance.reported_memory() for instance in created]
    claimed = {(usage.kind, usage.id) for report in reports for usage in report}
    shares: list[list[MemoryUsage]] = [[] for _ in created]
    for usage in measured:
        if not created or (usage.kind, usage.id) in claimed:
            continue
        part, left = divmod(usage.byte_size, len(created))
        for index, share in enumerate(shares):
            share.append(MemoryUsage(usage.kind, usage.id, part + (index < left), estimate=True))
    return created, [share + report for share, report in zip(shares, reports, strict=True)]


def _measured(growth: Growth, gpu_devices: set[int]) -> list[MemoryUsage]:
    """The entries of a measured section: CPU (never negative) and each GPU device that grew
    or that a KIND_GPU instance names (listed at 0 too)."""
    measured = []
    if growth.cpu is not None:
        measured.append(MemoryUsage("CPU", 0, max(0, growth.cpu), estimate=True))
    for device, grown in sorted(growth.gpu.items()):
        if grown > 0 or device in gpu_devices:
            measured.append(MemoryUsage("GPU", device, grown, estimate=True))
    return measured


def _attempt(load: Callable[[], ModelInstance]) -> ModelInstance | BaseException:
    """``load()``, or the exception it raised (collected: the other loads finish first)."""
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - re-raised by measure_loads in spec order
        return exc


def import_frameworks(modules: Collection[str]) -> None:
    """Import a backend's framework modules (``onnxruntime``, ``torch``) before its first
    instance is measured, so that the import is not counted as that instance's memory; one
    import at a time across the load threads (:func:`workbench.common.frameworks.import_framework`). A
    module that is missing is left to ``load_instance``, which reports it."""
    for module in modules:
        try:
            import_framework(module)
        except Exception as exc:  # noqa: BLE001 - ImportError and friends: load_instance says it
            log.debug("could not import %s before loading: %s", module, exc)
