"""The coalescing transport under uvicorn's protocol: order kept, head and body in one write.

The end-to-end tier (tests/e2e) serves every request through it; these tests pin the write
pattern on a recording transport (the socket boundary).
"""

from __future__ import annotations

import asyncio

from workbench.frontends.http.protocol import CoalescingTransport


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closed = False

    def write(self, data) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks) -> None:
        self.calls.append(("writelines", b"".join(bytes(c) for c in chunks)))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5)}.get(name, default)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n"


async def test_head_and_body_leave_in_one_call() -> None:
    real = RecordingTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    transport.write(HEAD)
    assert real.calls == []  # held back
    assert transport.get_write_buffer_size() == len(HEAD)
    transport.write(b"body")
    assert real.calls == [("writelines", HEAD + b"body")]
    await asyncio.sleep(0)
    assert len(real.calls) == 1  # the scheduled flush finds nothing left


async def test_a_lone_head_is_flushed_in_the_next_loop_iteration() -> None:
    real = RecordingTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert real.calls == [("write", HEAD)]
    transport.write(b"chunk")  # a streamed body chunk goes straight out, in order
    assert real.calls[-1] == ("write", b"chunk")


async def test_close_sends_what_is_held_first_and_other_calls_pass_through() -> None:
    real = RecordingTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    transport.close()
    assert real.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")] and real.closed
    assert transport.get_extra_info("peername") == ("127.0.0.1", 5)
    await asyncio.sleep(0)
    assert len(real.calls) == 1  # nothing written twice, nothing after close


async def test_chunked_body_with_a_content_length_is_read_chunked_and_the_connection_closed() -> None:
    import uvicorn

    from workbench.frontends.http.protocol import CoalescingHttpToolsProtocol

    async def echo(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    config = uvicorn.Config(echo, host="127.0.0.1", port=0, http=CoalescingHttpToolsProtocol,
                            lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)  # until the server closes
        writer.close()
    finally:
        server.should_exit = True
        await task
    assert reply.startswith(b"HTTP/1.1 200")
    assert reply.endswith(b"\r\n\r\nhello")
    assert b"connection: close" in reply.lower()
