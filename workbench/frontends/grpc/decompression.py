"""Compressed request messages (``grpc-encoding: gzip`` / ``deflate``), inflated here with a bound.

grpc-core (grpcio 1.85) inflates a compressed message up to ``grpc.max_receive_message_length``,
the same bound an uncompressed message has, and has no separate one: with
``--grpc-max-message-size`` at Triton's 2 GiB - 1 (so large uncompressed tensors pass), a 1 MiB
message inflating to 1 GiB cost the server 3.3 GB at its peak, most of it kept (bench/RESULTS.md,
"Issue 30"). So :func:`workbench.frontends.grpc.server.channel_options` turns grpc-core's
decompression off (``grpc.per_message_decompression``) and compressed messages reach the
deserializers as sent, to be inflated here up to ``--grpc-max-decompressed-size`` (64 MiB by
default, as ``--http-max-input-size``): zlib stops at the bound, so a bomb never costs more.
tritonserver has no such flag (its grpc-core inflates up to its INT32_MAX message size).

grpc hands Python neither the message's compressed flag nor the call's ``grpc-encoding``, so a
compressed message is told by its first bytes (:func:`looks_compressed`): gzip's ``1f 8b`` can
never begin a protobuf message (field 3 with the invalid wire type 7); a zlib header (grpc's
``deflate``) could in theory (a varint of an odd field 1..15 first, which no Triton client
writes), so bytes that look like zlib but do not inflate are parsed as protobuf after all.

Errors: more than the bound once inflated is RESOURCE_EXHAUSTED (grpc-core's code for a message
larger than the max); corrupt or truncated data is INVALID_ARGUMENT, never grpc-core's INTERNAL.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

#: zlib's wbits that accept the gzip and the zlib wrapper (grpc's ``gzip`` and ``deflate``)
_ANY_WRAPPER = zlib.MAX_WBITS | 32
_GZIP_MAGIC = b"\x1f\x8b"


class Undecodable:
    """A request that will not be served: ``code`` (INVALID_ARGUMENT for bytes that do not
    parse or inflate, RESOURCE_EXHAUSTED for too much once inflated) and ``message`` why."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        self.message = message
        self.code = code


def looks_compressed(data: bytes) -> bool:
    """Whether ``data`` starts with a gzip or a zlib header (see the module docstring)."""
    if len(data) < 2:
        return False
    first = data[0]
    if first & 0x0F != 8:  # a Triton message begins with a length-delimited field (x2 / xa)
        return first == 0x1F and data[1] == 0x8B  # gzip
    # zlib: deflate (CM 8), a window of at most 32 KiB, the header check, no preset dictionary
    flg = data[1]
    return first >> 4 <= 7 and (first << 8 | flg) % 31 == 0 and not flg & 0x20


class Compressed:
    """A compressed request message, parsed by :meth:`open` (on a worker thread: inflating up to
    the bound may take a second of CPU).

    Args:
        data: the message as received.
        parse: the message type's parser (``FromString`` or the raw-wire one).
        limit: the most bytes it may inflate to.
    """

    __slots__ = ("data", "limit", "parse")

    def __init__(self, data: bytes, parse: Callable[[bytes], Any], limit: int) -> None:
        self.data = data
        self.parse = parse
        self.limit = limit

    def open(self) -> Any:
        """The parsed message, or an :class:`Undecodable` saying why not."""
        try:
            inflated = inflate(self.data, self.limit)
        except _TooLarge:
            return Undecodable(
                f"Decompressed message larger than max (more than {self.limit} bytes once "
                "decompressed); use --grpc-max-decompressed-size to increase the limit",
                grpc.StatusCode.RESOURCE_EXHAUSTED)
        except zlib.error as exc:
            if self.data[:2] != _GZIP_MAGIC:  # a zlib look-alike: maybe a plain message
                try:
                    return self.parse(self.data)
                except DecodeError:
                    pass
            return Undecodable(f"failed to decompress the request message: {exc}")
        try:
            return self.parse(inflated)
        except DecodeError as exc:
            return Undecodable(f"failed to parse the request message: {exc}")


class _TooLarge(Exception):
    pass


def inflate(data: bytes, limit: int) -> bytes:
    """Inflate one gzip or zlib stream to at most ``limit`` bytes (zlib stops there).

    Raises:
        _TooLarge: it inflates to more than ``limit`` bytes.
        zlib.error: corrupt, truncated, or followed by other bytes.
    """
    inflater = zlib.decompressobj(_ANY_WRAPPER)
    inflated = inflater.decompress(data, limit + 1)
    if len(inflated) > limit:
        raise _TooLarge
    if not inflater.eof:
        raise zlib.error("the compressed data is truncated")
    if inflater.unused_data:
        raise zlib.error(f"{len(inflater.unused_data)} bytes after the end of the compressed data")
    return inflated


__all__ = ["Compressed", "Undecodable", "inflate", "looks_compressed"]
