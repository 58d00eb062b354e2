"""What three attacks on the gRPC port cost a `workbench serve` process (issue 30, findings 1-3).

Each scenario starts its own `workbench serve` (the code on PYTHONPATH) and prints Markdown
table rows. Not a pass/fail test: the tests assert the mechanisms, this measures the memory
and the health probes.

* ``bomb``: ``--bombs`` ModelInfer messages, one after another on one connection, each
  ``--bomb-mib`` MiB of zeros in ``raw_input_contents`` once inflated, sent gzip-compressed
  (``grpc-encoding: gzip``; about 1 MiB on the wire per GiB) by a raw HTTP/2 client
  (:mod:`workbench.testing.grpc_wire`): the status of each, the server's peak RSS growth
  (``VmHWM`` after, peak reset before) and the RSS kept 5 s after the last.
* ``unread``: ``--requests`` requests of about 55 KB of text each to the decoupled
  ``token_streamer`` sample (one response per word piece, ~11k per request) on one
  ``ModelStreamInfer`` stream whose client never reads: the server's RSS every 10 s for
  ``--seconds`` s, then what the client gets when it reads at last.
* ``flood``: ``--connections`` idle HTTP/2 connections to the gRPC port (preface and SETTINGS,
  then nothing) from child processes, held ``--seconds`` s, while the parent asks HTTP
  ``/v2/health/live`` on a new connection every 0.25 s (2 s timeout): probes answered / failed,
  the longest run without an answer, the server's open fds at most; then ``--streams`` idle
  ``ModelStreamInfer`` streams on one connection (the client ignores the server's
  MAX_CONCURRENT_STREAMS): streams the server took and refused, RSS growth.

    PYTHONPATH=$PWD python bench/grpc_attacks.py bomb --bomb-mib 1024 --bombs 4
    PYTHONPATH=$PWD python bench/grpc_attacks.py unread --requests 200 --seconds 60
    PYTHONPATH=$PWD python bench/grpc_attacks.py flood --connections 21000 --streams 20000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import tempfile
import threading
import time
from pathlib import Path

import grpc
import httpx
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench.testing.grpc_wire import RawGrpcConnection, compress, frame, varint, zeros
from workbench.testing.models import build_test_repository
from workbench.testing.process import ServerProcess, memory_kib, reset_peak_memory

ROOT = Path(__file__).resolve().parents[1]
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # and empty SETTINGS


def mb(kib: int) -> str:
    return f"{kib / 1024:.0f} MB"


# --------------------------------------------------------------------------- bomb
def bomb_payload(mib: int) -> bytes:
    """A gzip ModelInferRequest for add_sub whose one raw input is ``mib`` MiB of zeros (its
    shape says 64 bytes: the engine refuses it once decoded)."""
    request = pb.ModelInferRequest(model_name="add_sub")
    for i in range(2):
        request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
    size = mib << 20
    head = request.SerializeToString() + bytes([7 << 3 | 2]) + varint(size)
    return compress([head, *zeros(size)], "gzip")


def bomb(args: argparse.Namespace) -> None:
    payload = bomb_payload(args.bomb_mib)
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_test_repository(Path(tmp))
        server = ServerProcess([f"--model-repository={repo}", "--allow-metrics=false", *args.flags])
        pid = server.process.pid
        try:
            start = memory_kib(pid)["VmRSS"]
            print(f"bomb: {len(payload) / 2**20:.2f} MiB on the wire, {args.bomb_mib} MiB inflated; "
                  f"server RSS at start {mb(start)}\n")
            print("| message | status | answer | wall | peak RSS growth | RSS after |")
            print("|---|---|---|---|---|---|")
            with RawGrpcConnection(server.grpc_port, timeout_s=600) as connection:
                for n in range(args.bombs):
                    before = memory_kib(pid)["VmRSS"]
                    reset_peak_memory(pid)
                    started = time.perf_counter()
                    reply = connection.call(MODEL_INFER, frame(payload, compressed=True), "gzip")
                    took = time.perf_counter() - started
                    after = memory_kib(pid)
                    status = grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == reply.status)).name \
                        if reply.status is not None else f"reset {reply.reset}"
                    print(f"| {n + 1} | {status} | {reply.message[:90]} | {took:.2f} s "
                          f"| {mb(after['VmHWM'] - before)} | {mb(after['VmRSS'])} |", flush=True)
            time.sleep(5)
            print(f"\nRSS 5 s after the last message: {mb(memory_kib(pid)['VmRSS'])} "
                  f"(start {mb(start)}); health live: {_live(server.port)}")
        finally:
            server.stop()


def _live(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


# --------------------------------------------------------------------------- unread stream
def stream_requests(count: int):
    text = np.array([("tokenizer " * 5500).encode()], dtype=object)  # 55 KB, 11,000 word pieces
    from tritonclient.utils import serialize_byte_tensor

    raw = serialize_byte_tensor(text).item()
    for n in range(count):
        request = pb.ModelInferRequest(model_name="token_streamer", id=str(n), raw_input_contents=[raw])
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
        yield request


def unread(args: argparse.Namespace) -> None:
    repository = ROOT / "sample_models" / "repository"
    server = ServerProcess([f"--model-repository={repository}", "--model-control-mode=explicit",
                            "--load-model=token_streamer", "--allow-metrics=false", *args.flags])
    pid = server.process.pid
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        start = memory_kib(pid)["VmRSS"]
        call = stub.ModelStreamInfer(stream_requests(args.requests))  # never read (yet)
        print(f"unread: {args.requests} requests of 55 KB to token_streamer on one stream; "
              f"server RSS at start {mb(start)}\n")
        print("| s | server RSS |")
        print("|---|---|")
        began = time.monotonic()
        for second in range(0, args.seconds + 1, 10):
            time.sleep(max(0.0, began + second - time.monotonic()))
            print(f"| {second} | {mb(memory_kib(pid)['VmRSS'])} |", flush=True)
        read, status = [0], ["still open after 20 s of reading: cancelled by the client"]

        def drain() -> None:
            try:
                for _ in call:
                    read[0] += 1
                status[0] = "OK"
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.CANCELLED:
                    status[0] = f"{error.code().name}: {error.details()}"

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        reader.join(20)
        call.cancel()
        reader.join()
        print(f"\nthe client then read {read[0]} responses; the stream: {status[0]}")
        time.sleep(5)
        print(f"RSS 5 s after the stream ended: {mb(memory_kib(pid)['VmRSS'])}")
        channel.close()
    finally:
        server.stop()


# --------------------------------------------------------------------------- floods
def hold_connections(port: int, count: int, hold_s: float, results) -> None:
    """(A child process) open ``count`` idle HTTP/2 connections, hold them, report how many
    the server closed."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sockets, refused = [], 0
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(PREFACE)
            sockets.append(sock)
        except OSError:
            refused += 1
    opened = time.monotonic()
    time.sleep(max(0.0, hold_s - (time.monotonic() - opened)))
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    closed += 1
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        sock.close()
    results.put((len(sockets), refused, closed))


def flood(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_test_repository(Path(tmp))
        server = ServerProcess([f"--model-repository={repo}", "--allow-metrics=false", *args.flags])
        pid = server.process.pid
        try:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            print(f"flood: {args.connections} idle HTTP/2 connections to the gRPC port, held "
                  f"{args.seconds} s; server RLIMIT_NOFILE {soft}\n")
            results: multiprocessing.Queue = multiprocessing.Queue()
            per_child = 10_000
            children = [multiprocessing.Process(
                target=hold_connections,
                args=(server.grpc_port, min(per_child, args.connections - start), args.seconds, results))
                for start in range(0, args.connections, per_child)]
            for child in children:
                child.start()
            answered, failed, longest, fds = _probe(server.port, pid, args.seconds + 5)
            counts = [results.get() for _ in children]
            for child in children:
                child.join()
            opened = sum(c[0] for c in counts)
            print("| connections opened | refused at connect | closed by the server | health probes answered "
                  "| failed | longest run without an answer | server fds at most |")
            print("|---|---|---|---|---|---|---|")
            print(f"| {opened} | {sum(c[1] for c in counts)} | {sum(c[2] for c in counts)} | {answered} "
                  f"| {failed} | {longest:.1f} s | {fds} |\n", flush=True)
            streams(server.grpc_port, pid, args.streams)
        finally:
            server.stop()


def _probe(port: int, pid: int, seconds: float) -> tuple[int, int, float, int]:
    """Ask /v2/health/live on a new connection every 0.25 s for ``seconds``."""
    answered = failed = fds = 0
    longest, last_ok = 0.0, time.monotonic()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ok = httpx.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=2).status_code == 200
        except httpx.HTTPError:
            ok = False
        now = time.monotonic()
        if ok:
            answered += 1
            last_ok = now
        else:
            failed += 1
            longest = max(longest, now - last_ok)
        fds = max(fds, len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.25)
    return answered, failed, longest, fds


def streams(port: int, pid: int, count: int) -> None:
    before = memory_kib(pid)["VmRSS"]
    with RawGrpcConnection(port, timeout_s=2) as connection:
        advertised = connection.settings().get(3, "none")
        # an attacker ignores the server's MAX_CONCURRENT_STREAMS
        connection.h2.remote_settings[3] = 2**31 - 1
        connection.h2.remote_settings.acknowledge()
        for _ in range(count):
            connection.open(STREAM_INFER)
        try:
            while True:
                connection.receive()
        except TimeoutError:
            pass  # quiet for 2 s: the server took what it takes
        refused = sum(1 for reply in connection.replies.values() if reply.reset is not None)
        time.sleep(3)
        after = memory_kib(pid)["VmRSS"]
        print("| streams opened | server's MAX_CONCURRENT_STREAMS | refused (RST_STREAM) | taken | RSS growth |")
        print("|---|---|---|---|---|")
        print(f"| {count} | {advertised} | {refused} | {count - refused} | {mb(after - before)} |")
    time.sleep(3)
    print(f"\nRSS 3 s after the connection closed: {mb(memory_kib(pid)['VmRSS'] - before)} above before")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=["bomb", "unread", "flood"])
    parser.add_argument("--bomb-mib", type=int, default=1024)
    parser.add_argument("--bombs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--connections", type=int, default=21_000)
    parser.add_argument("--streams", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("flags", nargs="*", help="extra `workbench serve` flags (after --)")
    args = parser.parse_args()
    {"bomb": bomb, "unread": unread, "flood": flood}[args.scenario](args)


if __name__ == "__main__":
    main()
