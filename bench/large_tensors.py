"""Issue 20, target 4: a large FP32 tensor through an identity model, against this machine's copy limit.

One input of ``--mib`` MiB (FP32, default 64) goes to a model that does no compute and comes back as an output
of the same size, over:

* ``grpc``      tritonclient.grpc, ``raw_input_contents`` / ``raw_output_contents``;
* ``http``      tritonclient.http, binary tensor data extension (input and output binary);
* ``shm-http``  system shared memory (tritonclient.utils.shared_memory), input and output regions, HTTP;
* ``shm-grpc``  the same over gRPC.

Per point: ``--reps`` timed round trips (the client call only: the input is written into its region once,
as perf_analyzer does, and the output region is read as a numpy view), median reported. Each round also
times ``np.copyto`` of the same bytes (the copy limit, measured in the same minute). Reported:

* ``ms``: median round trip; ``copies``: that time in units of one 64 MiB ``np.copyto``;
* ``GB/s``: (input + output bytes) / median round trip, both directions counted;
* ``copy GB/s``: bytes copied / median ``np.copyto`` time (one direction: a copy reads and writes them);
* ``of limit``: GB/s / copy GB/s. Target 4: shared memory >= 0.5 (within 2x of the copy limit).

Servers, alternated per round (A, B, A, B): ``ours`` (``workbench serve``, PYTHONPATH from the environment;
``before``: the same from ``--before-path``, e.g. ``git archive <commit> workbench | tar -x -C DIR``;
models ``identity_onnx`` (ONNX Identity) and ``identity_py`` (Python backend)) and ``triton`` (the real
tritonserver via ../shared/bench/tritonserver.sh; python backend only: ``identity_py``). Run it under the
benchmark lock::

    flock /tmp/bench.lock /work/main/.venv/bin/python bench/large_tensors.py --servers ours,triton --rounds 3

Writes a Markdown table to stdout (and ``--out FILE`` when given); verifies every answer equals its input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED_BENCH = Path(os.environ.get("SHARED_BENCH", HERE.parent.parent / "shared" / "bench"))
if not SHARED_BENCH.exists():
    SHARED_BENCH = Path("/work/shared/bench")
PATHS = ("grpc", "http", "shm-http", "shm-grpc")
MIB = 1 << 20

PY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
'''


def _config(name: str, backend: str) -> str:
    return (f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'instance_group [ { count: 1 kind: KIND_CPU } ]\n')


def build_repositories(root: Path) -> tuple[Path, Path]:
    """``root/ours`` (identity_onnx + identity_py) and ``root/triton`` (identity_py only)."""
    import onnx
    from onnx import TensorProto, helper

    ours, triton = root / "ours", root / "triton"
    for repo in (ours, triton):
        (repo / "identity_py" / "1").mkdir(parents=True, exist_ok=True)
        (repo / "identity_py" / "1" / "model.py").write_text(PY_MODEL)
        (repo / "identity_py" / "config.pbtxt").write_text(_config("identity_py", "python"))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (ours / "identity_onnx" / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(ours / "identity_onnx" / "1" / "model.onnx"))
    (ours / "identity_onnx" / "config.pbtxt").write_text(_config("identity_onnx", "onnxruntime"))
    return ours, triton


class Server:
    """A server process on the given ports, started and stopped around each round."""

    def __init__(self, kind: str, repo: Path, ports: tuple[int, int, int], log: Path,
                 profile: str | None = None) -> None:
        self.kind, self.repo, self.ports, self.log, self.profile = kind, repo, ports, log, profile
        self.models = ["identity_py"] if kind == "triton" else ["identity_onnx", "identity_py"]
        self.process: subprocess.Popen | None = None
        self.spy: subprocess.Popen | None = None

    def start(self) -> None:
        http, grpc, metrics = self.ports
        flags = [f"--model-repository={self.repo}", "--http-address=127.0.0.1", f"--http-port={http}",
                 f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
        env = dict(os.environ)
        if self.kind == "before":  # our server from another checkout (--before-path)
            env["PYTHONPATH"] = os.environ["LARGE_BEFORE_PATH"]
        if self.kind in ("ours", "before"):
            command = [str(Path(sys.executable).parent / "workbench"), "serve", *flags, "--allow-client-shm=true",
                       f"--http-max-input-size={256 * MIB}"]  # Triton 2.51 has no such flag
        else:
            command = ["bash", str(SHARED_BENCH / "tritonserver.sh"), *flags, "--grpc-address=127.0.0.1",
                       "--metrics-address=127.0.0.1"]
        self.process = subprocess.Popen(command, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)
        deadline = time.monotonic() + 180
        for model in self.models:
            while not self._ready(model):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.kind} did not start; see {self.log}")
                time.sleep(0.3)
        if self.profile:  # py-spy's collapsed stacks of the measured calls, native frames included
            self.spy = subprocess.Popen([os.environ.get("PY_SPY", "/tmp/prof-venv/bin/py-spy"), "record",
                                         "--format", "raw", "--native", "-r", "250", "-o", self.profile,
                                         "--pid", str(self.process.pid)], stdout=subprocess.DEVNULL)
            time.sleep(1)

    def _ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[0]}/v2/models/{model}/ready",
                                        timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.spy is not None:
            self.spy.send_signal(2)  # py-spy writes its output on SIGINT
            self.spy.wait(60)
            self.spy = None
        os.killpg(self.process.pid, 15)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()
        self.process = None


def copy_limit(data: np.ndarray, reps: int) -> float:
    """Median seconds of ``np.copyto`` of ``data`` into a fresh (already touched) array."""
    target = np.empty_like(data)
    np.copyto(target, data)
    return median_seconds(lambda: np.copyto(target, data), reps)


def median_seconds(call, reps: int) -> float:
    """Median wall-clock seconds of ``reps`` calls of ``call()``."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Clients:
    """tritonclient HTTP and gRPC clients with system shared-memory regions for input and output."""

    def __init__(self, ports: tuple[int, int, int], data: np.ndarray, tag: str) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        import tritonclient.utils.shared_memory as shm

        self.grpcclient, self.httpclient, self.shm = grpcclient, httpclient, shm
        self.http = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}", connection_timeout=300,
                                                     network_timeout=300)
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        self.data = data
        size = data.nbytes
        self.keys = (f"/wb_large_in_{tag}_{os.getpid()}", f"/wb_large_out_{tag}_{os.getpid()}")
        self.handles = [shm.create_shared_memory_region(f"large_{i}", key, size)
                        for i, key in enumerate(self.keys)]
        shm.set_shared_memory_region(self.handles[0], [data])
        self.http.unregister_system_shared_memory()
        for i, key in enumerate(self.keys):
            self.http.register_system_shared_memory(f"large_{i}", key, size)

    def call(self, path: str, model: str) -> np.ndarray:
        """One round trip; the output as numpy (a view of the output region for shm paths)."""
        size, shape = self.data.nbytes, list(self.data.shape)
        module = self.grpcclient if path in ("grpc", "shm-grpc") else self.httpclient
        client = self.grpc if module is self.grpcclient else self.http
        tensor = module.InferInput("INPUT0", shape, "FP32")
        if path.startswith("shm"):
            tensor.set_shared_memory("large_0", size)
            output = module.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory("large_1", size)
        elif module is self.httpclient:
            tensor.set_data_from_numpy(self.data, binary_data=True)
            output = module.InferRequestedOutput("OUTPUT0", binary_data=True)
        else:
            tensor.set_data_from_numpy(self.data)
            output = module.InferRequestedOutput("OUTPUT0")
        result = client.infer(model, [tensor], outputs=[output])
        if path.startswith("shm"):
            return self.shm.get_contents_as_numpy(self.handles[1], np.float32, shape)
        return result.as_numpy("OUTPUT0")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the server may be gone already
            self.http.unregister_system_shared_memory()
        for handle in self.handles:
            self.shm.destroy_shared_memory_region(handle)
        self.grpc.close()
        self.http.close()


def measure(clients: Clients, path: str, model: str, reps: int) -> float:
    """Median seconds of ``reps`` round trips (after one checked warm-up call)."""
    answer = clients.call(path, model)
    if not np.array_equal(answer, clients.data):
        raise AssertionError(f"{path} {model}: the output differs from the input")
    return median_seconds(lambda: clients.call(path, model), reps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--servers", default="ours",
                        help="comma list of ours, before, triton (alternated in each round)")
    parser.add_argument("--before-path", help="PYTHONPATH of the 'before' server: an older checkout")
    parser.add_argument("--models", default="identity_onnx,identity_py")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--ports", default="8200,8201,8202")
    parser.add_argument("--out")
    parser.add_argument("--profile", help="py-spy raw (collapsed) output file for our server (one round)")
    args = parser.parse_args()
    http_port, grpc_port, metrics_port = (int(p) for p in args.ports.split(","))
    ports = (http_port, grpc_port, metrics_port)
    if args.before_path:
        os.environ["LARGE_BEFORE_PATH"] = args.before_path
    data = np.random.default_rng(0).random(args.mib * MIB // 4, dtype=np.float32)
    root = Path(tempfile.mkdtemp(prefix="wb_large_"))
    ours_repo, triton_repo = build_repositories(root)
    rows: dict[tuple[str, str, str], list[float]] = {}
    copies: list[float] = []
    for round_no in range(args.rounds):
        for kind in args.servers.split(","):
            copies.append(copy_limit(data, 9))
            server = Server(kind, triton_repo if kind == "triton" else ours_repo, ports, root / f"{kind}.log",
                            args.profile if kind == "ours" else None)
            server.start()
            clients = Clients(ports, data, f"{kind}{round_no}")
            try:
                for model in args.models.split(","):
                    if model not in server.models:
                        continue
                    for path in args.paths.split(","):
                        seconds = measure(clients, path, model, args.reps)
                        rows.setdefault((kind, model, path), []).append(seconds)
                        print(f"round {round_no} {kind} {model} {path}: {seconds * 1e3:.1f} ms", file=sys.stderr)
            finally:
                clients.close()
                server.stop()
    copy_s = statistics.median(copies)
    copy_gbps = data.nbytes / copy_s / 1e9
    lines = [f"copy limit: np.copyto of {args.mib} MiB, median {copy_s * 1e3:.2f} ms = {copy_gbps:.2f} GB/s "
             f"(per round: {', '.join(f'{c * 1e3:.1f}' for c in copies)} ms)", "",
             "| server | model | path | ms (median of rounds) | per round ms | copies | GB/s (in+out) | of limit |",
             "|---|---|---|---:|---|---:|---:|---:|"]
    for (kind, model, path), values in rows.items():
        seconds = statistics.median(values)
        gbps = 2 * data.nbytes / seconds / 1e9
        lines.append(f"| {kind} | {model} | {path} | {seconds * 1e3:.1f} | "
                     f"{' / '.join(f'{v * 1e3:.0f}' for v in values)} | {seconds / copy_s:.1f} | "
                     f"{gbps:.2f} | {gbps / copy_gbps:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
