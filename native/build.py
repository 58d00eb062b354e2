"""Build the native gRPC front end (``workbench/frontends/grpc/_native_grpc*.so``), or say why not.

Run by ``make setup`` with the venv's Python. The protobuf classes come from the descriptors the
project already uses (``tritonclient.grpc.service_pb2`` and ``model_config_pb2``): they are
written as a ``FileDescriptorSet`` and ``protoc --descriptor_set_in`` generates the C++ under
``build/native`` (never committed). Needs g++, protoc, pkg-config's ``grpc++`` and ``protobuf``
and pybind11's headers (Debian: ``g++ protobuf-compiler libgrpc++-dev libprotobuf-dev
pybind11-dev``). Without them this prints one line and exits 0: the pure-Python front end
serves (``--grpc-frontend=auto``).

Usage: ``python native/build.py [--force]`` (``--force``: rebuild even when up to date).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "native" / "grpc_frontend.cc"
BUILD = ROOT / "native" / "build"
TARGET = ROOT / "workbench" / "frontends" / "grpc" / f"_native_grpc{sysconfig.get_config_var('EXT_SUFFIX')}"


def _missing() -> list[str]:
    missing = [tool for tool in ("g++", "protoc", "pkg-config") if shutil.which(tool) is None]
    if not missing:
        for package in ("grpc++", "protobuf"):
            if subprocess.run(["pkg-config", "--exists", package]).returncode:
                missing.append(f"pkg-config {package}")
    if not Path("/usr/include/pybind11/pybind11.h").exists():
        try:
            import pybind11  # noqa: F401
        except ImportError:
            missing.append("pybind11 headers")
    return missing


def _pybind11_includes() -> list[str]:
    try:
        import pybind11

        return [f"-I{pybind11.get_include()}"]
    except ImportError:
        return []


def _descriptor_set(path: Path) -> None:
    from google.protobuf import descriptor_pb2
    from tritonclient.grpc import model_config_pb2, service_pb2

    files = descriptor_pb2.FileDescriptorSet()
    for module in (model_config_pb2, service_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    path.write_bytes(files.SerializeToString())


def build(force: bool = False) -> int:
    """Build the extension when the tools are there and it is out of date; 0 in every case but
    a failed compile of present tools (1: the Python front end still serves)."""
    missing = _missing()
    if missing:
        print(f"native gRPC front end not built (missing: {', '.join(missing)}); "
              "the Python front end serves gRPC")
        return 0
    if not force and TARGET.exists() and TARGET.stat().st_mtime > SOURCE.stat().st_mtime:
        print(f"native gRPC front end up to date: {TARGET.relative_to(ROOT)}")
        return 0
    BUILD.mkdir(parents=True, exist_ok=True)
    descriptors = BUILD / "triton.protoset"
    _descriptor_set(descriptors)
    subprocess.run(["protoc", f"--descriptor_set_in={descriptors}", f"--cpp_out={BUILD}",
                    "model_config.proto", "grpc_service.proto"], check=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++", "protobuf"], check=True,
                           capture_output=True, text=True).stdout.split()
    command = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
               f"-I{sysconfig.get_paths()['include']}", *_pybind11_includes(), f"-I{BUILD}",
               str(SOURCE), str(BUILD / "grpc_service.pb.cc"), str(BUILD / "model_config.pb.cc"),
               "-o", str(TARGET), *flags]
    print("building the native gRPC front end (g++, about a minute)")
    if subprocess.run(command).returncode:
        TARGET.unlink(missing_ok=True)
        print("native gRPC front end failed to build (above); the Python front end serves gRPC")
        return 1
    print(f"native gRPC front end built: {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(build(force="--force" in sys.argv[1:]))
