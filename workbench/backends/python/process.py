"""Server side of one stub process: start it, call it, watch it, stop it, clean up after it.

A :class:`StubProcess` owns the child process (``python stub.py``, the same interpreter as
the server), the control :class:`~.transport.Channel` and a reader thread. Replies
(``init_done`` / ``executed`` / ``finalized``) resolve the calls waiting for them; every
other message (decoupled responses, BLS requests, log lines) goes to the ``handler`` given
by the instance. Tensors in incoming messages are mapped by the reader thread; the names of
the stub's segments whose arrays were dropped travel back on the next outgoing message, and
the ``released`` names the stub sends make the server's own segments reusable.

When the stub dies the reader sees end of stream: the process is reaped, every
shared-memory segment of this stub is removed, ``on_exit`` tells the instance (which
restarts it), and waiting calls fail with :class:`StubDied`.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from workbench.backends.python.transport import (
    SHM_PREFIX,
    Channel,
    ChannelClosed,
    SegmentPool,
    SegmentReader,
    decode_tensor,
    remove_segments,
)

log = logging.getLogger(__name__)

#: the stub program, run as a file (see :mod:`workbench.backends.python.stub`)
STUB_SCRIPT = Path(__file__).with_name("stub.py")
#: seconds a stub may take to exit after the server closes its channel (then SIGKILL)
EXIT_GRACE_S = 5.0

_REPLIES = frozenset({"init_done", "executed", "finalized"})
_STUB_IDS = itertools.count(1)


class StubDied(Exception):
    """The stub process exited (crash, ``os._exit``, kill) or its channel broke."""


class StubProcess:
    """One running stub process.

    Args:
        instance_name: the model instance it serves (thread names, log lines).
        handler: ``handler(stub, message)`` for stub-initiated messages (``send``, ``bls``,
            ``log``); called on the reader thread with tensors already decoded.
        on_exit: ``on_exit(stub)`` after the stub went away (called on the reader thread).

    Raises:
        OSError: the process could not be started.
    """

    def __init__(self, instance_name: str, handler: Callable[[StubProcess, dict], None],
                 on_exit: Callable[[StubProcess], None]) -> None:
        self.instance_name = instance_name
        self.segment_base = f"{SHM_PREFIX}wb{os.getpid()}_{next(_STUB_IDS)}_"
        #: segments the server writes tensors into (inputs, BLS responses)
        self.pool = SegmentPool(self.segment_base + "p")
        #: maps the stub's segments (outputs, decoupled responses, BLS inputs)
        self.reader = SegmentReader(self.segment_base + "s", writable=False)
        self.alive = True
        #: set before a deliberate stop, so ``on_exit`` can tell a stop from a crash
        self.stopping = False
        self._handler = handler
        self._on_exit = on_exit
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server_sock, stub_sock = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, str(STUB_SCRIPT), "--fd", str(stub_sock.fileno()),
                 "--segment-base", self.segment_base],
                pass_fds=(stub_sock.fileno(),), stdin=subprocess.DEVNULL,
            )
        except BaseException:
            server_sock.close()
            raise
        finally:
            stub_sock.close()
        self.channel = Channel(server_sock)
        self._reader = threading.Thread(target=self._read, name=f"{instance_name}-stub", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, message: dict, timeout_s: float | None = None) -> dict:
        """Send ``message`` and wait for its reply (``None`` timeout: wait for as long as it takes).

        Raises:
            StubDied: the stub is gone, or went away before replying.
            TimeoutError: no reply within ``timeout_s`` seconds.
        """
        future: Future = Future()
        with self._lock:
            if not self.alive:
                raise StubDied(self.exit_description())
            call_id = next(self._ids)
            self._pending[call_id] = future
        message["id"] = call_id
        self.send(message)
        return future.result(timeout_s)

    def send(self, message: dict) -> None:
        """Send without waiting (with the names of the stub's segments released since the
        last message).

        Raises:
            StubDied: the channel is closed.
        """
        released = self.reader.released()
        if released:
            message["released"] = released
        try:
            self.channel.send(message)
        except ChannelClosed:
            raise StubDied(self.exit_description()) from None

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return f"stub process {self.pid} of model instance '{self.instance_name}' is not reachable"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"stub process {self.pid} of model instance '{self.instance_name}' {how}"

    # ------------------------------------------------------------------ reader thread
    def _read(self) -> None:
        try:
            while True:
                message = self.channel.recv()
                if "released" in message:
                    self.pool.release(message["released"])
                self._decode(message)
                if message["op"] in _REPLIES:
                    with self._lock:
                        future = self._pending.pop(message["id"], None)
                    if future is not None:
                        future.set_result(message)
                else:
                    self._handler(self, message)
        except ChannelClosed:
            pass
        except Exception:  # a protocol bug: treat the stub as dead rather than hang
            log.exception("model instance '%s': bad message from its stub", self.instance_name)
        finally:
            self._gone()

    def _decode(self, message: dict) -> None:
        """Map the tensors of ``message`` in place: wire tuples -> ``(name, array)`` pairs."""
        for part in _responses_in(message):
            part["outputs"] = [self._tensor(t) for t in part["outputs"]]
        if message["op"] == "bls":
            request = message["request"]
            request["inputs"] = [self._tensor(t) for t in request["inputs"]]

    def _tensor(self, wire: tuple) -> tuple:
        return decode_tensor(wire, self.reader)

    def _gone(self) -> None:
        with self._lock:
            self.alive = False
            pending, self._pending = self._pending, {}
        self._reap()
        self.pool.close()
        remove_segments(self.segment_base)
        self.channel.close()
        try:  # before the waiting calls fail: the instance learns of the crash first
            self._on_exit(self)
        except Exception:  # the instance's problem, logged, never the reader's
            log.exception("model instance '%s': stub exit handling failed", self.instance_name)
        died = StubDied(self.exit_description())
        for future in pending.values():
            future.set_exception(died)

    def _reap(self) -> None:
        try:
            self.process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    # ------------------------------------------------------------------ stopping
    def stop(self, finalize_timeout_s: float) -> None:
        """Run the model's ``finalize`` (bounded by ``finalize_timeout_s``), let the stub exit,
        kill it if it does not, and remove its segments. Blocking; idempotent."""
        self.stopping = True
        if self.alive:
            try:
                reply = self.call({"op": "finalize"}, finalize_timeout_s)
                if reply["error"]:
                    log.error("model instance '%s': finalize failed: %s", self.instance_name, reply["error"])
            except TimeoutError:
                log.error("model instance '%s': finalize did not finish within %.1f s; killing its "
                          "stub process %d", self.instance_name, finalize_timeout_s, self.pid)
                self.process.kill()
            except StubDied:
                pass
        self.close()

    def close(self) -> None:
        """End the stub now (close its channel, SIGKILL after the grace period) and wait for
        the reader to clean up. Blocking; idempotent."""
        self.stopping = True
        self.channel.shutdown()
        if threading.current_thread() is not self._reader:
            self._reader.join()


def _responses_in(message: dict) -> list[dict]:
    op = message["op"]
    if op == "executed":
        return [r for r in message["responses"] or () if r is not None]  # None: sent by its sender
    if op in ("send", "bls_response"):
        return [message["response"]] if message["response"] is not None else []
    return []
