#!/usr/bin/env bash
# How a fork's child could get its own /workspace on this host (docs/lifecycle.md, "Forks without
# a full copy per child"): Docker's copy of an image's /workspace into a new, empty volume (what
# agvisor::Fork does today) against the alternatives the host offers, for a /workspace of SIZE_MB
# (default 200) of random data, each run on runsc:
#   copy      docker run of the image with a new empty volume over /workspace (Docker copies)
#   prefilled docker run with a volume that already holds the data (no copy: the floor)
#   overlay   docker run with a local-driver volume of type overlay: the data as the lower dir,
#             an empty upper dir per child (nothing copied; writes go to the child's upper dir)
#   reflink   cp --reflink=always of the data within Docker's volume directory (copy-on-write
#             where the file system has it: XFS with reflink=1, btrfs; ext4 has none)
#   cp        cp -a of the data within Docker's volume directory (the copy's own cost)
# Prints the file system, the 1-minute load before and after, and each figure (median of RUNS,
# default 3) of a `docker run` of `true`, the copy included. Checks that a child sees the data
# byte for byte, and that two overlay children and the data stay independent. Everything it makes
# is named snapverbs-fork-bench-* and removed. Root, a local Docker with runsc, busybox-static.
#
#   bench/fork_workspace.sh [SIZE_MB] [RUNS]
set -euo pipefail
size=${1:-200}
runs=${2:-3}
p=snapverbs-fork-bench-$$
vols="$(docker info -f '{{.DockerRootDir}}')/volumes"  # the file system volumes live on
work=$(mktemp -d "$vols/.${p}-XXXXXX")
image=$p:latest
cleanup() {
  docker ps -aq --filter "label=$p" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker volume ls -q --filter "label=$p" | xargs -r docker volume rm -f >/dev/null 2>&1 || true
  docker image rm -f "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "file system of $vols: $(stat -f -c %T "$vols") ($(findmnt -n -o FSTYPE --target "$vols"))"
echo "load before: $(load)"

# The image: busybox and a /workspace of SIZE_MB.
mkdir -p "$work/root/bin" "$work/root/workspace" "$work/data"
cp /bin/busybox "$work/root/bin/busybox"
ln -s busybox "$work/root/bin/sh"
head -c $((size << 20)) /dev/urandom >"$work/root/workspace/data.bin"
echo small >"$work/root/workspace/small.txt"
cp -a "$work/root/workspace/." "$work/data/"
tar -C "$work/root" -c . | docker import - "$image" >/dev/null
want=$(sha256sum <"$work/data/data.bin" | cut -d' ' -f1)

run() {  # run VOLUME_OPTS... : the seconds of a docker run of `true` (the copy, if any, is in it)
  local t0
  t0=$(now)
  docker run --rm --runtime runsc --network none --label "$p" "$@" "$image" /bin/busybox true
  since "$t0"
}
check() {  # check VOLUME_OPTS... : the child sees the data, byte for byte
  local got
  got=$(docker run --rm --runtime runsc --network none --label "$p" "$@" "$image" \
    /bin/busybox sha256sum /workspace/data.bin | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "wrong data: $got" >&2; exit 1; }
}

for i in $(seq "$runs"); do
  docker volume create --label "$p" "$p-copy-$i" >/dev/null
  run -v "$p-copy-$i:/workspace"
done | median | sed 's/^/copy (Docker fills a new volume), s: /'
check -v "$p-copy-1:/workspace"

docker volume create --label "$p" "$p-pre" >/dev/null
run -v "$p-pre:/workspace" >/dev/null  # filled once
for i in $(seq "$runs"); do run -v "$p-pre:/workspace"; done |
  median | sed 's/^/prefilled (no copy: the floor), s: /'

overlay_volume() {  # overlay_volume NAME: a volume over the data with its own upper dir
  mkdir -p "$work/$1/upper" "$work/$1/work"
  docker volume create --label "$p" -d local -o type=overlay -o device=overlay \
    -o "o=lowerdir=$work/data,upperdir=$work/$1/upper,workdir=$work/$1/work" "$1" >/dev/null
}
for i in $(seq "$runs"); do
  overlay_volume "$p-ovl-$i"
  run -v "$p-ovl-$i:/workspace"
done | median | sed 's/^/overlay (the data as the lower dir), s: /'
check -v "$p-ovl-1:/workspace"

# Isolation: a write in one overlay child is seen neither in another nor in the data.
overlay_volume "$p-ovl-a"
overlay_volume "$p-ovl-b"
docker run --rm --runtime runsc --network none --label "$p" -v "$p-ovl-a:/workspace" "$image" \
  /bin/sh -c 'echo changed > /workspace/small.txt && echo new > /workspace/new.txt'
seen=$(docker run --rm --runtime runsc --network none --label "$p" -v "$p-ovl-b:/workspace" \
  "$image" /bin/sh -c 'cat /workspace/small.txt; ls /workspace')
echo "overlay isolation: child b sees [$(echo "$seen" | tr '\n' ' ')], the data holds [$(cat "$work/data/small.txt")]"

for i in $(seq "$runs"); do
  t0=$(now)
  if cp --reflink=always "$work/data/data.bin" "$work/reflink-$i" 2>"$work/reflink.err"; then
    since "$t0"
  else
    echo "refused: $(cat "$work/reflink.err")" >&2
    echo -1
  fi
done | median | sed 's/^/reflink copy (-1: refused), s: /'

for i in $(seq "$runs"); do
  t0=$(now)
  cp -a "$work/data" "$work/cp-$i"
  sync -f "$work/cp-$i/data.bin"
  since "$t0"
done | median | sed 's/^/cp -a (host copy, synced), s: /'
echo "load after: $(load)"
