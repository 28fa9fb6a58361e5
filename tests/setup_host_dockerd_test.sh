#!/usr/bin/env bash
# scripts/setup-host's dockerd_pid (issue 33, point 7): right after a kill -9, the dead dockerd
# lingers as a zombie until its parent reaps it; setup-host took it for a running daemon, waited
# 30 s for it to answer and failed. In a PID namespace of its own (no real dockerd there), a
# zombie named dockerd must not count, and a live one must.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -n '/^dockerd_pid() {/,/^}/p' "$here/scripts/setup-host" > "$work/fn.sh"
[ -s "$work/fn.sh" ] || { echo "setup_host_dockerd_test: no dockerd_pid() in scripts/setup-host" >&2; exit 1; }
mkdir "$work/live"
cp /bin/true "$work/dockerd"              # exits at once: a zombie until reaped
cp /bin/sleep "$work/live/dockerd"        # runs: a live one
exec unshare --fork --pid --mount-proc bash -c '
  set -euo pipefail
  . "$1/fn.sh"
  # A parent that never reaps: the child dockerd stays a zombie while the sleep runs.
  sh -c "\"$1/dockerd\" & exec sleep 5" &
  for _ in $(seq 50); do pgrep -x dockerd >/dev/null && break; sleep 0.05; done
  pgrep -x dockerd >/dev/null || { echo "no zombie dockerd made" >&2; exit 1; }
  got=$(dockerd_pid)
  [ -z "$got" ] || { echo "FAIL: the zombie $got counts as a running dockerd" >&2; exit 1; }
  # A live one counts.
  "$1/live/dockerd" 5 &
  live=$!
  for _ in $(seq 50); do [ -n "$(dockerd_pid)" ] && break; sleep 0.05; done
  got=$(dockerd_pid)
  [ "$got" = "$live" ] || { echo "FAIL: the live dockerd $live is not found (got \"$got\")" >&2; exit 1; }
  kill "$live"
  echo "ok: a zombie dockerd does not count, a live one does"
' _ "$work"
