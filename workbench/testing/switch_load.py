"""Continuous load on the v2 ports for the switch to headless (tests and ``bench/``): HTTP
infer on fresh connections and on one keep-alive connection, gRPC infer on one channel and on
fresh channels, each in its own thread, counting requests, failures and refused connections.

A keep-alive HTTP connection closed by the server after a response (``Connection: close``)
is reopened by ``http.client`` for the next request, as any client does; one closed under a
request in flight counts as failed. gRPC clients reconnect after GOAWAY.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

BODY = (b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[' + b",".join([b"1"] * 16)
        + b']},{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":[' + b",".join([b"2"] * 16) + b"]}]}")


@dataclass
class Counts:
    """What one client saw (latencies in seconds)."""

    requests: int = 0
    failed: int = 0
    refused: int = 0
    max_latency_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, started: float, error: str = "", refused: bool = False) -> None:
        self.requests += 1
        self.max_latency_s = max(self.max_latency_s, time.monotonic() - started)
        if refused:
            self.refused += 1
        elif error:
            self.failed += 1
        if error and len(self.errors) < 5:
            self.errors.append(f"{started:.2f}: {error}")


class SwitchLoad:
    """Four clients of ``model`` on ``127.0.0.1``'s HTTP and gRPC ports until :meth:`stop`;
    each request carries ``inputs`` (name -> array, batch dimension included; default:
    add_sub's ``INPUT0`` / ``INPUT1``, FP32 ``[1, 16]``).

    Attributes:
        counts: per client (``http-fresh``, ``http-keepalive``, ``grpc-channel``,
            ``grpc-fresh``).
    """

    def __init__(self, http_port: int, grpc_port: int | None, model: str = "add_sub",
                 inputs: dict[str, np.ndarray] | None = None) -> None:
        self.http_port, self.grpc_port, self.model = http_port, grpc_port, model
        self._inputs = inputs
        self._body = BODY if inputs is None else json.dumps({"inputs": [
            {"name": name, "shape": list(array.shape), "datatype": np_to_triton_dtype(array.dtype),
             "data": array.ravel().tolist()} for name, array in inputs.items()]}).encode()
        self.counts: dict[str, Counts] = {}
        self._stop = threading.Event()
        clients = {"http-fresh": self._http_fresh, "http-keepalive": self._http_keepalive}
        if grpc_port is not None:
            clients |= {"grpc-channel": self._grpc_channel, "grpc-fresh": self._grpc_fresh}
        self._threads = [threading.Thread(target=self._run, args=(name, client), daemon=True)
                         for name, client in clients.items()]

    def start(self) -> SwitchLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Counts:
        """Stop every client; returns the sum of their counts."""
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        total = Counts()
        for counts in self.counts.values():
            total.requests += counts.requests
            total.failed += counts.failed
            total.refused += counts.refused
            total.max_latency_s = max(total.max_latency_s, counts.max_latency_s)
            total.errors += counts.errors
        return total

    def requests(self) -> int:
        return sum(counts.requests for counts in self.counts.values())

    def _run(self, name: str, client) -> None:
        counts = self.counts.setdefault(name, Counts())
        client(counts)

    def _post(self, connection: http.client.HTTPConnection, counts: Counts) -> None:
        started = time.monotonic()
        try:
            connection.request("POST", f"/v2/models/{self.model}/infer", self._body,
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read()
            counts.add(started, "" if response.status == 200 else f"HTTP {response.status}: {body[:200]!r}")
        except ConnectionRefusedError as exc:
            counts.add(started, f"refused: {exc}", refused=True)
            connection.close()
        except (OSError, http.client.HTTPException) as exc:
            counts.add(started, f"{type(exc).__name__}: {exc}")
            connection.close()

    def _http_fresh(self, counts: Counts) -> None:
        while not self._stop.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
            self._post(connection, counts)
            connection.close()

    def _http_keepalive(self, counts: Counts) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        while not self._stop.is_set():
            self._post(connection, counts)
        connection.close()

    def _grpc_inputs(self) -> list[grpcclient.InferInput]:
        arrays = self._inputs or {f"INPUT{i}": np.ones((1, 16), dtype=np.float32) for i in range(2)}
        inputs = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs

    def _grpc_infer(self, client: grpcclient.InferenceServerClient, counts: Counts) -> None:
        started = time.monotonic()
        try:
            client.infer(self.model, self._grpc_inputs(), client_timeout=30)
            counts.add(started)
        except InferenceServerException as exc:
            text = str(exc)
            counts.add(started, text, refused="Connection refused" in text or "connection refused" in text)

    def _grpc_channel(self, counts: Counts) -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        while not self._stop.is_set():
            self._grpc_infer(client, counts)
        client.close()

    def _grpc_fresh(self, counts: Counts) -> None:
        while not self._stop.is_set():
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
            self._grpc_infer(client, counts)
            client.close()


__all__ = ["BODY", "Counts", "SwitchLoad"]
