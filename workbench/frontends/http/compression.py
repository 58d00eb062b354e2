"""HTTP body compression as Triton's HTTP frontend does it (``http_server.cc``, ``data_compressor.h``).

Requests: ``Content-Encoding: gzip`` or ``deflate`` bodies are inflated (zlib detects the
gzip or zlib wrapper by itself, as Triton's ``inflateInit2(15 | 32)`` does); ``identity``
or no header leaves the body alone; anything else is refused. The decompressed size is
bounded by ``--http-max-input-size`` while inflating (a zip bomb never fills memory).

Responses: compressed when ``Accept-Encoding`` picks ``gzip`` or ``deflate`` (q-values
honoured, Triton's ``CompressionTypeUsed``); ``deflate`` is the zlib format, as
tritonclient expects. ``Inference-Header-Content-Length`` always counts the uncompressed
JSON header.
"""

from __future__ import annotations

import asyncio
import zlib

from workbench import InvalidArgument, Unsupported

#: bodies at least this large are (de)compressed on a worker thread (zlib releases the GIL)
THREAD_THRESHOLD = 256 * 1024
_AUTO_WBITS = zlib.MAX_WBITS | 32  # accept the gzip and the zlib wrapper
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
_KNOWN = ("identity", "deflate", "gzip")


def request_encoding(header: str | None) -> str | None:
    """``"gzip"`` / ``"deflate"`` for a compressed request body, None for an identity one.

    Raises:
        Unsupported: another encoding (Triton: "Unsupported compression type", HTTP 501).
    """
    if not header or header == "identity":
        return None
    if header in ("gzip", "deflate"):
        return header
    raise Unsupported("Unsupported compression type")


def _inflate(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(_AUTO_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgument(f"failed to decompress the request body: {exc}") from None
    if len(data) > limit:
        raise InvalidArgument(
            f"Decompressed data size exceeds the maximum allowed value of {limit} bytes. "
            "Use --http-max-input-size to increase the limit."
        )
    if not inflater.eof:
        raise InvalidArgument("failed to decompress the request body: the compressed data is truncated")
    return data


async def decompress(body: bytes, limit: int) -> bytes:
    """Inflate a gzip or deflate (zlib) request body of at most ``limit`` bytes once inflated.

    Raises:
        InvalidArgument: empty, corrupt or truncated data ("failed to decompress ..."), or
            more than ``limit`` bytes once inflated (Triton's "Decompressed data size exceeds
            the maximum allowed value of N bytes. Use --http-max-input-size ...").
    """
    if not body:
        raise InvalidArgument("nothing to be decompressed")
    if len(body) < THREAD_THRESHOLD:
        return _inflate(body, limit)
    return await asyncio.to_thread(_inflate, body, limit)


def response_encoding(accept: str | None) -> str | None:
    """The encoding ``Accept-Encoding`` selects: ``"gzip"``, ``"deflate"`` or None (identity).

    Follows Triton's ``CompressionTypeUsed``: comma-separated entries, optional ``;q=``
    weights (default 1), the highest weight among identity/deflate/gzip wins, the first
    one on ties; malformed or unknown entries are skipped.
    """
    if not accept:
        return None
    chosen, weight = "identity", 0.0
    for entry in accept.split(","):
        name, _, q = entry.strip().partition(";q=")
        try:
            entry_weight = float(q) if q else 1.0
        except ValueError:
            continue
        if name in _KNOWN and entry_weight > weight:
            chosen, weight = name, entry_weight
    return None if chosen == "identity" else chosen


def _deflate(payload: bytes, encoding: str) -> bytes:
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _WBITS[encoding])
    return compressor.compress(payload) + compressor.flush()


async def compress(payload: bytes, encoding: str) -> bytes:
    """Compress a response body: ``gzip`` (gzip wrapper) or ``deflate`` (zlib wrapper),
    zlib's default level, as Triton's ``DataCompressor::CompressData``."""
    if len(payload) < THREAD_THRESHOLD:
        return _deflate(payload, encoding)
    return await asyncio.to_thread(_deflate, payload, encoding)
