#!/bin/bash
# Triton FIL backend's own end-to-end QA (qa/L0_e2e of github:triton-inference-server/fil_backend)
# against `workbench serve`, CPU only. See compat/fil_e2e/README.md.
#
#   bash compat/fil_e2e/run.sh            (from the project checkout, after `make setup`)
#
# Env: FIL_GIT / RAPIDS_TRITON_GIT: bare git directories (clones or mirrors) of
# github:triton-inference-server/fil_backend and github:rapidsai/rapids-triton (the suite's client
# library, not on PyPI); SCRATCH (default /tmp/fil_e2e): where the upstream files, the model
# repository, the server log and results.xml go; PROFILE (default ci: 100 examples per case, as
# upstream's CI; dev: 10). The upstream client talks to localhost:8000/8001 (fixed), so as root the
# server and the suite run in a private network namespace; otherwise those ports must be free.
set -euo pipefail
PROJECT=$(cd "$(dirname "$0")/../.." && pwd)
PY=$PROJECT/.venv/bin/python
FIL_GIT=${FIL_GIT:-/work/.mirror/triton-inference-server+fil_backend/repo}
RAPIDS_TRITON_GIT=${RAPIDS_TRITON_GIT:-/work/.mirror/rapidsai+rapids-triton/repo}
SCRATCH=${SCRATCH:-/tmp/fil_e2e}
PROFILE=${PROFILE:-ci}

mkdir -p "$SCRATCH/src"
# 1. upstream sources (read and run from the scratch folder, never copied into the project)
git --git-dir="$FIL_GIT" archive HEAD qa/L0_e2e/test_model.py qa/L0_e2e/conftest.py | tar -x -C "$SCRATCH/src"
git --git-dir="$RAPIDS_TRITON_GIT" archive HEAD python/rapids_triton | tar -x -C "$SCRATCH/src"
echo "fil_backend $(git --git-dir="$FIL_GIT" rev-parse --short HEAD), rapids-triton $(git --git-dir="$RAPIDS_TRITON_GIT" rev-parse --short HEAD)"
# 2. the model repository (CPU versions of upstream's models; cached across runs)
REPO=$SCRATCH/model_repository
if [ ! -f "$REPO/.built" ]; then
    rm -rf "$REPO"
    "$PY" "$PROJECT/compat/fil_e2e/make_models.py" "$REPO"
    touch "$REPO/.built"
fi
printf '[pytest]\n' > "$SCRATCH/pytest.ini"   # keep the project's pytest settings out

# 3. server + suite, in a network namespace of their own when we can make one
inner=$(mktemp "$SCRATCH/inner.XXXX.sh")
cat > "$inner" <<EOF
set -uo pipefail
"$PROJECT/.venv/bin/workbench" serve --model-repository="$REPO" --http-port=8000 --grpc-port=8001 \
    --metrics-port=8002 > "$SCRATCH/server.log" 2>&1 &
server=\$!
trap 'kill -TERM \$server 2>/dev/null; wait \$server' EXIT
for _ in \$(seq 1 120); do
    curl -sf http://127.0.0.1:8000/v2/health/ready >/dev/null && break
    kill -0 \$server 2>/dev/null || { echo "server exited:"; tail -20 "$SCRATCH/server.log"; exit 1; }
    sleep 1
done
cd "$SCRATCH" && CPU_ONLY=1 PYTHONPATH="$SCRATCH/src/python" "$PY" -m pytest -c "$SCRATCH/pytest.ini" \
    -p no:cacheprovider src/qa/L0_e2e --repo "$REPO" --hypothesis-profile "$PROFILE" \
    -k "not cuml" -q -rfEsxX --junitxml="$SCRATCH/results.xml" "\$@"
EOF
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    ns=fil-e2e-$$
    ip netns add "$ns"; trap 'ip netns del "$ns"' EXIT
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" bash "$inner" "$@" || rc=$?
else
    bash "$inner" "$@" || rc=$?
fi
rm -f "$inner"
"$PY" - "$SCRATCH/results.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot().find("testsuite")
assert suite is not None
total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
print(f"L0_e2e (fil_backend): {total - failed - errors - skipped} passed, {failed} failed, "
      f"{errors} errors, {skipped} skipped or xfailed (of {total}); cuml deselected (needs cuML + GPU)")
EOF
exit "${rc:-0}"
