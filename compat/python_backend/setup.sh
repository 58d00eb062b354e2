#!/bin/bash
# compat/python_backend set-up, called by run.sh: client venv, the upstream tests (server QA at
# $SERVER_COMMIT, python_backend HEAD) in $QA/src with the ports moved to $QA_PORT_BASE, the
# fixtures, and the edits listed in README.md (each one keeps a suite safe on a shared machine or
# runnable without a GPU). Everything is written under $QA; nothing into the checkout.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
: "${QA:?}" "${QA_PORT_BASE:?}" "${SERVER_GIT:?}" "${PB_GIT:?}" "${SERVER_COMMIT:?}"
mkdir -p "$QA" && cd "$QA"
# client venv (never the product's): the upstream clients and test runners
if [ ! -x venv/bin/python ]; then
    python3 -m venv venv
    venv/bin/pip install --quiet --progress-bar off 'tritonclient[all]' numpy pytest requests psutil ml_dtypes onnx
fi
rm -rf src && mkdir -p src/pb
git --git-dir="$SERVER_GIT" archive "$SERVER_COMMIT" qa/L0_backend_python qa/common qa/python_models | tar -x -C src
git --git-dir="$PB_GIT" archive HEAD | tar -x -C src/pb
git --git-dir="$PB_GIT" rev-parse --short HEAD > src/pb.commit
# ports 8000/8001/8002 -> QA_PORT_BASE +0/+1/+2
B=$QA_PORT_BASE
grep -rlE ':800[0-2]\b' src | xargs -r sed -i -E "s/:8000\b/:$B/g; s/:8001\b/:$((B + 1))/g; s/:8002\b/:$((B + 2))/g"
sed -i "s/self._triton_port = 8000/self._triton_port = $B/" src/qa/L0_backend_python/model_control/model_control_test.py
# the product's stubs are `python .../backends/python/stub.py`, not triton_python_backend_stub, and
# upstream's `pgrep -f` (fine alone in its container) matches every stub on the machine: scope it
# to the children of this suite's server, or it signals other people's stubs
L=src/qa/L0_backend_python
sed -i 's/stub_pid=$(pgrep -f "triton_python_backend_stub")/stub_pid=$(pgrep --parent $SERVER_PID -f "backends\/python\/stub.py")/' $L/model_readiness/test.sh
grep -q 'pgrep --parent $SERVER_PID -f "backends/python/stub.py"' $L/model_readiness/test.sh \
    || { echo "setup: model_readiness's pgrep is not scoped (upstream changed?)" >&2; exit 1; }
# TRITON_DIR=$QA/src: the upstream init_args model expects $TRITON_DIR/qa/L0_backend_python/models
mkdir -p src/bin src/backends
{ echo "#!$QA/venv/bin/python"; tail -n +2 "$H/tritonserver"; } > src/bin/tritonserver
chmod +x src/bin/tritonserver
rm -rf shims pyhook && cp -r "$H/shims" . && mkdir pyhook && cp "$H"/pyhook/*.py "$H"/../pyhook/*.py pyhook/
chmod +x shims/*
# ONNX / TorchScript fixtures the bls and ensemble suites copy from $DATADIR
[ -d data/qa_model_repository/onnx_int32_int32_int32 ] || bash "$H/gen_fixtures.sh"

cd "$QA/src/qa"
# kill_server with SERVER_PID=0 would run `kill 0` (the whole process group): guard it
cat >> common/util.sh <<'EOS'
# ---- compat/python_backend ----
function kill_server () {
    if [ "${SERVER_PID:-0}" != "0" ]; then kill $SERVER_PID 2>/dev/null; wait $SERVER_PID || true; fi
}
EOS
# shm page count: only the /dev/shm segments of this harness's servers (others run beside)
python3 - <<'EOP'
p = "L0_backend_python/common.sh"
s = open(p).read()
old = 'get_shm_pages() {\n  shm_pages=(`ls /dev/shm`)\n  echo ${#shm_pages[@]}\n}'
new = '''get_shm_pages() {
  local n=0 f pid
  for f in /dev/shm/triton_python_backend_shm_region_wb*; do
    [ -e "$f" ] || continue
    pid=${f#/dev/shm/triton_python_backend_shm_region_wb}; pid=${pid%%_*}
    grep -qx "$pid" "$QA/server_pids" 2>/dev/null && n=$((n+1))
  done
  echo $n
}'''
assert old in s, "common.sh: get_shm_pages changed upstream"
open(p, "w").write(s.replace(old, new))
EOP
cd L0_backend_python
# the top level of test.sh (python_test.py + server-start checks) without the Python 3.12 / conda
# environment set-up, without `rm /dev/shm/triton_python_backend_shm_region_*` (other servers'
# segments), `exit 1` -> RET=1 (run every check), never `kill -9 0`
n=$(grep -n "^# Disable env test for Jetson since cloud" test.sh | cut -d: -f1)
{ sed -n 1,80p test.sh | grep -v 'rm -f /dev/shm/triton_python_backend_shm_region_'
  sed -n "94,$((n - 1))p" test.sh | sed -E 's/^(\s*)exit 1\s*$/\1RET=1; echo "*** harness: continuing after a failure"/'
  echo 'echo "harness toplevel RET=$RET"'; echo 'exit $RET'
} | sed -E 's/^kill -9 \$SERVER_PID$/[ "$SERVER_PID" != "0" ] \&\& kill -9 $SERVER_PID  # harness: never `kill -9 0`/' > test.toplevel.sh
# io: the CPU sections only. test_ensemble_io, test_empty_gpu_output, test_variable_gpu_output and
# test_requested_output_decoupled move tensors to CUDA (the last at random: its model's response
# thread dies without a GPU and the client waits forever); the rest (requested_output_default, the
# prior-crash section) runs
(cd io && h=$(grep -n "^RET=0" test.sh | cut -d: -f1) && s=$(grep -n "^mkdir -p models/add_sub/1/" test.sh | cut -d: -f1) \
    && { sed -n "1,${h}p" test.sh; sed -n "$((s - 1)),\$p" test.sh; } \
    | sed 's/^SUBTESTS="test_requested_output_default test_requested_output_decoupled"/SUBTESTS="test_requested_output_default"  # harness: the decoupled one needs a GPU/' > test.cpu.sh \
    && grep -q 'harness: the decoupled one needs a GPU' test.cpu.sh)
# decoupled: test_decoupled_bls's model moves tensors to CUDA in its response thread; without a GPU
# that thread dies, the model never sends its final response and the client waits forever
(cd decoupled \
    && sed -i 's|^python3 -m pytest --junitxml=decoupled.report.xml $CLIENT_PY |python3 -m pytest --junitxml=decoupled.report.xml --deselect decoupled_test.py::DecoupledTest::test_decoupled_bls $CLIENT_PY |' test.sh \
    && grep -q -- '--deselect decoupled_test.py::DecoupledTest::test_decoupled_bls' test.sh)
# examples: jax from a CPU wheel on the server's PYTHONPATH ($QA/jaxsite, nothing goes into the
# product's venv); instance_kind's resnet50 (torchvision + weights from the internet) is removed:
# the examples share one repository, so a model that cannot load would stop every later start
(cd examples \
    && sed -i "0,/^source ..\/..\/common\/util.sh/s##source ../../common/util.sh\nexport QA_SERVER_PYTHONPATH=$QA/jaxsite#" test.sh \
    && sed -i 's/^for ATTEMPT in $(seq 1 ${INSTANCE_KIND_MAX_RETRIES}); do/rm -rf models\/resnet50; echo "*** harness: instance_kind not runnable (torchvision + pretrained weights download)"\nfor ATTEMPT in $(seq 1 0); do/' test.sh)
[ -d "$QA/jaxsite/jax" ] || "$QA/venv/bin/pip" install --quiet --progress-bar off --no-deps --target "$QA/jaxsite" jax jaxlib
# python_based_backends: the TorchScript fixture generator needs torch: the product venv's python
sed -i 's|^python3 ${GEN_PYTORCH_MODEL_PY} -m ${MODEL_REPOSITORY}|${TORCH_PY:-$WB_VENV/bin/python} ${GEN_PYTORCH_MODEL_PY} -m ${MODEL_REPOSITORY}  # harness|' python_based_backends/test.sh
echo "setup done: server $(cut -c1-8 <<< "$SERVER_COMMIT"), python_backend $(cat "$QA/src/pb.commit"), ports $B-$((B + 2))"
