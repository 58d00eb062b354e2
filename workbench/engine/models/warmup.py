"""Model warmup: Triton's ``model_warmup`` samples, run on every instance before READY.

Follows Triton core (``backend_model_instance.cc``: ``GenerateWarmupData``, ``WarmUp``).
Blocking: runs on the model-load threads, never on the event loop.

- ``batch_size: 0`` skips a sample; otherwise one execution is ``batch_size`` requests of
  batch 1 (a leading dim of 1 when ``max_batch_size > 0``) in one ``execute`` call, run
  ``max(count, 1)`` times on each instance right after it is created.
- Inputs: ``zero_data``; ``random_data`` (floats in [0, 1), integers over the whole range,
  booleans; BYTES as zero data: Triton's raw random bytes can make NaN floats);
  ``input_data_file``: raw row-major bytes from ``<model>/warmup/<file>`` (cut to the
  tensor's size; shorter fails: "warmup setting expects 64 bytes, but the data provided from
  raw only has 10 bytes"; BYTES as 4-byte little-endian length-prefixed elements, at most
  :data:`~workbench.files.model_files.MAX_TEXT_FILE_BYTES`), read through :mod:`workbench.files.model_files`.
- Inputs are shaped as a client request's (:func:`workbench.engine.inference.validation.validate_request`);
  every output is requested; no scheduler, statistics or metrics see warmup executions.
- A failing sample fails the version's load: UNAVAILABLE "failed to run warmup sample
  '<name>': <error>; " (Triton's text). A decoupled sample's final response must come within
  :data:`DECOUPLED_TIMEOUT_S` seconds.

Static checks: :mod:`workbench.config.validate_warmup`. Docs: docs/backends.md (``model_warmup``)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelWarmup

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, ModelInstance
from workbench.common.bytes_codec import IncompleteBytes, decode_bytes
from workbench.common.datatypes import config_to_wire, numpy_dtype
from workbench.common.errors import InvalidModelConfig, ModelLoadError, WorkbenchError
from workbench.engine.inference.model_io import ModelIO
from workbench.engine.inference.validation import validate_request
from workbench.files.model_files import MAX_TEXT_FILE_BYTES, read_file, read_prefix
from workbench.messages.types import InferenceRequest, Tensor

log = logging.getLogger(__name__)

#: model subfolder holding ``input_data_file`` files (Triton's ``kWarmupDataFolder``).
WARMUP_FOLDER = "warmup"
#: seconds a decoupled model has to send a warmup request's final response.
DECOUPLED_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class WarmupSample:
    """One prepared warmup sample.

    Attributes:
        name: the sample's ``name``.
        count: executions to run (``max(count, 1)``).
        batch_size: requests per execution (>= 1).
        inputs: input name -> array as the backend gets it (leading dimension 1 when the
            model batches, ``reshape`` applied), shared by the sample's requests.
        outputs: the requested outputs (every model output).
        batched: the model's ``max_batch_size > 0``.
    """

    name: str
    count: int
    batch_size: int
    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...]
    batched: bool

    def requests(self) -> list[BackendRequest]:
        """The ``batch_size`` requests of one execution (fresh objects, shared arrays)."""
        return [
            BackendRequest(dict(self.inputs), self.outputs, batched=self.batched)
            for _ in range(self.batch_size)
        ]


def prepare_warmup(config: ModelConfig, model_dir: Path | None) -> list[WarmupSample]:
    """Build the samples of ``config.model_warmup`` (validated config; may read files).

    Args:
        config: the normalized, validated model config.
        model_dir: the model's folder (``input_data_file`` is read from its ``warmup/``).

    Returns:
        The samples to run, in config order (``batch_size: 0`` ones left out).

    Raises:
        InvalidModelConfig: "model_warmup sample '<s>' of model '<m>': <reason>": a file is
            missing or too short, a BYTES file is malformed or has the wrong element count,
            a data type has no numpy form here (BF16), or the input fails request validation.
    """
    samples: list[WarmupSample] = []
    if not config.model_warmup:
        return samples
    io = ModelIO(config)
    for sample in config.model_warmup:
        if sample.batch_size == 0:
            log.debug("Skipping batch 0 warmup sample '%s'", sample.name)
            continue
        try:
            samples.append(_prepare(config, io, sample, model_dir))
        except WorkbenchError as exc:
            raise InvalidModelConfig(
                f"model_warmup sample '{sample.name}' of model '{config.name}': {exc.message}"
            ) from None
    return samples


def _prepare(
    config: ModelConfig, io: ModelIO, sample: ModelWarmup, model_dir: Path | None
) -> WarmupSample:
    batched = config.max_batch_size > 0
    model_inputs, controls = [], {}
    for name, value in sample.inputs.items():
        wire = config_to_wire(value.data_type)
        array = _sample_data(name, wire, value, model_dir)
        if batched:
            array = array[np.newaxis]
        if name in io.inputs:
            model_inputs.append(Tensor(name, wire, array))
        else:
            controls[name] = array
    request = validate_request(InferenceRequest(config.name, model_inputs), io)
    inputs = {**request.inputs, **controls}
    outputs = tuple(o.name for o in config.output)
    return WarmupSample(sample.name, max(1, int(sample.count)), int(sample.batch_size), inputs,
                        outputs, batched)


def _sample_data(name: str, wire: str, value: ModelWarmup.Input, model_dir: Path | None) -> np.ndarray:
    shape = tuple(int(d) for d in value.dims)
    dtype = numpy_dtype(wire)
    kind = value.WhichOneof("input_data_type")
    if kind == "input_data_file":
        return _file_data(name, wire, dtype, shape, value.input_data_file, model_dir)
    if wire == "BYTES" or kind == "zero_data":  # random BYTES fall back to zeros (Triton)
        return np.full(shape, b"", dtype=object) if wire == "BYTES" else np.zeros(shape, dtype)
    rng = np.random.default_rng()
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.random(size=shape).astype(dtype)


def _file_data(
    name: str, wire: str, dtype: np.dtype, shape: tuple[int, ...], file: str, model_dir: Path | None
) -> np.ndarray:
    if model_dir is None:
        raise InvalidModelConfig(f"input '{name}' reads '{file}' but the model has no folder")
    path = model_dir / WARMUP_FOLDER / file
    count = int(np.prod(shape, dtype=np.int64))
    need = count * dtype.itemsize
    try:  # as the poll's scan reads files: a FIFO is never opened, a hung mount answers in time
        data = read_file(path, MAX_TEXT_FILE_BYTES) if wire == "BYTES" else read_prefix(path, need)
    except OSError as exc:
        raise InvalidModelConfig(
            f"failed to read input_data_file '{WARMUP_FOLDER}/{file}' of input '{name}': "
            f"{exc.strerror or exc}"
        ) from None
    if wire == "BYTES":
        try:
            elements = decode_bytes(data)
        except IncompleteBytes as exc:
            raise InvalidModelConfig(f"input_data_file '{file}' of input '{name}': {exc}") from None
        if elements.size != count:
            raise InvalidModelConfig(
                f"warmup setting expects {count} string elements for input '{name}', but the "
                f"data provided from {file} has {elements.size}"
            )
        return elements.reshape(shape)
    if len(data) < need:
        raise InvalidModelConfig(
            f"warmup setting expects {need} bytes, but the data provided from {file} only has "
            f"{len(data)} bytes"
        )
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape).copy()


def run_warmup(instance: ModelInstance, samples: list[WarmupSample], config: ModelConfig) -> None:
    """Run every sample on ``instance`` (blocking; call before the instance is scheduled).

    Raises:
        ModelLoadError: "failed to run warmup sample '<name>': <error>; " when an execution
            raises, a response carries an error, or a decoupled model does not send its final
            response in time. The first failing sample ends the warmup.
    """
    decoupled = config.model_transaction_policy.decoupled
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug("model '%s' instance %s is running warmup sample '%s' for iteration %d",
                      config.name, instance.name, sample.name, iteration)
            errors = _execute(instance, sample, decoupled)
            if errors:
                log.debug("model '%s' instance %s failed to run warmup sample '%s'",
                          config.name, instance.name, sample.name)
                raise ModelLoadError(
                    f"failed to run warmup sample '{sample.name}': "
                    + "".join(f"{error}; " for error in errors)
                )


def _execute(instance: ModelInstance, sample: WarmupSample, decoupled: bool) -> list[str]:
    """One execution of ``sample``; the error texts it produced (empty on success)."""
    requests = sample.requests()
    finals = _attach_senders(requests) if decoupled else None
    try:
        responses = instance.execute(requests, ExecutionTimes(start_ns=time.monotonic_ns()))
    except WorkbenchError as exc:
        return [exc.message]
    except Exception as exc:  # noqa: BLE001  # a backend's own error (any type): keep its text
        return [f"{type(exc).__name__}: {exc}"]
    if finals is not None:
        return finals.wait()
    if len(responses) != len(requests):
        return [f"instance {instance.name} returned {len(responses)} responses for "
                f"{len(requests)} requests"]
    return [r.error.message for r in responses if r.error is not None]


class _Finals:
    """Collects a decoupled sample's responses until every request sent its final one."""

    def __init__(self, count: int) -> None:
        self.pending = count
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        if count == 0:
            self.done.set()

    def send(self, response: BackendResponse | None, final: bool) -> None:
        with self.lock:
            if response is not None and response.error is not None:
                self.errors.append(response.error.message)
            if final:
                self.pending -= 1
                if self.pending == 0:
                    self.done.set()

    def wait(self) -> list[str]:
        if not self.done.wait(DECOUPLED_TIMEOUT_S):
            return [f"the decoupled model sent no final response within {DECOUPLED_TIMEOUT_S:g} s"]
        with self.lock:
            return list(self.errors)


def _attach_senders(requests: list[BackendRequest]) -> _Finals:
    finals = _Finals(len(requests))
    for request in requests:
        finals_for_one = _OneFinal(finals)
        request.response_sender = finals_for_one.send
    return finals


class _OneFinal:
    """One request's sender: counts its first final response only."""

    def __init__(self, finals: _Finals) -> None:
        self.finals = finals
        self.closed = False

    def send(self, response: BackendResponse | None, final: bool) -> None:
        if self.closed:
            return
        self.closed = final
        self.finals.send(response, final)


__all__ = ["DECOUPLED_TIMEOUT_S", "WARMUP_FOLDER", "WarmupSample", "prepare_warmup", "run_warmup"]
