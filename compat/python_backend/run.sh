#!/bin/bash
# NVIDIA's L0_backend_python sub-suites and the python_backend examples, run unchanged (apart from
# the edits README.md lists) against `workbench serve`. The one entry point of this harness.
#
#   bash compat/python_backend/run.sh [SUITE ...]     (default: $SUITES below, one after the other)
#
# Results: $QA/runs/<suite>.out (the suite's output), <suite>.results.jsonl (one line per test
# case), suites.tsv (suite, exit status, seconds); counted by bench/triton_qa_tally.py $COMPAT_OUT.
# Env: see compat/lib.sh (sources, scratch, the checkout served) and:
#   QA              scratch folder (default $COMPAT_OUT/python_backend)
#   QA_PORT_BASE    HTTP port; gRPC +1, metrics +2 (default 19200)
#   SUITE_TIMEOUT   seconds per sub-suite (default 900; bls, examples, lifecycle, decoupled 1500):
#                   a sub-suite stopped by it counts what it recorded, its servers stopped by PID
#   SKIP_SETUP=1    reuse $QA/src as it is (setup.sh rebuilds it otherwise; fixtures are kept)
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
source "$H/../lib.sh"
QA=${QA:-$COMPAT_OUT/python_backend}
QA_PORT_BASE=${QA_PORT_BASE:-19200}
# the sub-suites that run without a GPU, conda or a source build (README.md: what is not run, why)
DEFAULT_SUITES="decoupled ensemble io lifecycle logging model_control parameters request_rescheduling
response_sender restart argument_validation custom_metrics async_execute toplevel examples
model_readiness python_based_backends bls"
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || read -r -a SUITES <<< "$(echo $DEFAULT_SUITES)"
SERVER_GIT=$(upstream_git SERVER_GIT server)
PB_GIT=$(upstream_git PB_GIT python_backend)
export QA QA_PORT_BASE SERVER_GIT PB_GIT SERVER_COMMIT
[ "${SKIP_SETUP:-0}" = 1 ] || bash "$H/setup.sh"

TREE=$QA/src; L=$TREE/qa/L0_backend_python
export MODELDIR=$L TRITON_DIR=$TREE SERVER=$TREE/bin/tritonserver BACKEND_DIR=$TREE/backends
export DATADIR=$QA/data REPO_VERSION=harness NVIDIA_TRITON_SERVER_VERSION=harness TEST_WINDOWS=0 TEST_JETSON=0
export PYTHON_ENV_VERSION=12 PYTHON_BACKEND_REPO_TAG=main TRITON_REPO_ORGANIZATION=http://github.com/triton-inference-server
export TRITONSERVER_IPADDR=localhost SERVER_TIMEOUT=${SERVER_TIMEOUT:-180}
export PATH=$QA/shims:$QA/venv/bin:$PATH PYTHONPATH=$QA/pyhook PYTEST_PLUGINS=qa_pytest_record
mkdir -p "$QA/runs"; touch "$QA/server_pids"

# Triton's CI runs L0_backend_python in a container with a 1 GiB /dev/shm (`docker --shm-size=1g`);
# python_test.py's test_growth_error needs it (its 512 MiB / 1 GiB tensors must not fit), and so
# does bls's bls_memory model (its 1 GiB BLS input). The toplevel and bls sub-suites get one of
# $TOPLEVEL_SHM_SIZE (default 1g): a private mount namespace with a
# tmpfs on /dev/shm (root and util-linux unshare); elsewhere it runs on the host's, with a message.
# Sets the caller's `wrap` array (the command prefix).
shm_wrap() {
    local size=${TOPLEVEL_SHM_SIZE:-1g}
    if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
        unshare -m --propagation private sh -c "mount -t tmpfs -o size=$size tmpfs /dev/shm" 2>/dev/null; then
        wrap=(unshare -m --propagation private sh -c "mount -t tmpfs -o size=$size tmpfs /dev/shm && exec \"\$@\"" sh)
    else
        echo "note: cannot give the toplevel sub-suite a $size /dev/shm (needs root and unshare):" \
            "test_growth_error runs on the host's /dev/shm" >&2
    fi
}

run_suite() {
    local suite=$1 limit script=test.sh dir=$L/$1 x=-ex rc=0 start n0 wrap=()
    case $suite in
        bls|examples|lifecycle|decoupled) limit=${SUITE_TIMEOUT:-1500};;
        *) limit=${SUITE_TIMEOUT:-900};;
    esac
    case $suite in
        toplevel) dir=$L; script=test.toplevel.sh; x=-x   # upstream's top level runs without -e
                  shm_wrap;;
        bls) shm_wrap;;   # bls_memory's 1 GiB BLS input must not fit, as in Triton's CI
        io) script=test.cpu.sh;;
    esac
    rm -f "$QA/runs/$suite.results.jsonl"
    n0=$(wc -l < "$QA/server_pids")   # servers started before this suite are not its own
    start=$(date +%s)
    echo "== $suite ($script, limit ${limit} s) $(date -u +%T)"
    (cd "$dir" && QA_RESULTS=$QA/runs/$suite.results.jsonl \
        timeout --kill-after=30 "$limit" ${wrap[@]+"${wrap[@]}"} bash $x "$script" harness) > "$QA/runs/$suite.out" 2>&1 || rc=$?
    stop_recorded_servers "$QA/server_pids" "$n0" >> "$QA/runs/$suite.out"
    printf '%s\t%s\t%s\n' "$suite" "$rc" "$(( $(date +%s) - start ))" | tee -a "$QA/runs/suites.tsv"
}

for suite in "${SUITES[@]}"; do run_suite "$suite"; done
