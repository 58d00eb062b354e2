"""gRPC on raw HTTP/2 frames (the ``h2`` library): what grpcio's own client never sends.

grpcio compresses a message itself, so it cannot send a compressed message that it did not
inflate first (a 1 GiB bomb costs its client 1 GiB) nor corrupt compressed bytes, and it
obeys the server's ``MAX_CONCURRENT_STREAMS``. The attack tests, the fuzz tier and
``bench/grpc_attacks.py`` use :class:`RawGrpcConnection` to send such frames and read the
answer (messages, ``grpc-status``, ``grpc-message``) as any client would.

Blocking sockets: call it from a thread (``asyncio.to_thread``) in an async test.
"""

from __future__ import annotations

import socket
import urllib.parse
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
import hyperframe.frame

from workbench.frontends.grpc.raw_wire import varint_bytes as varint

#: ``grpc-encoding`` -> zlib's wbits for the wrapper grpc uses (``deflate`` is the zlib format)
WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


def compress(chunks: Iterable[bytes], encoding: str) -> bytes:
    """The ``gzip`` / ``deflate`` stream of ``chunks`` (given piece by piece: a bomb's
    gigabyte of zeros is never held at once)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, WBITS[encoding])
    parts = [compressor.compress(chunk) for chunk in chunks]
    return b"".join([*parts, compressor.flush()])


def zeros(byte_count: int, chunk: int = 1 << 20) -> Iterable[bytes]:
    """``byte_count`` zero bytes in chunks of ``chunk`` bytes."""
    block = bytes(chunk)
    for start in range(0, byte_count, chunk):
        yield block[: min(chunk, byte_count - start)]


def frame(payload: bytes, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message: the compressed flag, the 4-byte length, the bytes."""
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


@dataclass
class RawReply:
    """What came back on one stream: ``status`` (``grpc-status``; None if the stream was
    reset, see ``reset``), ``message`` (``grpc-message``, decoded), the response messages'
    bytes and the RST_STREAM error code, if any."""

    status: int | None = None
    message: str = ""
    messages: list[bytes] = field(default_factory=list)
    reset: int | None = None


class RawGrpcConnection:
    """One HTTP/2 connection to a gRPC server, driven frame by frame.

    Args:
        port: the server's port on ``host``.
        host: its address.
        timeout_s: socket timeout for every read and write, seconds.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout_s: float = 60.0) -> None:
        self.authority = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(2**30)  # read all the server sends
        self._flush()
        self.replies: dict[int, RawReply] = {}
        self._ended: set[int] = set()
        self.remote_settings: dict[int, int] = {}
        self.closed = False
        #: the error codes of the server's GOAWAY frames (0 NO_ERROR, 2 INTERNAL_ERROR, ...)
        self.goaway_errors: list[int] = []
        #: the server closed the socket
        self.eof = False
        self._unread = b""

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def open(self, method: str, encoding: str | None = None) -> int:
        """Start a call to ``/<service>/<method>`` (its headers, no message); the stream id."""
        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", method),
                   (":authority", self.authority), ("content-type", "application/grpc"), ("te", "trailers")]
        if encoding is not None:
            headers.append(("grpc-encoding", encoding))
        self.h2.send_headers(stream_id, headers)
        self.replies[stream_id] = RawReply()
        self._flush()
        return stream_id

    def send(self, stream_id: int, data: bytes, end: bool = False) -> None:
        """Send ``data`` (framed messages) on the stream within flow control, reading the
        server's frames while the window is closed; ``end`` half-closes the stream."""
        view = memoryview(data)
        while view:
            window = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.receive()
                if stream_id in self._ended:
                    return  # the server answered (and closed) before taking everything
                continue
            self.h2.send_data(stream_id, bytes(view[:window]))
            view = view[window:]
            self._flush()
        if end:
            self.h2.end_stream(stream_id)
            self._flush()

    def call(self, method: str, data: bytes, encoding: str | None = None) -> RawReply:
        """One unary call: ``data`` (framed message(s)) sent, the reply read to its end."""
        stream_id = self.open(method, encoding)
        self.send(stream_id, data, end=True)
        return self.wait(stream_id)

    def wait(self, stream_id: int) -> RawReply:
        """Read frames until ``stream_id`` ends (trailers or a reset), then its reply.

        Raises:
            ConnectionError: the server closed the connection first.
        """
        while stream_id not in self._ended:
            if self.closed:
                raise ConnectionError("the server closed the connection")
            self.receive()
        return self.replies[stream_id]

    def receive(self) -> None:
        """Read what the server sent (one ``recv``) and record its events. After the
        server's first GOAWAY (:attr:`closed`), h2 takes no more frames: later GOAWAYs are
        recorded and PINGs answered, as a proxy does while its streams finish (grpc-core's
        graceful GOAWAY sends a PING and its final GOAWAY once the answer came back)."""
        data = self.sock.recv(1 << 20)
        if not data:
            self.closed = self.eof = True
            return
        self._unread += data
        while len(self._unread) >= 9:
            header, length = hyperframe.frame.Frame.parse_frame_header(memoryview(self._unread[:9]))
            if len(self._unread) < 9 + length:
                break
            data, self._unread = self._unread[: 9 + length], self._unread[9 + length :]
            if not self.closed:
                for event in self.h2.receive_data(data):
                    self._record(event)
            elif isinstance(header, hyperframe.frame.GoAwayFrame):
                header.parse_body(memoryview(data[9:]))
                self.goaway_errors.append(header.error_code)
            elif isinstance(header, hyperframe.frame.PingFrame) and "ACK" not in header.flags:
                header.parse_body(memoryview(data[9:]))
                self.sock.sendall(hyperframe.frame.PingFrame(0, header.opaque_data, flags=["ACK"]).serialize())
        if not self.closed:
            self._flush()

    def _record(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RemoteSettingsChanged):
            self.remote_settings.update({int(k): v.new_value for k, v in event.changed_settings.items()})
        elif isinstance(event, h2.events.DataReceived):
            reply = self.replies.setdefault(event.stream_id, RawReply())
            reply.messages.append(event.data)  # re-framed in _messages once the stream ends
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
            headers = {bytes(name): bytes(value) for name, value in event.headers}
            reply = self.replies.setdefault(event.stream_id, RawReply())
            if b"grpc-status" in headers:
                reply.status = int(headers[b"grpc-status"])
                reply.message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode())
        elif isinstance(event, h2.events.StreamReset):
            self.replies.setdefault(event.stream_id, RawReply()).reset = event.error_code
            self._ended.add(event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            reply = self.replies[event.stream_id]
            reply.messages = _messages(b"".join(reply.messages))
            self._ended.add(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            # h2 reads nothing after a GOAWAY (even grpc-core's first, graceful one)
            self.goaway_errors.append(int(event.error_code or 0))
            self.closed = True

    def settings(self) -> dict[int, int]:
        """The server's HTTP/2 SETTINGS (read until they arrive): ``{setting id: value}``,
        e.g. ``h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS``.

        Raises:
            ConnectionError: the server closed the connection before sending them.
        """
        while not self.remote_settings:
            if self.closed:
                raise ConnectionError("the server closed the connection")
            self.receive()
        return self.remote_settings

    def close(self) -> None:
        """Close the socket (no GOAWAY)."""
        self.sock.close()

    def __enter__(self) -> RawGrpcConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _messages(data: bytes) -> list[bytes]:
    """The gRPC messages of a response body (uncompressed: nothing here asks for compression)."""
    messages, pos = [], 0
    while pos + 5 <= len(data):
        length = int.from_bytes(data[pos + 1 : pos + 5], "big")
        messages.append(data[pos + 5 : pos + 5 + length])
        pos += 5 + length
    return messages


#: ``h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS`` (HTTP/2 SETTINGS id 3)
MAX_CONCURRENT_STREAMS = int(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)

__all__ = ["MAX_CONCURRENT_STREAMS", "WBITS", "RawGrpcConnection", "RawReply", "compress", "frame", "varint",
           "zeros"]
