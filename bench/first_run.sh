#!/usr/bin/env bash
# A fresh clone's first `make serve`: wall time from `make serve` until "Started HTTPService" is
# printed (the server then answers), and the size of the venv it made. The server is stopped
# (SIGINT) once started. pip's cache and indexes are this machine's (say so with the figures).
# Usage: bench/first_run.sh SOURCE_REPO DEST_DIR [make target, default serve]
# e.g.   bench/first_run.sh /work/main /tmp/first-run-before
set -euo pipefail
src=${1:?source repository}; dest=${2:?destination directory}; target=${3:-serve}
rm -rf "$dest"
git clone -q "$src" "$dest"
cd "$dest"
log=$dest.log
# ports from the OS: free now, so a helper's server beside this one does not collide
read -r http grpc metrics < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
start=$(date +%s.%N)
# each line stamped with the seconds since the start (the silent stretches show as gaps)
setsid bash -c 'make "$@" 2>&1 | while IFS= read -r line; do printf "%6d %s\n" $((SECONDS)) "$line"; done' \
	_ "$target" HTTP_PORT="$http" GRPC_PORT="$grpc" METRICS_PORT="$metrics" >"$log" &
pid=$!
status=failed
while kill -0 "$pid" 2>/dev/null; do
	if grep -q 'Started HTTPService' "$log"; then status=started; break; fi
	sleep 1
done
end=$(date +%s.%N)
kill -INT -- -"$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
gap=$(awk 'NR > 1 && $1 - prev > max { max = $1 - prev; at = $0 } { prev = $1 }
	END { printf "%d s, before: %s", max, at }' "$log")
printf '%s: %s after %.0f s; venv %s; longest silence %s (log: %s)\n' \
	"$src" "$status" "$(echo "$end - $start" | bc)" "$(du -sh .venv | cut -f1)" "$gap" "$log"
