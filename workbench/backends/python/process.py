"""Server side of one stub process: start it, call it, watch it, stop it, clean up after it.

A :class:`StubProcess` owns the child process (``python stub.py``, the same interpreter as
the server), the call link (:mod:`.hop`), a :class:`~.transport.Channel` and a reader thread:

* the *call link* carries ``init`` / ``execute`` / ``finalize`` and their replies
  (``init_done`` / ``executed`` / ``finalized``), one call at a time, as one message each
  (an ``execute`` holds the whole batch: every request, its inline tensors back to back in
  the message's blob) in a shared-memory buffer per direction, woken by an eventfd: the
  calling thread (the instance's) writes and then waits for the reply itself, and the stub's
  main thread waits for the calls itself. No thread hand-off on either side: under load each
  hand-off is a wake-up and a wait for the GIL (profiled in bench/RESULTS.md, issue 20);
* the *event* channel carries everything else (decoupled responses, BLS requests, log
  lines from the stub; BLS responses to it), read by the reader thread, which gives each
  message to the ``handler`` given by the instance. A reply says how many event messages
  the stub sent before it (``events``); the call returns once the reader has handled that
  many, so a model's sends are seen before its ``execute`` result, as on one channel.

Tensors in incoming messages are mapped by the thread that reads them; the names of the
stub's segments whose arrays were dropped travel back on the next outgoing message, and
the ``released`` names the stub sends make the server's own segments reusable.

When the stub dies the reader sees end of stream: the process is reaped, every
shared-memory segment of this stub is removed, ``on_exit`` tells the instance (which
restarts it), and then a waiting call fails with :class:`StubDied`.
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
from pathlib import Path

from workbench.backends.python import shm_space
from workbench.backends.python.hop import HopBuffer, HopLink
from workbench.backends.python.transport import (
    SHM_PREFIX,
    Blob,
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
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._call_lock = threading.Lock()  # one call (send + reply) at a time
        #: event messages the reader has handled; a reply waits for the count it carries
        self._events_seen = 0
        self._events_cond = threading.Condition(self._lock)
        self._gone_done = threading.Event()
        server_sock, stub_sock = socket.socketpair()
        call_fd, reply_fd = os.eventfd(0), os.eventfd(0)  # close-on-exec: only this stub inherits them
        buffers: list[HopBuffer] = []
        try:
            buffers.append(HopBuffer(self.segment_base + "call", create=True))
            buffers.append(HopBuffer(self.segment_base + "reply", create=True))
            self.process = subprocess.Popen(
                [sys.executable, str(STUB_SCRIPT), "--fd", str(stub_sock.fileno()),
                 "--hop-fds", f"{call_fd},{reply_fd}", "--segment-base", self.segment_base],
                pass_fds=(stub_sock.fileno(), call_fd, reply_fd), stdin=subprocess.DEVNULL,
            )
        except BaseException:
            server_sock.close()
            for fd in (call_fd, reply_fd):
                os.close(fd)
            for buffer in buffers:
                buffer.close(unlink=True)
            raise
        finally:
            stub_sock.close()
        shm_space.BUDGET.started()  # warns once when /dev/shm is small for the live stubs
        #: events: stub-initiated messages (read by the reader thread) and BLS responses
        self.channel = Channel(server_sock)
        #: calls and their replies (waited for by the calling thread)
        self.link = HopLink(buffers[0], buffers[1], out_fd=call_fd, in_fd=reply_fd)
        self._reader = threading.Thread(target=self._read, name=f"{instance_name}-stub", daemon=True)
        self._reader.start()

    @property
    def busy(self) -> bool:
        """Whether a call (``init`` / ``execute`` / ``finalize``) is waiting for its reply."""
        return self._call_lock.locked()

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, message: dict, timeout_s: float | None = None, blob: Blob | None = None) -> dict:
        """Send ``message`` (and the inline tensors its wire tensors place in ``blob``) on the
        call link and wait for its reply on this thread (``None`` timeout: for as long as it
        takes); the reply's tensors are decoded (views of one copy of its blob, or mapped
        segments), and the event messages the stub sent before it have been handled.

        Raises:
            StubDied: the stub is gone, or went away before replying (raised once the
                reader thread has cleaned up after it and told the instance).
            TimeoutError: no reply within ``timeout_s`` seconds.
            SharedMemoryFull: the message did not fit and its buffer could not grow (nothing
                was sent).
        """
        with self._call_lock:
            if not self.alive:
                raise StubDied(self.exit_description())
            seq = message["id"] = next(self._ids)
            released = self.reader.released()
            if released:
                message["released"] = released
            link = self.link
            try:
                if blob is None:
                    link.send(seq, message)
                else:
                    link.send(seq, message, blob.parts, blob.nbytes)
            except BaseException:
                self.reader.put_back(released)  # the stub learns of them with the next message
                raise
            while True:
                if not link.wait(timeout_s):
                    raise TimeoutError(f"no reply from the stub within {timeout_s} s")
                if link.inp.seq() == seq:
                    break
                if not self.alive:  # woken by the reader thread: the stub is gone
                    self._gone_done.wait()
                    raise StubDied(self.exit_description())
            _, view, reply = link.receive()
            data = bytes(view) if view.nbytes else b""
            view.release()
            if "released" in reply:
                self.pool.release(reply["released"])
            self._decode(reply, data)
        events = reply.get("events", 0)
        if self._events_seen < events:
            with self._events_cond:
                self._events_cond.wait_for(lambda: self._events_seen >= events or not self.alive)
        return reply

    def send(self, message: dict) -> None:
        """Send an event message without waiting (with the names of the stub's segments
        released since the last message).

        Raises:
            StubDied: the channel is closed.
        """
        self._send_on(self.channel, message)

    def _send_on(self, channel: Channel, message: dict) -> None:
        released = self.reader.released()
        if released:
            message["released"] = released
        try:
            channel.send(message)
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
                self._handler(self, message)
                with self._events_cond:
                    self._events_seen += 1
                    self._events_cond.notify_all()
        except ChannelClosed:
            pass
        except Exception:  # a protocol bug: treat the stub as dead rather than hang
            log.exception("model instance '%s': bad message from its stub", self.instance_name)
        finally:
            self._gone()

    def _decode(self, message: dict, blob: bytes = b"") -> None:
        """Map the tensors of ``message`` in place: wire tuples -> ``(name, array)`` pairs
        (``blob``: the message's inline tensor bytes, for a call link reply)."""
        reader = self.reader
        for part in _responses_in(message):
            part["outputs"] = [decode_tensor(t, reader, blob) for t in part["outputs"]]
        if message["op"] == "bls":
            request = message["request"]
            request["inputs"] = [decode_tensor(t, reader) for t in request["inputs"]]

    def _gone(self) -> None:
        with self._events_cond:
            self.alive = False
            self._events_cond.notify_all()
        self.link.wake()  # a call waiting for its reply ends (and waits for the below)
        self._reap()
        self.pool.close()
        remove_segments(self.segment_base)
        shm_space.BUDGET.stopped()
        self.channel.close()
        try:  # before a waiting call fails: the instance learns of the crash first
            self._on_exit(self)
        except Exception:  # the instance's problem, logged, never the reader's
            log.exception("model instance '%s': stub exit handling failed", self.instance_name)
        finally:
            self._gone_done.set()

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
            with self._call_lock:  # no call is waiting any more
                self.link.close()


def _responses_in(message: dict) -> list[dict]:
    op = message["op"]
    if op == "executed":
        return [r for r in message["responses"] or () if r is not None]  # None: sent by its sender
    if op in ("send", "bls_response"):
        return [message["response"]] if message["response"] is not None else []
    return []
