#!/bin/bash
# Triton DALI backend's own QA suites (qa/L0_* of github:triton-inference-server/dali_backend) that
# run without a GPU, against `workbench serve`. See compat/README.md.
#
#   bash compat/dali_qa/run.sh [SUITE ...]      (default: the CPU suites below; after `make setup`)
#
# Each suite is upstream's folder as is: its setup.sh builds the model repository (serialized DALI
# pipelines, with the project venv's python and nvidia-dali), the server serves it, its test.sh runs
# the client against the server's gRPC address. Env: DALI_GIT: a bare git directory of
# github:triton-inference-server/dali_backend; SCRATCH (default /tmp/dali_qa); PORT_BASE (19100:
# HTTP, +1 gRPC, +2 metrics).
set -uo pipefail
PROJECT=$(cd "$(dirname "$0")/../.." && pwd)
DALI_GIT=${DALI_GIT:-/work/.mirror/triton-inference-server+dali_backend/repo}
SCRATCH=${SCRATCH:-/tmp/dali_qa}
PORT_BASE=${PORT_BASE:-19100}
# the suites whose pipelines and configs are CPU only; the others use device_id=0, GPU operators
# or "mixed" decoding (listed in compat/README.md)
CPU_SUITES=(L0_identity_cpu)
SUITES=("${@:-${CPU_SUITES[@]}}")
export PATH="$PROJECT/.venv/bin:$PATH"   # upstream scripts call `python`

rm -rf "$SCRATCH"; mkdir -p "$SCRATCH"
# (git.log: a mirror without some large blobs makes `git archive` name them; the files asked for come through)
# some suites' setup.sh copy an example of the repository's docs/examples ($DALI_BACKEND_REPO_ROOT)
git --git-dir="$DALI_GIT" archive HEAD docs/examples/identity docs/examples/multi_input 2>>"$SCRATCH/git.log" | tar -x -C "$SCRATCH"
export DALI_BACKEND_REPO_ROOT=$SCRATCH
echo "dali_backend $(git --git-dir="$DALI_GIT" rev-parse --short HEAD)"
passed=0; failed=0
for suite in "${SUITES[@]}"; do
    git --git-dir="$DALI_GIT" archive HEAD "qa/$suite" 2>>"$SCRATCH/git.log" | tar -x -C "$SCRATCH"
    dir=$SCRATCH/qa/$suite
    (cd "$dir" && bash setup.sh > "$SCRATCH/$suite.setup.log" 2>&1) || {
        echo "$suite: FAIL (setup.sh, see $SCRATCH/$suite.setup.log)"; failed=$((failed + 1)); continue; }
    workbench serve --model-repository="$dir/model_repository" --http-port=$PORT_BASE \
        --grpc-port=$((PORT_BASE + 1)) --metrics-port=$((PORT_BASE + 2)) > "$SCRATCH/$suite.server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$PORT_BASE/v2/health/ready" >/dev/null && break
        kill -0 $server 2>/dev/null || break
        sleep 1
    done
    if (cd "$dir" && GRPC_ADDR=127.0.0.1:$((PORT_BASE + 1)) bash test.sh > "$SCRATCH/$suite.test.log" 2>&1); then
        echo "$suite: PASS"; passed=$((passed + 1))
    else
        echo "$suite: FAIL (see $SCRATCH/$suite.test.log and $suite.server.log)"; failed=$((failed + 1))
        tail -5 "$SCRATCH/$suite.test.log"
    fi
    kill -TERM $server 2>/dev/null; wait $server 2>/dev/null
done
echo "dali_backend QA: $passed passed, $failed failed (of ${#SUITES[@]} suites)"
[ $failed = 0 ]
