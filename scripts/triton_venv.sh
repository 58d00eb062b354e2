#!/usr/bin/env bash
# Make (once) the venv of the real tritonserver 2.51.0 the attach tests run against: the server,
# libtritonserver and the python backend come bundled in the nvidia-pytriton 0.7.0 wheel
# (installed --no-deps: its Python API is not needed), numpy<2 for the python backend (with numpy 2
# every inference of this release fails), as ../shared/bench/setup.sh does for the benchmarks.
#   bash scripts/triton_venv.sh [VENV]     # default: ${WORKBENCH_TRITON_VENV:-$HOME/.cache/workbench/triton-2.51}
# Prints the venv's path; exit 1 (with why) when the server's libraries are missing.
set -euo pipefail
V=${1:-${WORKBENCH_TRITON_VENV:-$HOME/.cache/workbench/triton-2.51}}
KEY="v1 nvidia-pytriton==0.7.0 numpy<2"
log() { echo "[triton_venv] $*" >&2; }
if [[ ! -f "$V/.workbench_ok" || "$(cat "$V/.workbench_ok")" != "$KEY" ]]; then
  log "creating $V (pip from PyPI)"
  rm -rf "$V"; mkdir -p "$(dirname "$V")"; python3 -m venv "$V"
  "$V/bin/pip" install -q --upgrade pip wheel >&2
  "$V/bin/pip" install -q "numpy<2" >&2
  "$V/bin/pip" install -q --no-deps nvidia-pytriton==0.7.0 >&2
  SITE=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  TS="$SITE/pytriton/tritonserver"
  PYV=$("$V/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # the wheel keeps one python-backend stub per Python version aside; the backend wants it beside libtriton_python.so
  STUB="$TS/python_backend_stubs/$PYV/triton_python_backend_stub"
  [[ -f "$STUB" ]] || { log "no python-backend stub for Python $PYV in $TS/python_backend_stubs"; exit 1; }
  cp "$STUB" "$TS/backends/python/"
  missing=$(LD_LIBRARY_PATH="$SITE/nvidia_pytriton.libs" ldd "$TS/bin/tritonserver" \
    "$TS/backends/python/triton_python_backend_stub" "$TS/backends/python/libtriton_python.so" | grep "not found" || true)
  [[ -z "$missing" ]] || { log "tritonserver: missing libraries (apt-get install libb64-0d libpython$PYV): $missing"; exit 1; }
  echo "$KEY" > "$V/.workbench_ok"
fi
echo "$V"
