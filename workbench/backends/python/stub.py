"""The stub process: runs one instance of a Triton Python model, isolated from the server.

Triton's ``triton_python_backend_stub``, started as a script::

    python .../workbench/backends/python/stub.py --fd N --hop-fds C,R --segment-base PREFIX

(``--fd``: the event socket inherited from the server, :mod:`.process`; ``--hop-fds``: the
call link's eventfds, :mod:`.hop`; ``--segment-base``: this stub generation's shared-memory
prefix, :mod:`.transport`). ``--auto-complete MODEL_FILE`` instead reads a model config (JSON)
on stdin, runs the model's ``auto_complete_config`` and writes ``{"config": ...}`` or
``{"error": ...}`` to stdout (the model's prints go to stderr).

As Triton's embedded interpreter: ``sys.argv == ['']``, model.py imported as
``<version>.model`` with the version and model folders on ``sys.path``
(:func:`load_model_module`). Only this package folder is imported (numpy and the standard
library; never the engine), so a stub starts in about the time of ``import numpy``.

Threads: the main thread waits for calls and runs ``initialize`` / ``execute`` / ``finalize``
one at a time, replying on the call link; a reader thread takes the event socket's messages
(BLS responses, so ``exec`` works during ``execute``); ``async def execute`` runs on a
background asyncio loop (awaited for a non-decoupled model, left running for a decoupled
one). When the server goes away the stub exits at once, without ``finalize``."""

from __future__ import annotations

import sys

if __name__ == "__main__" and not __package__:  # launched as a file by the server
    import os as _os
    import types as _types

    _here = _os.path.dirname(_os.path.abspath(__file__))
    if sys.path and _os.path.abspath(sys.path[0] or ".") == _here:
        del sys.path[0]  # never let a model's `import transport` find this folder
    for _name, _path in (("workbench", _os.path.dirname(_os.path.dirname(_here))),
                         ("workbench.backends", _os.path.dirname(_here)),
                         ("workbench.backends.python", _here)):
        _module = _types.ModuleType(_name)
        _module.__path__ = [_path]  # a bare package: its __init__ (the engine) is not run
        sys.modules[_name] = _module

import contextlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import socket
import threading
import traceback
from typing import Any

from workbench.backends.python import c_utils, pb_runtime, pb_utils
from workbench.backends.python.hop import HopBuffer, HopLink
from workbench.backends.python.pb_control import ControlCalls
from workbench.backends.python.stub_calls import (
    BlsCalls,
    Questions,
    decode_response,
    encode_response,
    encode_responses,
)
from workbench.backends.python.transport import (
    Blob,
    Channel,
    ChannelClosed,
    SegmentPool,
    SegmentReader,
    SharedMemoryFull,
    decode_tensor,
)

_OWN_FILES = {os.path.dirname(os.path.abspath(__file__))}
#: ``extra`` of a request with no sequence, timeout, custom parameters or cancellation
_NO_EXTRA = (0, 0, 0, "{}", False)
#: what BLS and response senders answer in a process the model forked
FORKED_TEXT = ("BLS and response senders are not available in a process forked by the model (e.g. a "
               "multiprocessing worker); call them from the model's own process")


class Stub:
    """Serves one model instance over ``channel`` until ``finalize`` or the server goes away.

    Args:
        channel: the event channel to the server (responses sent through response senders,
            BLS requests and their responses, log lines).
        link: the call link (``init`` / ``execute`` / ``finalize`` and their replies).
        segment_base: this stub's shared-memory prefix; the stub writes ``<base>s<n>``
            segments and accepts only ``<base>p<n>`` ones from the server.
    """

    def __init__(self, channel: Channel, link: HopLink, segment_base: str) -> None:
        self.channel = channel
        self.link = link
        self.pool = SegmentPool(segment_base + "s")
        self.reader = SegmentReader(segment_base + "p", writable=True)
        self.model: Any = None
        self.model_name = ""
        #: the instance's name (``<model>_<group>_<n>``): Triton's stub names it in its texts
        self.instance_name = ""
        self.decoupled = False
        self._events_sent = 0  # event messages sent so far (each reply carries the count)
        self._events_lock = threading.Lock()
        self._senders: dict[int, frozenset[str]] = {}
        self._cancelled: set[int] = set()  # sender keys of open requests the client cancelled
        self._newest_key = 0  # the highest sender key received (keys only grow)
        self._bls = BlsCalls(self)
        self._questions = Questions(self)
        self._control = ControlCalls(self.send)
        self._loop: Any = None
        #: BLS is allowed between a successful ``initialize`` and ``finalize`` (as Triton)
        self.bls_allowed = False
        self._pid = os.getpid()  # a process forked by the model (a Pool worker) has another

    # ------------------------------------------------------------------ message loop
    def read_forever(self) -> None:
        """Reader thread: the event channel's BLS responses are delivered here."""
        try:
            while True:
                message = self.channel.recv()
                if "released" in message:
                    self.pool.release(message["released"])
                if message["op"] == "bls_response":
                    self._bls.deliver(message)
                elif message["op"] == "answer":
                    self._questions.deliver(message)
                elif message["op"] == "control_response":
                    self._control.deliver(message)
                elif message["op"] == "is_ready":  # beside execute, as Triton's stub
                    threading.Thread(target=self._answer_is_ready, name="is-ready", daemon=True).start()
                elif message["op"] == "cancel":
                    self._cancel(message["sender"])
        except ChannelClosed:
            _exit(0)  # the server is gone (or done with us): no finalize
        except BaseException:  # noqa: BLE001  # a bug here must not leave a stub nobody talks to
            traceback.print_exc()
            _exit(1)

    def serve(self) -> None:
        """Main thread: read initialize / execute / finalize calls and run them in order;
        exit when the server is gone."""
        link = self.link
        while True:
            link.wait()  # the server's end is seen by the reader thread (it exits the process)
            _, view, message = link.receive()
            blob = bytearray(view)  # the model's inline inputs: owned, writable, one copy per message
            view.release()
            if "released" in message:
                self.pool.release(message["released"])
            op = message["op"]
            if op == "init":
                self._reply(message, "init_done", self._initialize, message)
            elif op == "execute":
                self._execute(message, blob)
            elif op == "finalize":
                self._reply(message, "finalized", self._finalize)
                return

    def _reply(self, message: dict, op: str, work: Any, *args: Any) -> None:
        try:
            work(*args)
            error = None
        except BaseException as exc:  # noqa: BLE001 - every model error goes back as text
            error = describe(exc)
        self.reply({"op": op, "id": message["id"], "error": error,
                    "is_ready": hasattr(self.model, "is_ready")})

    def reply(self, message: dict, blob: Blob | None = None) -> None:
        """Answer a call on the call link (with the inline tensors its wire tensors placed in
        ``blob``), with the number of event messages sent before it (the server handles
        those first). A reply that does not fit and cannot grow its buffer (``/dev/shm``
        full) is answered with that error instead."""
        message["events"] = self._events_sent
        released = self.reader.released()
        if released:
            message["released"] = released
        try:
            if blob is None:
                self.link.send(message["id"], message)
            else:
                self.link.send(message["id"], message, blob.parts, blob.nbytes)
        except SharedMemoryFull as exc:
            self.pool.release([name for part in message.get("responses") or () if part is not None
                               for name in _segments(part["outputs"])])
            self.link.send(message["id"], {"op": message["op"], "id": message["id"], "responses": None,
                                           "error": describe(exc), "events": message["events"],
                                           "released": message.get("released", [])})

    def send(self, message: dict) -> None:
        """Send an event message; exit when the server is gone.

        Raises:
            TritonModelException: called in a process the model forked (its copy of the
                channel is the stub's: writing there would corrupt the stub's messages).
        """
        if os.getpid() != self._pid:
            raise pb_utils.TritonModelException(FORKED_TEXT)
        with self._events_lock:  # counted in the order they are written
            self._send_on(self.channel, message)
            self._events_sent += 1

    def _send_on(self, channel: Channel, message: dict) -> None:
        released = self.reader.released()
        if released:
            message["released"] = released
        try:
            channel.send(message)
        except ChannelClosed:
            _exit(0)

    # ------------------------------------------------------------------ model lifecycle
    def _initialize(self, message: dict) -> None:
        args = message["args"]
        self.model_name = args["model_name"]
        self.instance_name = args["model_instance_name"]
        self.decoupled = bool(message["decoupled"])
        pb_runtime.model_dir = message.get("model_dir", "")
        module = load_model_module(message["model_file"], bool(message.get("python_based")))
        model_class = getattr(module, "TritonPythonModel", None)
        if model_class is None:
            raise AttributeError(f"{message['model_file']} defines no class 'TritonPythonModel'")
        self.model = model_class()
        initialize = getattr(self.model, "initialize", None)
        if initialize is not None:
            self._run(initialize(dict(args)))
        self.bls_allowed = True

    def _finalize(self) -> None:
        self.bls_allowed = False
        finalize = getattr(self.model, "finalize", None)
        if finalize is not None:
            self._run(finalize())

    def _execute(self, message: dict, blob: bytearray) -> None:
        requests: list = []
        out_blob = None
        try:
            wanted: dict[tuple, frozenset[str]] = {}
            requests = [self._request(r, blob, wanted) for r in message["requests"]]
            result = self.model.execute(requests)
            if self.decoupled and inspect.iscoroutine(result):
                self._in_background(result, requests)  # as Triton: not awaited
                result = None
            result = self._run(result)
            responses = self._check_result(result, requests)
            encoded = None
            if responses is not None:
                out_blob = Blob()
                encoded = encode_responses(responses, requests, self.pool, out_blob)
            reply = {"op": "executed", "id": message["id"], "responses": encoded, "error": None,
                     "rescheduled": self._rescheduled(requests)}
        except BaseException as exc:  # noqa: BLE001 - fails this batch, never the stub
            for request in requests:  # as Triton: the failed batch's senders are closed
                request.get_response_sender()._close()
                self._forget(request._sender_key)
            reply = {"op": "executed", "id": message["id"], "responses": None, "error": describe(exc)}
            out_blob = None
        requests, result, responses = [], None, None  # drop the inputs: their segments go back with the reply
        self.reply(reply, out_blob)

    def _request(self, wire: tuple, blob: bytearray,
                 wanted: dict[tuple, frozenset[str]]) -> pb_utils.InferenceRequest:
        """One request of an ``execute`` message: ``(sender key, wire inputs, requested
        outputs, request id, extra)``, ``extra`` None for a request without a sequence,
        timeout, custom parameters or cancellation, else ``(correlation id, flags, timeout,
        parameters JSON, cancelled)``; inline inputs are views of the message's ``blob``."""
        key, inputs, outputs, request_id, extra = wire
        reader = self.reader
        tensors = [pb_utils.Tensor._wrap(*decode_tensor(t, reader, blob)) for t in inputs]
        correlation_id, flags, timeout, parameters, cancelled = extra or _NO_EXTRA
        request = pb_utils.InferenceRequest._received(self.model_name, list(outputs), tensors, request_id,
                                                      correlation_id, flags, timeout, parameters, key,
                                                      self.decoupled)
        names = wanted.get(outputs)
        if names is None:
            names = wanted[outputs] = frozenset(outputs)
        self._senders[key] = names
        self._newest_key = max(self._newest_key, key)
        if cancelled:
            self._cancelled.add(key)
        return request

    def _rescheduled(self, requests: list) -> list[bool]:
        """Which requests the model released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``
        (exactly that flag, as Triton's stub compares): they go back to the scheduler, so
        their senders end here (the next execution gives the request a new one)."""
        flags = [request._release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
                 for request in requests]
        for request, rescheduled in zip(requests, flags, strict=True):
            if rescheduled:
                self._forget(request._sender_key)
        return flags

    def _cancel(self, key: int) -> None:
        """Reader thread: the client cancelled the request of sender ``key`` (it may not have
        been read yet: keys only grow, so a newer key is one still coming)."""
        if key in self._senders or key > self._newest_key:
            self._cancelled.add(key)

    def is_cancelled(self, key: int) -> bool:
        """Whether the request of sender ``key`` was cancelled (``request.is_cancelled()``)."""
        return key in self._cancelled

    def _forget(self, key: int) -> None:
        """The request of sender ``key`` has ended."""
        self._senders.pop(key, None)
        self._cancelled.discard(key)

    def _check_result(self, result: Any, requests: list) -> list | None:
        """The responses ``execute`` returned, checked as Triton's stub does: a decoupled model
        returns None; a non-decoupled one a list with one entry per request, each an
        ``InferenceResponse`` or None (that request answers through its response sender);
        None alone means every request does. A request released with
        ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` must have None. A returned response counts as the request's
        one final response (an error when its sender already sent one).

        Raises:
            TritonModelException: the result breaks these rules (fails the whole batch).
        """
        count = len(requests)
        if self.decoupled:
            if result is not None:
                raise pb_utils.TritonModelException(
                    f"Python model '{self.instance_name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
            return None
        if result is None:
            return [None] * count
        if not isinstance(result, (list, tuple)):
            raise pb_utils.TritonModelException(
                f"Expected a list in the execute return, found type '{type(result)}'."
            )
        if len(result) != count:
            raise pb_utils.TritonModelException(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
                f"InferenceResponse(s) size is:{len(result)}"
            )
        for response, request in zip(result, requests, strict=True):
            if response is None:
                continue
            if request._release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                raise pb_utils.TritonModelException(  # Triton's text, its typo included
                    "Expected a None object in the execute function return list for reschduled "
                    f"request, found type '{type(response).__name__}'."
                )
            if not isinstance(response, pb_utils.InferenceResponse):
                raise pb_utils.TritonModelException(
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response).__name__}'."
                )
        for response, request in zip(result, requests, strict=True):
            if response is not None:
                request._answer_returned()
                self._forget(request._sender_key)
        return list(result)

    def _event_loop(self) -> Any:
        """The model's asyncio loop (started on first use, on its own thread, as Triton's
        stub does)."""
        import asyncio

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="model-asyncio", daemon=True).start()
        return self._loop

    def _run(self, result: Any) -> Any:
        """``result`` itself, or its value when it is awaitable (async initialize/execute)."""
        if result is None or type(result) in (list, tuple) or not inspect.isawaitable(result):
            return result
        import asyncio

        async def wait() -> Any:
            return await result

        return asyncio.run_coroutine_threadsafe(wait(), self._event_loop()).result()

    def _in_background(self, coroutine: Any, requests: list) -> None:
        """Run a decoupled model's ``async def execute`` on the model's loop without waiting
        for it (Triton's stub), so the next ``execute`` starts at once and one instance serves
        many requests together. When the coroutine raises, the error is reported to the
        server (``background_failed``: logged there with Triton's "Failed to process the
        request(s)" text, as Triton logs it), and the requests whose senders are still open
        end with it as their final response (beyond Triton, where they stay open)."""
        import asyncio

        keys = [request._sender_key for request in requests]
        senders = [request.get_response_sender() for request in requests]
        future = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())
        future.add_done_callback(lambda done: self._background_done(done, keys, senders))

    def _background_done(self, done: Any, keys: list[int], senders: list) -> None:
        if done.cancelled() or done.exception() is None:
            return
        still_open = [key for key, sender in zip(keys, senders, strict=True) if sender._close()]
        for key in keys:
            self._forget(key)
        self.send({"op": "background_failed", "senders": still_open, "error": describe(done.exception())})

    def _answer_is_ready(self) -> None:
        """Run the model's ``is_ready()`` (sync or async) and send its answer: False with the
        error when it raises or returns no bool (Triton's "is_ready() must return a boolean
        value")."""
        try:
            ready = self._run(self.model.is_ready())
            if not isinstance(ready, bool):
                raise pb_utils.TritonModelException("is_ready() must return a boolean value")
            error = None
        except BaseException as exc:  # noqa: BLE001 - reported, never fatal to the stub
            ready, error = False, describe(exc)
        self.send({"op": "ready", "ready": ready, "error": error})

    # ------------------------------------------------------------------ pb_utils runtime
    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, final: bool) -> None:
        """Deliver one decoupled response (``InferenceResponseSender.send``)."""
        wanted = self._senders.get(key, frozenset())
        if final:
            self._forget(key)
        encoded = None if response is None else encode_response(response, self.pool, wanted)
        self.send({"op": "send", "sender": key, "response": encoded, "final": final})

    def start_bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """Send a BLS request; returns its :class:`~.stub_calls.BlsCall`. In a process the
        model forked (a ``multiprocessing`` worker) the call answers at once with an error
        response (it hung there: the responses come to the stub's reader thread, which the
        fork did not copy)."""
        if os.getpid() != self._pid:
            return BlsCalls.failed(FORKED_TEXT)
        return self._bls.start(request, decoupled)

    def model_control(self, request: dict) -> dict:
        """Run one ``load_model`` / ``unload_model`` / ``is_model_ready`` call on the server
        (:mod:`.pb_control`); in a process the model forked the answer is an error."""
        if os.getpid() != self._pid:
            return {"result": None, "error": FORKED_TEXT}
        return self._control.call(request)

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        if os.getpid() != self._pid:  # a forked worker: its stderr (the server's) instead
            print(f"[{level}] {filename}:{line}: {message}", file=sys.stderr, flush=True)
            return
        self.send({"op": "log", "level": level, "message": message, "file": filename, "line": line})

    def metric(self, call: dict, wait: bool = True) -> Any:
        """A custom-metric call (:mod:`.pb_metrics`): its answer's value, or None at once
        when not ``wait`` (a family deleted from ``__del__``).

        Raises:
            TritonModelException: the server refused it (its text), or called in a process
                the model forked.
        """
        message = {"op": "metric", **call}
        if not wait:
            self.send(message)
            return None
        return self._questions.ask(message)

    def decode_response(self, wire: dict | None) -> pb_utils.InferenceResponse | None:
        return decode_response(wire, self.reader)


def load_model_module(model_file: str, python_based: bool = False) -> Any:
    """Import ``model_file`` as Triton's stub does: as module ``<version>.<name>`` (e.g.
    ``1.model``) with the version folder and the model folder appended to ``sys.path``; a
    Python-based backend's (``python_based``) as module ``model`` with its backend folder
    appended to ``sys.path``.

    So ``from . import helper`` / ``from .helper import x`` find files next to model.py
    (the version folder is the package), and so do plain ``import helper`` and a model's
    own ``import model`` / ``unittest.main("model")`` (top-level imports from the version
    folder; ``model`` is then a second module object, as in Triton). The version folder is
    a package without running code unless it holds an ``__init__.py``.

    Raises:
        ImportError: the file cannot be imported; any error model.py raises at import.
    """
    path = os.path.abspath(model_file)
    if python_based:
        return _import_python_based(path)
    version_dir = os.path.dirname(path)
    for folder in (version_dir, os.path.dirname(version_dir)):
        if folder not in sys.path:
            sys.path.append(folder)
    package = os.path.basename(version_dir)
    if package not in sys.modules:
        init = os.path.join(version_dir, "__init__.py")
        if os.path.isfile(init):
            spec = importlib.util.spec_from_file_location(package, init,
                                                          submodule_search_locations=[version_dir])
        else:
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [version_dir]
        if spec is None:
            raise ImportError(f"cannot import the version folder '{version_dir}'")
        parent = importlib.util.module_from_spec(spec)
        sys.modules[package] = parent
        if spec.loader is not None:
            spec.loader.exec_module(parent)
    return _import_as(f"{package}.{os.path.splitext(os.path.basename(path))[0]}", path)


def _import_python_based(path: str) -> Any:
    """A Python-based backend's ``model.py``: module ``model``, its folder on ``sys.path``
    (Triton's stub for ``ModelType::kBackend``)."""
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.append(folder)
    return _import_as(os.path.splitext(os.path.basename(path))[0], path)


def _import_as(name: str, path: str) -> Any:
    """Import the file ``path`` as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import model file '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def describe(exc: BaseException) -> str:
    """``"<Type>: <message>"`` plus the model's frames (``At:``), as Triton words Python errors."""
    if isinstance(exc, SharedMemoryFull):  # Triton's text, as its stub words it
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) not in _OWN_FILES]
    if frames:
        text += "\n\nAt:\n" + "\n".join(f"  {f.filename}({f.lineno}): {f.name}" for f in reversed(frames))
    return text


def _segments(wires: list) -> list[str]:
    """The pool segments named by wire tensors (payload ``(segment, capacity, nbytes)``)."""
    return [wire[3][0] for wire in wires if isinstance(wire[3], tuple)]


def _exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # exiting anyway (a model may have replaced the stream)
            stream.flush()
    os._exit(code)


def serve(fd: int, hop_fds: tuple[int, int], segment_base: str) -> None:
    """Run a stub on the inherited event socket ``fd`` and the call link (its eventfds
    ``hop_fds``: calls, replies; its buffers named after ``segment_base``) until finalize;
    then exit the process.

    Ctrl-C in the server's terminal, or a SIGTERM sent to the whole process group (``make``,
    a shell's ``kill -- -PGID``), reaches the stub too: it ignores both and lets the server
    drain and shut it down (finalize) in order. It still ends when the server goes away
    (its channel closes) and when the server kills it (SIGKILL after ``stub-timeout-seconds``).
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _end_forked_children_with_the_stub()
    channel = Channel(socket.socket(fileno=fd))
    call_fd, reply_fd = hop_fds
    link = HopLink(HopBuffer(segment_base + "reply", create=False), HopBuffer(segment_base + "call", create=False),
                   out_fd=reply_fd, in_fd=call_fd)
    stub = Stub(channel, link, segment_base)
    pb_runtime.runtime = stub
    sys.modules["triton_python_backend_utils"] = pb_utils
    sys.modules["c_python_backend_utils"] = c_utils
    threading.Thread(target=stub.read_forever, name="stub-reader", daemon=True).start()
    stub.serve()
    _exit(0)


def _end_forked_children_with_the_stub() -> None:
    """Processes the model forks (``multiprocessing`` workers) take SIGTERM again and exit
    when the stub is gone: each watches a pipe whose only write end the stub holds (EOF once
    the stub exited, however it ended). Without this they inherited the stub's ignored
    SIGTERM and outlived the server."""
    import signal

    watch, held = os.pipe()

    def in_child() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with contextlib.suppress(OSError):  # closed already (a child's child)
            os.close(held)
        threading.Thread(target=_exit_at_eof, args=(watch,), name="stub-gone", daemon=True).start()

    os.register_at_fork(after_in_child=in_child)


def _exit_at_eof(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass
    _exit(1)


def auto_complete(model_file: str, python_based: bool = False) -> int:
    """Print ``{"config": ...}`` (the model's ``auto_complete_config`` result) or ``{"error": ...}``."""
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the model's prints must not corrupt the answer
    sys.modules["triton_python_backend_utils"] = pb_utils
    sys.modules["c_python_backend_utils"] = c_utils
    try:
        config = pb_utils.ModelConfig(sys.stdin.read())
        model_class = getattr(load_model_module(model_file, python_based), "TritonPythonModel", None)
        complete = getattr(model_class, "auto_complete_config", None)
        answer: dict[str, object]
        returned = complete(config) if complete is not None else config
        if isinstance(returned, pb_utils.ModelConfig):
            answer = {"config": returned.as_dict()}
        else:  # Triton's stub text (a PythonBackendException: no Python type, no frames)
            name = config.as_dict().get("name", "")
            answer = {"error": f"auto_complete_config function in model '{name}' must return a "
                               "valid pb.ModelConfig object."}
    except BaseException as exc:  # noqa: BLE001 - reported to the server as the load error
        answer = {"error": describe(exc)}
    result.write(json.dumps(answer))
    result.close()
    return 0


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="workbench python stub")
    parser.add_argument("--fd", type=int)
    parser.add_argument("--hop-fds", default="", help="the call link's eventfds: calls,replies")
    parser.add_argument("--segment-base", default="")
    parser.add_argument("--auto-complete", metavar="MODEL_FILE")
    parser.add_argument("--python-based-backend", action="store_true")
    options = parser.parse_args(argv)
    sys.argv[:] = [""]  # Triton's stub is an embedded interpreter: models see argv == ['']
    if options.auto_complete:
        return auto_complete(options.auto_complete, options.python_based_backend)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    call_fd, reply_fd = (int(fd) for fd in options.hop_fds.split(","))
    serve(options.fd, (call_fd, reply_fd), options.segment_base)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
