#!/usr/bin/env bash
# GPU checks: on a machine with an NVIDIA GPU, set up the environment, add the GPU extras and
# run the GPU-only tests, then print one table row per check (PASS / FAIL / SKIP, seconds, note).
#
#   bash tests/gpu/run_gpu_checks.sh [--no-setup] [--python PY] [--results DIR]
#
# Checks: ONNX Runtime CUDA and TensorRT execution providers, PyTorch CUDA, the TensorRT plan
# built from minilm_encoder, NVML metrics and per-instance GPU memory, the dali backend on the
# GPU (KIND_GPU and nvJPEG "mixed" decoding; DALI comes with the dev extra) (all `pytest tests/gpu`),
# and CUDA shared memory (tests/e2e/test_shared_memory_e2e.py, the CUDA round trip).
#
# Setup (skipped by --no-setup or GPU_CHECKS_SKIP_INSTALL=1): `make setup-dev` (the .venv with the
# test tools, the sample models), then, only where a GPU exists and a package is missing, the `gpu` extra of
# pyproject.toml one package at a time: onnxruntime-gpu (replacing the CPU onnxruntime wheel,
# same version), nvidia-ml-py, cuda-python, tensorrt-cu12, and a CUDA build of the pinned torch
# (GPU_CHECKS_TORCH_INDEX_URL, if set, is passed to pip as --index-url for it). An install that
# cannot be done (no network, say) is a SKIP row, and the tests needing it skip themselves.
#
# Python: --python PY, else GPU_CHECKS_PYTHON, else .venv/bin/python, else python3; this
# checkout is put first on PYTHONPATH. Results (JUnit XML, logs, table.txt) go to --results DIR,
# else GPU_CHECKS_RESULTS, else a new folder under /tmp. Time: GPU_CHECKS_BUDGET_S (default 480)
# bounds the whole run; every step runs under `timeout` within what is left.
# Exit status: 1 if any row is FAIL, 0 otherwise (a machine without a GPU gives SKIP rows, 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

SETUP=1
[[ ${GPU_CHECKS_SKIP_INSTALL:-0} == 1 ]] && SETUP=0
PY=${GPU_CHECKS_PYTHON:-}
RESULTS=${GPU_CHECKS_RESULTS:-}
BUDGET_S=${GPU_CHECKS_BUDGET_S:-480}
while (($#)); do
    case $1 in
        --no-setup) SETUP=0 ;;
        --python) PY=$2; shift ;;
        --results) RESULTS=$2; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
RESULTS=${RESULTS:-$(mktemp -d /tmp/gpu_checks.XXXXXX)}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
: >"$RESULTS/setup.tsv"
: >"$RESULTS/steps.tsv"
START=$SECONDS

# seconds a step may take: its own cap, within the budget less what later steps need
allowance() { # cap reserve (at least 1)
    local left=$((BUDGET_S - (SECONDS - START) - $2))
    ((left > $1)) && left=$1
    ((left < 1)) && left=1
    echo "$left"
}
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RESULTS/setup.tsv"; }

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$RESULTS/gpu.csv" || true
else
    echo "nvidia-smi not found: no NVIDIA driver on this machine" | tee "$RESULTS/gpu.csv"
fi

# -- environment --------------------------------------------------------------------------------
if ((SETUP)); then
    t0=$SECONDS
    if [[ -L sample_models/repository ]]; then
        row "make setup-dev" SKIP 0 "sample_models/repository is a link to a shared build: not rebuilt here"
    elif timeout "$(allowance 300 180)" make setup-dev >"$RESULTS/setup.log" 2>&1; then
        row "make setup-dev" PASS $((SECONDS - t0)) ".venv and sample models ready"
    else
        row "make setup-dev" SKIP $((SECONDS - t0)) "make setup-dev failed or timed out (offline?): see setup.log"
    fi
fi
if [[ -z $PY ]]; then
    if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
ENV_OK=0
if "$PY" -c "import workbench.engine.api.server, pytest, pytest_asyncio, tritonclient.http" \
    >"$RESULTS/env.log" 2>&1; then
    ENV_OK=1
    row "python environment" PASS 0 "$("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
else
    row "python environment" FAIL 0 "$PY cannot import workbench, pytest, tritonclient: $(tail -n 1 "$RESULTS/env.log")"
fi
GPUS=0
if ((ENV_OK)); then
    GPUS=$("$PY" -c "from workbench.gpu.devices import gpu_count; print(gpu_count())")
elif command -v nvidia-smi >/dev/null 2>&1; then
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
echo "== $GPUS GPU(s) visible; python: $PY; results: $RESULTS"

# -- GPU extras -----------------------------------------------------------------------------------
pip_install() { timeout "$(allowance 240 150)" "$PY" -m pip install -q --no-input "$@" >>"$RESULTS/install.log" 2>&1; }

install_onnxruntime_gpu() { # replace the CPU wheel only once the GPU wheel is here
    local version wheels
    version=$("$PY" -c "import onnxruntime; print(onnxruntime.__version__)" 2>/dev/null || echo "")
    wheels=$(mktemp -d)
    timeout "$(allowance 240 150)" "$PY" -m pip download -q --no-deps -d "$wheels" \
        "onnxruntime-gpu${version:+==$version}" >>"$RESULTS/install.log" 2>&1 || return 1
    "$PY" -m pip uninstall -q -y onnxruntime >>"$RESULTS/install.log" 2>&1 || true
    "$PY" -m pip install -q --no-deps "$wheels"/onnxruntime_gpu-*.whl >>"$RESULTS/install.log" 2>&1
}

install_torch_cuda() {
    local version
    version=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || echo "")
    pip_install --force-reinstall ${GPU_CHECKS_TORCH_INDEX_URL:+--index-url "$GPU_CHECKS_TORCH_INDEX_URL"} \
        "torch${version:+==$version}"
}

extra() { # label probe-code install-command...
    local label=$1 probe=$2 t0=$SECONDS
    shift 2
    if ((GPUS == 0)); then
        row "$label" SKIP 0 "no GPU: not checked"
    elif ((!ENV_OK)); then
        row "$label" SKIP 0 "no usable Python environment"
    elif "$PY" -c "$probe" >/dev/null 2>&1; then
        row "$label" PASS 0 "already there"
    elif ((!SETUP)); then
        row "$label" SKIP 0 "missing; installs are off (--no-setup)"
    elif "$@" && "$PY" -c "$probe" >/dev/null 2>&1; then
        row "$label" PASS $((SECONDS - t0)) "installed"
    else
        row "$label" SKIP $((SECONDS - t0)) "could not install (offline?): see install.log"
    fi
}

extra "onnxruntime-gpu" \
    "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers()" \
    install_onnxruntime_gpu
extra "nvidia-ml-py" "import pynvml; pynvml.nvmlInit()" pip_install "nvidia-ml-py>=12"
extra "cuda-python" "from cuda.bindings import runtime" pip_install "cuda-python>=12.6,<13"
extra "tensorrt-cu12" "import tensorrt" pip_install "tensorrt-cu12>=10,<11"
extra "torch CUDA build" "import torch; assert torch.cuda.is_available()" install_torch_cuda

# CUDA, cuDNN and TensorRT libraries that pip wheels ship (nvidia-*, tensorrt_libs), for
# onnxruntime-gpu's providers, which look for them on the library path
if ((ENV_OK)); then
    LIBS=$("$PY" -c "
import glob, os, sys
dirs = []
for path in sys.path:
    dirs += glob.glob(os.path.join(path, 'nvidia', '*', 'lib')) + glob.glob(os.path.join(path, 'tensorrt_libs'))
print(':'.join(dict.fromkeys(d for d in dirs if os.path.isdir(d))))")
    if [[ -n $LIBS ]]; then
        export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi

# -- tests ----------------------------------------------------------------------------------------
run_pytest() { # step cap reserve pytest-args...
    local step=$1 cap=$2 reserve=$3 t0=$SECONDS rc=0 limit
    shift 3
    limit=$(allowance "$cap" "$reserve")
    if ((!ENV_OK)); then
        printf '%s\t-\t0\t%s\n' "$step" "no usable Python environment" >>"$RESULTS/steps.tsv"
        return
    elif ((limit < 20)); then
        printf '%s\t-\t0\t%s\n' "$step" "time budget spent (GPU_CHECKS_BUDGET_S=$BUDGET_S)" >>"$RESULTS/steps.tsv"
        return
    fi
    echo "== pytest $* (at most ${limit} s)"
    PYTHONUNBUFFERED=1 timeout --kill-after=10 "$limit" "$PY" -m pytest -p no:cacheprovider -q -rA \
        --continue-on-collection-errors --junitxml="$RESULTS/$step.xml" "$@" >"$RESULTS/$step.log" 2>&1 || rc=$?
    tail -n 12 "$RESULTS/$step.log"
    printf '%s\t%s\t%s\t\n' "$step" "$rc" $((SECONDS - t0)) >>"$RESULTS/steps.tsv"
}

run_pytest gpu 360 45 tests/gpu
run_pytest cuda_shm 120 0 tests/e2e/test_shared_memory_e2e.py -k cuda_shared_memory

echo "== results ($((SECONDS - START)) s, in $RESULTS)"
TABLE_PY=python3
command -v python3 >/dev/null 2>&1 || TABLE_PY=$PY
rc=0
"$TABLE_PY" tests/gpu/check_table.py "$RESULTS" || rc=$?
exit "$rc"
