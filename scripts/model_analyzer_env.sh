#!/bin/bash
# model_analyzer_env.sh [DIR] : the tools `tests/production/test_model_analyzer.py` runs, in DIR
# (default .venv-production/model-analyzer; a cache: finished steps are skipped):
#   DIR/bin/model-analyzer  NVIDIA's triton-model-analyzer from PyPI, in a venv of its own (it pins
#                           its own dependencies: numpy 2, tritonclient, optuna, ...; kept out of .venv)
#   DIR/bin/perf_analyzer   a wrapper of the perf_analyzer C++ binary shipped in the tritonclient
#                           2.41.0 manylinux wheel, with libcudart.so.12 from nvidia-cuda-runtime-cu12
#                           (the binary links it even when it only runs on CPUs) on LD_LIBRARY_PATH;
#                           it also needs Debian's libb64-0d (PRODUCTION_TOOLS in the Makefile).
# Everything comes from PyPI through pip. Prints DIR when done.
set -euo pipefail
DIR=${1:-.venv-production/model-analyzer}
PY=${PYTHON:-python3}
MA_VERSION=1.58.0
PA_TRITONCLIENT=2.41.0
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [[ "$(cat "$DIR/.model-analyzer" 2>/dev/null)" != "$MA_VERSION" ]]; then
    echo "==> venv $DIR: triton-model-analyzer==$MA_VERSION (a few minutes)" >&2
    "$PY" -m venv "$DIR"
    "$DIR/bin/pip" install -q --progress-bar off "triton-model-analyzer==$MA_VERSION" 2>&1 | quiet >&2
    echo "$MA_VERSION" > "$DIR/.model-analyzer"
fi
if [[ ! -x "$DIR/perf_analyzer/perf_analyzer.real" ]]; then
    echo "==> perf_analyzer from the tritonclient==$PA_TRITONCLIENT wheel" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$DIR/bin/pip" download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
        "tritonclient==$PA_TRITONCLIENT" -d "$tmp" 2>&1 | quiet >&2
    mkdir -p "$DIR/perf_analyzer"
    "$DIR/bin/python" - "$tmp"/tritonclient-*.whl "$DIR/perf_analyzer" <<'EOF'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/data/bin/perf_analyzer"))
    with archive.open(name) as source, open(os.path.join(out, "perf_analyzer.tmp"), "wb") as target:
        target.write(source.read())
os.chmod(os.path.join(out, "perf_analyzer.tmp"), 0o755)
os.replace(os.path.join(out, "perf_analyzer.tmp"), os.path.join(out, "perf_analyzer.real"))
EOF
fi
if [[ ! -f "$DIR/perf_analyzer/cudart/.ok" ]]; then
    rm -rf "$DIR/perf_analyzer/cudart"
    "$DIR/bin/pip" install -q --progress-bar off --no-deps --target "$DIR/perf_analyzer/cudart" \
        "nvidia-cuda-runtime-cu12<13" 2>&1 | quiet >&2
    touch "$DIR/perf_analyzer/cudart/.ok"
fi
CUDART=$(dirname "$(find "$DIR/perf_analyzer/cudart" -name 'libcudart.so.12*' | head -1)")
cat > "$DIR/bin/perf_analyzer" <<EOF
#!/bin/sh
# perf_analyzer from tritonclient==$PA_TRITONCLIENT with libcudart.so.12 (written by scripts/model_analyzer_env.sh)
export LD_LIBRARY_PATH="$CUDART\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$DIR/perf_analyzer/perf_analyzer.real" "\$@"
EOF
chmod +x "$DIR/bin/perf_analyzer"
echo "$DIR"
