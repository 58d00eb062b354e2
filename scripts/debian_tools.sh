#!/bin/bash
# debian_tools.sh PACKAGE... : install the Debian packages that are missing (the real tools the
# production tests start: podman, nginx, prometheus/promtool, ...), when running as root with
# apt-get (CI, this project's machines); otherwise say which are missing and how to install
# them, and exit 0: the tests that need them skip, naming the missing tool.
# One apt run at a time on the machine (a lock), quiet unless something fails.
set -euo pipefail
missing=()
for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing Debian packages: ${missing[*]} (apt-get install ${missing[*]}); the tests that need them skip"
    exit 0
fi
echo "==> installing Debian packages: ${missing[*]}"
exec 9>/tmp/workbench-apt.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || {
    echo "could not install ${missing[*]}: the tests that need them skip"; exit 0; }
