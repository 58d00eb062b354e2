"""A Python-backend model instance, server side: one stub process per instance, as in Triton.

``execute`` sends the batch to the stub and waits for its reply (not bounded, as in Triton);
``unload`` runs ``finalize``, bounded by the ``stub-timeout-seconds`` parameter (s, default
30), then kills the stub. A stub that dies fails the requests it was running with Triton's
"Failed to process the request(s) for model instance '<i>', message: Stub process '<i>' is
not healthy." and restarts at once; one that dies idle stays down (NOT READY:
:meth:`PythonInstance.ready`) until the next request fails and restarts it (Triton's). A
failed restart is tried again at the next execution.

A decoupled model's ``async def execute`` runs in the background in its stub (one that raises
fails the requests it left open). A request the engine cancels is reported to its stub, so
``is_cancelled()`` turns True there. Every request has a response sender; a non-decoupled
model may send its one response through it (Triton's rules), and the request is answered when
its FINAL arrives, also after ``execute`` returned. Docs: docs/python-backend.md."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import (
    BackendContext,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.python.bls import BlsForwarder
from workbench.backends.python.control import ModelControlForwarder
from workbench.backends.python.process import StubDied, StubProcess
from workbench.backends.python.transport import Blob, SharedMemoryFull, encode_tensors
from workbench.common.datatypes import config_to_wire, numpy_dtype, wire_name
from workbench.common.errors import (
    AlreadyExists,
    Cancelled,
    InternalError,
    InvalidArgument,
    ModelLoadError,
    NotFound,
    Unavailable,
    UnknownError,
    Unsupported,
    WorkbenchError,
)
from workbench.config.model_config import model_config_to_json
from workbench.stats.custom_metrics import CustomMetricError, CustomMetrics
from workbench.stats.statistics import MemoryUsage, process_rss_bytes

log = logging.getLogger(__name__)
model_log = logging.getLogger("workbench.python_model")

#: seconds a model's ``is_ready()`` may take before that check reports not ready (Triton's 5 s)
READINESS_TIMEOUT_S = 5.0
#: default bound on ``finalize`` (Triton's ``stub-timeout-seconds`` backend config)
DEFAULT_STUB_TIMEOUT_S = 30.0
#: ``pb_utils.TritonError`` codes -> engine errors
ERRORS_BY_CODE: dict[int, type[WorkbenchError]] = {
    0: UnknownError, 1: InternalError, 2: NotFound, 3: InvalidArgument, 4: Unavailable,
    5: Unsupported, 6: AlreadyExists, 7: Cancelled,
}
#: characters python_backend refuses in a stub name (the instance name; ``INVALID_CHARS``)
INVALID_STUB_NAME_CHARS = frozenset(";|&$`<>()[]{}\\\"'*?~#!")
#: request parameters the engine consumes; the rest reach the model's ``request.parameters()``
RESERVED_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority",
                                 "timeout", "binary_data_output", "headers"})
_LOG_LEVELS = {"INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
               "VERBOSE": logging.DEBUG}

Sender = Callable[[BackendResponse | None, bool], None]


class PythonInstance(ModelInstance):
    """One instance of a Triton Python model (``<version>/model.py``), run in a stub process.

    Args:
        config: the model's normalized config.
        version_dir: the version folder holding the model file.
        spec: which instance this is (name, kind, device).
        context: the engine's callback for BLS (None outside a server).
        python_based: a Python-based backend's ``model.py`` (``--backend-directory``) to run
            instead of the version folder's own; ``pb_utils.get_model_dir()`` is still the
            version folder (where that backend reads the model's files).

    Raises:
        ModelLoadError: the instance name (the model's name, or its instance group's) holds a
            character python_backend refuses in a stub name (``; | & $ ` < > ( ) [ ] { } \\
            " ' * ? ~ # !``: "Invalid stub name: contains invalid characters", as Triton), the
            model file is missing, the stub could not start, or the model's ``initialize``
            raised (the message carries the Python error).
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec,
                 context: BackendContext | None, python_based: Path | None = None) -> None:
        super().__init__(spec)
        if not spec.name or INVALID_STUB_NAME_CHARS.intersection(spec.name):
            raise ModelLoadError("Invalid stub name: contains invalid characters")  # Triton's text
        self._model = config.name
        self._version = version_dir.name
        self._model_file = python_based or version_dir / (config.default_model_filename or "model.py")
        if not self._model_file.is_file():
            raise ModelLoadError(  # Triton's stub text, which its L0_backend_python greps
                f"Failed to preinitialize Python stub: Python model file not found in '{self._model_file}'"
            )
        self._decoupled = config.model_transaction_policy.decoupled
        self._output_types = {o.name: config_to_wire(o.data_type) for o in config.output}
        self._timeout_s = _stub_timeout_s(config)
        _check_execution_env(config, version_dir.parent, spec.name)
        self._init = {"op": "init", "model_file": str(self._model_file), "decoupled": self._decoupled,
                      "python_based": python_based is not None, "model_dir": str(version_dir),
                      "args": _initialize_args(config, version_dir, spec)}
        self._lock = threading.Lock()  # guards the stub's lifecycle (start, restart, stop)
        self._closing = False
        self._senders: dict[int, Sender] = {}
        self._sender_ids = itertools.count(1)
        self._bls = BlsForwarder(context, spec.name)
        #: where the model's ``pb_utils.MetricFamily`` calls go (each stub owns its handles)
        self._metrics = context.custom_metrics if context is not None and context.custom_metrics else CustomMetrics()
        self._control = ModelControlForwarder(context, spec.name)
        self._readiness = _Readiness()
        #: the stub died with nothing in flight: it stays down until the next request
        self._down_idle = False
        self._stub: StubProcess | None = None
        try:
            self._stub = self._start_stub()
        except ModelLoadError:
            self._bls.close()
            raise

    def reported_memory(self) -> list[MemoryUsage]:
        """The stub process's resident set after ``initialize()`` (``CPU``, bytes): what the
        model's own process holds (interpreter, imports, weights). The server's resident-set
        growth, which the loader measures, does not see a child process. Nothing where the
        stub's size cannot be read."""
        stub = self._stub
        size = process_rss_bytes(stub.pid) if stub is not None else None
        return [] if size is None else [MemoryUsage("CPU", 0, size)]

    # ------------------------------------------------------------------ execute
    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        """Run ``requests`` (one ``pb_utils.InferenceRequest`` each) in one ``execute`` call.

        Raises:
            InternalError: the model raised (Triton's "Failed to process the request(s) for
                model instance ..." with the Python error), returned the wrong number of
                responses, or its stub died or cannot be restarted.
            Unavailable: the instance is being unloaded.
        """
        stub = self._healthy_stub()
        keys: list[int] = []
        slots: list[_Slot] = []
        blob = Blob()
        wired: list[tuple] = []
        try:
            outputs: dict[tuple[str, ...], tuple[str, ...]] = {}
            for request in requests:
                wired.append(self._wire_request(request, stub, keys, slots, blob, outputs))
            times.mark_input_done()
            reply = stub.call({"op": "execute", "requests": wired}, blob=blob)
        except (StubDied, OSError) as exc:
            self._drop_senders(keys)
            if isinstance(exc, SharedMemoryFull) and stub.alive:  # Triton's text
                # nothing was sent: the segments of the inputs encoded so far are free again
                stub.pool.release([t[3][0] for w in wired for t in w[1] if isinstance(t[3], tuple)])
                raise InternalError(self._failure(str(exc))) from None
            if isinstance(exc, OSError) and stub.alive:
                raise InternalError(self._failure(f"unable to pass the inputs to the stub: {exc}")) from None
            raise InternalError(self._failure(f"Stub process '{self.name}' is not healthy.")) from None
        except BaseException:
            self._drop_senders(keys)
            raise
        if self._decoupled:
            times.mark_infer_done()
            if reply["error"] is not None:
                self._drop_senders(keys)
                log.error("%s", self._failure(reply["error"]))
                raise InternalError(self._failure(reply["error"]))
            rescheduled = self._rescheduled(reply, keys)
            return [BackendResponse(rescheduled=again) for again in rescheduled]
        return self._collect(reply, slots, keys, times)

    def _rescheduled(self, reply: dict, keys: list[int]) -> list[bool]:
        """Which requests of an execution that ran the model released with
        ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: their senders of this execution end (the
        request's next execution opens new ones; its client's stream stays open)."""
        rescheduled = [bool(again) for again in reply.get("rescheduled") or [False] * len(keys)]
        self._drop_senders([key for key, again in zip(keys, rescheduled, strict=True) if again])
        return rescheduled

    def _collect(self, reply: dict, slots: list[_Slot], keys: list[int],
                 times: ExecutionTimes) -> list[BackendResponse]:
        """A non-decoupled batch's responses: the ones ``execute`` returned, and for a request
        it returned None for, the one its response sender sent (waited for: it may come from
        a model thread after ``execute`` returned, as Triton allows), and for a request
        released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` a rescheduled mark. When the batch failed,
        a request that had already sent its response keeps it (Triton has delivered it); the
        others get the error."""
        if reply["error"] is not None:
            self._drop_senders(keys)
            times.mark_infer_done()
            log.error("%s", self._failure(reply["error"]))
            error = InternalError(self._failure(reply["error"]))
            if all(slot.response is None for slot in slots):
                raise error
            return [slot.response if slot.response is not None else BackendResponse(error=error)
                    for slot in slots]
        responses = []
        rescheduled = self._rescheduled(reply, keys)
        # the stub checked the count
        for wire, slot, key, again in zip(reply["responses"], slots, keys, rescheduled, strict=True):
            if again:  # back to the scheduler: no response now (the stub made sure it returned None)
                responses.append(BackendResponse(rescheduled=True))
                continue
            if wire is not None:
                self._senders.pop(key, None)
                responses.append(self._backend_response(wire))
                continue
            slot.wait()  # until the sender's FINAL, a stub exit or the unload
            responses.append(slot.response if slot.response is not None else BackendResponse(
                error=InternalError(self._failure("the response sender sent no response"))))
        times.mark_infer_done()
        return responses

    # ------------------------------------------------------------------ readiness
    def ready(self) -> bool:
        """Triton's ``TRITONBACKEND_ModelInstanceReady`` for the Python backend: False while
        the stub is down (crashed and not restarted yet: Triton's "Stub process ... is not
        healthy."), else the model's own ``is_ready()`` when it defines one (sync or async;
        asked in the stub while ``execute`` may run; False when it raises, returns a
        non-bool, or does not answer within :data:`READINESS_TIMEOUT_S`; one question in
        flight per instance, concurrent checks share its answer), else True."""
        stub = self._stub
        if stub is None or not stub.alive:
            return self._not_ready(f"Stub process '{self.name}' is not healthy.")
        if not self.checks_readiness or self._readiness.ask(stub):
            return True
        return self._not_ready(f"Model '{self.name}' is not ready (user-defined check failed).")

    def _not_ready(self, reason: str) -> bool:
        """False, with Triton's log line for a readiness check that failed (verbose)."""
        log.debug("Model '%s' version %s is not ready: %s", self._model, self._version, reason)
        return False

    def _failure(self, message: str) -> str:
        return f"Failed to process the request(s) for model instance '{self.name}', message: {message}"

    def _wire_request(self, request: BackendRequest, stub: StubProcess, keys: list[int],
                      slots: list[_Slot], blob: Blob, outputs: dict[tuple[str, ...], tuple[str, ...]]) -> tuple:
        """One request of an ``execute`` message (the stub's ``Stub._request`` reads it):
        ``(sender key, wire inputs, requested outputs, request id, extra)``; inline inputs go
        into ``blob``; equal output lists are one tuple (pickled once); ``extra`` is None
        unless the request has a sequence, timeout, custom parameters or was cancelled."""
        params = request.parameters
        key = next(self._sender_ids)
        if self._decoupled:
            self._senders[key] = request.response_sender or _ignore
        else:  # a non-decoupled model may answer through its response sender too
            slot = _Slot()
            slots.append(slot)
            self._senders[key] = slot.send
        keys.append(key)
        request.cancel.on_cancel(lambda: self._cancel(stub, key))
        inputs = encode_tensors(request.inputs.items(), stub.pool, blob)
        names = tuple(request.requested_outputs)
        names = outputs.setdefault(names, names)
        cancelled = request.cancel.cancelled
        if not params and not cancelled:
            return key, inputs, names, request.request_id, None
        start = params.get("_start", params.get("sequence_start", False))
        end = params.get("_end", params.get("sequence_end", False))
        extra = (params.get("sequence_id", 0) or 0, (1 if start else 0) | (2 if end else 0),
                 int(params.get("timeout", 0) or 0), custom_parameters(params), cancelled)
        return key, inputs, names, request.request_id, None if extra == _NO_EXTRA else extra

    def _backend_response(self, wire: dict) -> BackendResponse:
        """A decoded response part -> :class:`BackendResponse`: the configured outputs, each
        with the datatype the model gave it (an empty one takes the configured datatype)."""
        if wire["error"] is not None:
            message, code = wire["error"]
            return BackendResponse(error=ERRORS_BY_CODE.get(code, InternalError)(message))
        outputs = {}
        for name, array in wire["outputs"]:
            expected = self._output_types.get(name)
            if expected is None:
                continue  # not a model output: Triton passes only configured outputs on
            if array.size == 0 and expected != "BF16" and wire_name(array) != expected:
                # no element to misread (np.array([]) is float64): the empty tensor takes
                # the configured datatype
                array = np.empty(array.shape, dtype=numpy_dtype(expected))
            # another datatype than the config's is passed on as the model made it: Triton's
            # python_backend adds each output with its tensor's own datatype, and the core
            # checks only the name (NVIDIA's in-model unittest models answer FP16 for FP32)
            outputs[name] = array
        parameters = json.loads(wire["parameters"]) if wire["parameters"] else {}
        return BackendResponse(outputs, parameters=parameters)

    # ------------------------------------------------------------------ stub messages
    def _on_message(self, stub: StubProcess, message: dict) -> None:
        """Stub-initiated messages (reader thread)."""
        op = message["op"]
        if op == "send":
            self._on_send(message)
        elif op == "bls":
            self._bls.submit(message, stub)
        elif op == "background_failed":
            self._background_failed(message)
        elif op == "control":
            self._control.submit(message, stub)
        elif op == "bls_cancel":
            self._bls.cancel(stub, message["call"])
        elif op == "log":
            self._log(message)
        elif op == "metric":
            self._metric(stub, message)
        elif op == "ready":
            if message["error"] is not None:
                log.error("model instance '%s': is_ready() failed: %s", self.name, message["error"])
            self._readiness.answer(message["ready"])

    @staticmethod
    def _log(message: dict) -> None:
        """A model's ``pb_utils.Logger`` line, written as Triton's ``TRITONSERVER_LogMessage``
        does: only when its severity is on (VERBOSE lines at ``--log-verbose`` >= 1, which
        sets the root logger to DEBUG; ``--log-info`` & co. filter in the handler)."""
        level = _LOG_LEVELS.get(message["level"], logging.INFO)
        if model_log.isEnabledFor(level):
            model_log.handle(model_log.makeRecord(model_log.name, level, message["file"], message["line"],
                                                  message["message"], (), None))

    def _metric(self, stub: StubProcess, message: dict) -> None:
        """A model's custom-metric call, applied to the server's families with the stub as
        owner; answered when the stub waits for it (``call`` set)."""
        try:
            value, error = self._metrics.apply(stub, message), None
        except CustomMetricError as exc:
            value, error = None, str(exc)
        except (KeyError, TypeError, ValueError) as exc:  # a malformed call fails, never the reader
            value, error = None, f"malformed metric request: {type(exc).__name__}: {exc}"
        if message.get("call"):
            with contextlib.suppress(StubDied, OSError):  # the stub is gone: nobody waits
                stub.send({"op": "answer", "call": message["call"], "value": value, "error": error})

    def _on_send(self, message: dict) -> None:
        key, final = message["sender"], message["final"]
        sender = self._senders.pop(key, None) if final else self._senders.get(key)
        if sender is None:
            return  # the request already ended (its execution failed or the stub restarted)
        wire = message["response"]
        with contextlib.suppress(RuntimeError):  # the engine's loop is closed: nobody listens any more
            sender(None if wire is None else self._backend_response(wire), final)

    def _cancel(self, stub: StubProcess, key: int) -> None:
        """The request of sender ``key`` was cancelled (any thread): tell its stub while the
        request is open there, so the model's ``is_cancelled()`` turns True."""
        if key in self._senders and stub.alive:
            with contextlib.suppress(StubDied, OSError):  # the stub is gone: nothing to tell
                stub.send({"op": "cancel", "sender": key})

    def _background_failed(self, message: dict) -> None:
        """A decoupled model's ``async def execute``, run in the background, raised: log it
        (Triton logs it) and end the requests it left open with the error."""
        failure = self._failure(message["error"])
        log.error("%s", failure)
        for key in message["senders"]:
            sender = self._senders.pop(key, None)
            if sender is not None:
                with contextlib.suppress(RuntimeError):  # the engine's loop is closed
                    sender(BackendResponse(error=InternalError(failure)), True)

    def _drop_senders(self, keys: list[int]) -> None:
        for key in keys:
            self._senders.pop(key, None)

    def _fail_senders(self, reason: str) -> None:
        """End every open decoupled request with an error (its stub is gone)."""
        senders, self._senders = self._senders, {}
        for sender in senders.values():
            sender(BackendResponse(error=InternalError(self._failure(reason))), True)

    # ------------------------------------------------------------------ stub lifecycle
    def _start_stub(self) -> StubProcess:
        """Start a stub and run ``initialize`` (raises ModelLoadError with the reason)."""
        try:
            stub = StubProcess(self.name, self._on_message, self._on_stub_exit)
        except OSError as exc:
            raise ModelLoadError(f"unable to start the stub process of model instance '{self.name}': {exc}") from None
        try:
            reply = stub.call(dict(self._init))
        except StubDied as exc:
            stub.close()
            raise ModelLoadError(  # Triton's text first (stub_launcher.cc; L0_backend_python greps it)
                f"Stub process '{self.name}' is not healthy. ({exc} before initialize() finished; "
                "see the server log for its output)"
            ) from None
        if reply["error"] is not None:
            stub.close()
            raise ModelLoadError(
                f"failed to load model '{self._model}': initialize() of model instance "
                f"'{self.name}' failed: {reply['error']}"
            )
        self.checks_readiness = bool(reply.get("is_ready"))  # the model defines is_ready()
        return stub

    def _healthy_stub(self) -> StubProcess:
        with self._lock:
            if self._closing:
                raise Unavailable(f"model instance '{self.name}' is being unloaded")
            if self._stub is None or not self._stub.alive:
                if self._down_idle:  # Triton: the request that finds it down fails, and restarts it
                    self._down_idle = False
                    threading.Thread(target=self._restart_in_background, name=f"{self.name}-restart",
                                     daemon=True).start()
                    raise InternalError(self._failure(f"Stub process '{self.name}' is not healthy."))
                self._restart_locked()
            assert self._stub is not None
            return self._stub

    def _restart_locked(self) -> None:
        old, self._stub = self._stub, None
        if old is not None:
            old.close()
        try:
            self._stub = self._start_stub()
        except ModelLoadError as exc:
            raise InternalError(self._failure(
                f"Stub process '{self.name}' is not healthy; restarting it failed: {exc.message}"
            )) from None
        log.info("model instance '%s': stub process restarted (pid %d)", self.name, self._stub.pid)

    def _on_stub_exit(self, stub: StubProcess) -> None:
        """Reader thread of a stub that went away: fail its open requests and restart it. A
        stub that died with nothing in flight stays down (the model NOT READY) until the next
        request, which fails and restarts it, as in Triton (L0_backend_python restart and
        model_readiness)."""
        self._readiness.answer(False)
        try:
            self._after_stub_exit(stub)
        finally:  # its families and metrics leave /metrics (Triton: the stub's objects die); a
            # restart waits for this (it joins this reader thread), so the new stub starts afresh
            self._metrics.release(stub)

    def _after_stub_exit(self, stub: StubProcess) -> None:
        if stub.stopping or self._closing or stub is not self._stub:
            return
        in_flight = stub.busy or bool(self._senders)
        self._fail_senders(f"Stub process '{self.name}' is not healthy.")
        if not in_flight:
            log.error("model instance '%s': %s; the next request restarts it", self.name, stub.exit_description())
            self._down_idle = True
            return
        log.error("model instance '%s': %s; failing its requests and restarting it",
                  self.name, stub.exit_description())
        threading.Thread(target=self._restart_in_background, name=f"{self.name}-restart", daemon=True).start()

    def _restart_in_background(self) -> None:
        try:
            with self._lock:
                if not self._closing and (self._stub is None or not self._stub.alive):
                    self._restart_locked()
        except InternalError as exc:
            log.error("%s", exc.message)

    def unload(self) -> None:
        """Run ``finalize`` (bounded by the stub timeout), stop the stub, remove its shared
        memory; open decoupled requests end with an error. Idempotent."""
        with self._lock:
            self._closing = True
            stub, self._stub = self._stub, None
        if stub is not None:
            stub.stop(self._timeout_s)
            self._metrics.release(stub)  # also when the stop outran its exit handling
        self._fail_senders("the model instance was unloaded")
        self._bls.close()


#: ``extra`` of a request without sequence, timeout, custom parameters or cancellation
_NO_EXTRA = (0, 0, 0, "{}", False)


def custom_parameters(params: dict[str, Any]) -> str:
    """The parameters a model sees (``request.parameters()``): JSON of the custom keys."""
    custom = {k: v for k, v in params.items()
              if k not in RESERVED_PARAMETERS and not k.startswith(("_", "triton_"))}
    return json.dumps(custom, default=str) if custom else "{}"


def _initialize_args(config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> dict[str, str]:
    """Triton's ``initialize(args)``: every value a string."""
    return {
        "model_config": json.dumps(model_config_to_json(config)),
        "model_instance_kind": spec.kind.removeprefix("KIND_"),
        "model_instance_name": spec.name,
        "model_instance_device_id": str(spec.device_id),
        "model_repository": str(version_dir.parent),
        "model_version": version_dir.name,
        "model_name": config.name,
    }


def _check_execution_env(config: ModelConfig, model_dir: Path, instance_name: str) -> None:
    """``parameters { key: "EXECUTION_ENV_PATH" ... }`` (a conda-pack archive Triton unpacks
    and runs the stub from; ``$$TRITON_MODEL_DIRECTORY`` is the model's folder): not
    supported here, so the model runs in the server's own interpreter, with a warning.

    Raises:
        ModelLoadError: the archive does not exist (Triton's load fails too, with this text).
    """
    if "EXECUTION_ENV_PATH" not in config.parameters:
        return
    path = config.parameters["EXECUTION_ENV_PATH"].string_value.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))
    if not Path(path).exists():
        raise ModelLoadError(f"LastModifiedTime() failed as file '{path}' does not exists.")
    log.warning("model instance '%s': EXECUTION_ENV_PATH '%s' is a conda-pack execution environment, "
                "which this server does not support: the model runs in the server's Python (%s) "
                "and its packages", instance_name, path, sys.executable)


def _stub_timeout_s(config: ModelConfig) -> float:
    """``parameters { key: "stub-timeout-seconds" ... }``, else the default.

    Raises:
        ModelLoadError: the value is not a positive number.
    """
    text = config.parameters["stub-timeout-seconds"].string_value if "stub-timeout-seconds" in config.parameters else ""
    if not text:
        return DEFAULT_STUB_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ModelLoadError(f"model '{config.name}': 'stub-timeout-seconds' must be a positive number, got '{text}'")
    return value


class _Readiness:
    """The one ``is_ready()`` question in flight to a stub, and its answer for every waiter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Future[bool] | None = None

    def ask(self, stub: StubProcess) -> bool:
        """Ask (or join the question in flight) and wait up to :data:`READINESS_TIMEOUT_S`."""
        with self._lock:
            future, asking = self._pending, self._pending is None
            if future is None:
                future = self._pending = Future()
        if asking:
            try:
                stub.send({"op": "is_ready"})
            except StubDied:
                self.answer(False)
        try:
            return future.result(READINESS_TIMEOUT_S)
        except TimeoutError:
            return False  # this check; a late answer still serves the checks waiting then

    def answer(self, ready: bool) -> None:
        """The stub answered (or went away: False)."""
        with self._lock:
            future, self._pending = self._pending, None
        if future is not None:
            future.set_result(bool(ready))


class _Slot:
    """Where the response sender of one request of a non-decoupled model puts its response.

    Done once the FINAL send arrived (with or after the one response), or an error when the
    stub exits or the instance unloads. Its ``threading.Event`` is made only when a waiter
    comes before the FINAL (a request answered through its sender after ``execute``
    returned): most requests are answered by ``execute``'s return value and never wait.
    """

    __slots__ = ("_done", "_final", "response")
    _lock = threading.Lock()  # guards the lazy event of every slot (held for a few lines)

    def __init__(self) -> None:
        self.response: BackendResponse | None = None
        self._final = False
        self._done: threading.Event | None = None

    def send(self, response: BackendResponse | None, final: bool) -> None:
        if response is not None and self.response is None:
            self.response = response
        if final:
            with _Slot._lock:
                self._final = True
                done = self._done
            if done is not None:
                done.set()

    def wait(self) -> None:
        """Block until the FINAL send (or the stub's exit / the unload)."""
        with _Slot._lock:
            if self._final:
                return
            if self._done is None:
                self._done = threading.Event()
            done = self._done
        done.wait()


def _ignore(response: BackendResponse | None, final: bool) -> None:
    """Sender for a decoupled request that nobody streams (kept for symmetry)."""
