#!/bin/bash
# Shared by the three upstream-QA harnesses (compat/triton_qa, compat/scheduling,
# compat/python_backend): where the upstream sources, the client venv and the scratch folder come
# from, and how a harness stops the servers it started. Sourced, never run.
#
# Env (all optional):
#   WB_PROJECT       the checkout whose code the server runs (default: this one)
#   WB_VENV          the venv with `workbench` installed (default: $WB_PROJECT/.venv)
#   COMPAT_OUT       scratch root; each harness works in $COMPAT_OUT/<harness>
#                    (default: ${TMPDIR:-/tmp}/workbench-compat)
#   UPSTREAM_CACHE   where bare clones are made when SERVER_GIT / PB_GIT / CLIENT_GIT are unset
#                    (default: ~/.cache/workbench/upstream)
#   SERVER_GIT, PB_GIT, CLIENT_GIT   bare git dirs of github:triton-inference-server/server,
#                    .../python_backend, .../client (a `git clone --bare` or a mirror)

COMPAT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WB_PROJECT=${WB_PROJECT:-$(cd "$COMPAT_DIR/.." && pwd)}
WB_VENV=${WB_VENV:-$WB_PROJECT/.venv}
COMPAT_OUT=${COMPAT_OUT:-${TMPDIR:-/tmp}/workbench-compat}
UPSTREAM_CACHE=${UPSTREAM_CACHE:-$HOME/.cache/workbench/upstream}
# the server repository's QA at the commit every table in docs/compatibility.md was measured on
SERVER_COMMIT=${SERVER_COMMIT:-e1db8a603d863b1317ee859bdeea2be19959462e}
export WB_PROJECT WB_VENV COMPAT_OUT

# upstream_git VAR REPO: echo a bare git dir of github:triton-inference-server/REPO: $VAR when set,
# else a bare clone in $UPSTREAM_CACHE (made on first use, fetched again when COMPAT_REFRESH=1).
upstream_git() {
    local var=$1 repo=$2 dir
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    dir=$UPSTREAM_CACHE/$repo.git
    if [ ! -d "$dir" ]; then
        mkdir -p "$UPSTREAM_CACHE"
        git clone --quiet --bare "https://github.com/triton-inference-server/$repo" "$dir" >&2
    elif [ "${COMPAT_REFRESH:-0}" = 1 ]; then
        git --git-dir="$dir" fetch --quiet origin '+refs/heads/*:refs/heads/*' >&2
    fi
    echo "$dir"
}

# client_venv DIR PACKAGE...: a venv for the upstream clients (never the product's), made once
client_venv() {
    local dir=$1; shift
    if [ ! -x "$dir/bin/python" ]; then
        python3 -m venv "$dir"
        "$dir/bin/pip" install --quiet --progress-bar off "$@"
    fi
}

# rewrite_ports DIR BASE: Triton's default ports 8000/8001/8002 in DIR's .py/.sh files -> BASE,
# BASE+1, BASE+2 (the suites run on loopback ports of their own, beside other servers)
rewrite_ports() {
    local dir=$1 base=$2
    grep -rlE ':800[0-2]\b' --include='*.py' --include='*.sh' "$dir" | xargs -r sed -i -E \
        "s/:8000\b/:$base/g; s/:8001\b/:$((base + 1))/g; s/:8002\b/:$((base + 2))/g"
}

# stop_recorded_servers PIDFILE FROM_LINE: stop, by PID, the servers the tritonserver wrapper
# recorded in PIDFILE after line FROM_LINE that still run `workbench serve` (a suite stopped by its
# time limit can leave one behind). Never a pattern, never a process group.
stop_recorded_servers() {
    local file=$1 from=$2 pid
    [ -f "$file" ] || return 0
    for pid in $(tail -n +"$((from + 1))" "$file"); do
        [[ $pid =~ ^[0-9]+$ ]] || continue
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- ' serve '; then
            echo "harness: stopping leftover server $pid"
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
}
