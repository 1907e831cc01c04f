#!/usr/bin/env bash
# bench/run.sh: xdpfab's benchmark suite (make bench, make bench-quick).
#
#   bench/run.sh            full run: regenerates docs/BENCHMARKS.md and docs/bench/
#   bench/run.sh -quick     smoke run: writes bench/out/quick/ (never the docs)
#   bench/run.sh [-quick] -sections rx,av [-cases xdpfab,udp-mmsg]   a part of it
#
# Needs root. Installs Debian's libfabric-bin, libfabric-dev, libxdp-dev and
# gcc when missing (the libfabric peers and the C AF_XDP floor), builds the
# libfabric AV helper and the floor into a temporary directory (never
# committed), and removes every namespace it created, also when interrupted.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: run as root (network namespaces, XDP, BPF)" >&2
  exit 1
fi

quick=0
for a in "$@"; do
  [ "$a" = "-quick" ] && quick=1
done
out=../docs
[ $quick -eq 1 ] && out=out/quick

need=()
command -v fi_pingpong >/dev/null || need+=(libfabric-bin)
[ -f /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
[ -f /usr/include/xdp/xsk.h ] || need+=(libxdp-dev)
command -v gcc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

tmp=$(mktemp -d /tmp/xdpfab-bench.XXXXXX)
cleanup() {
  # Only what this run made: the bench builds its beds with internal/testbed,
  # which names every namespace xdpfab-<pid of the bench>-<random>-<host>.
  local pid
  pid=$(cat "$tmp/pid" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^xdpfab-${pid}-" || true); do
      ip netns del "$ns" 2>/dev/null || true
    done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

gcc -O2 -Wall -o "$tmp/fiav" fiav/fiav.c -lfabric
gcc -O2 -Wall -o "$tmp/xskfloor" xskfloor/xskfloor.c -lxdp -lbpf
go build -o "$tmp/bench" .
start=$(date +%s)
# The subshell records its pid and becomes the bench, so cleanup knows it.
(echo "$BASHPID" >"$tmp/pid" && exec "$tmp/bench" -out "$out" -fiav "$tmp/fiav" -xskfloor "$tmp/xskfloor" "$@")
echo "bench: done in $(( $(date +%s) - start )) s; results in $out/BENCHMARKS.md, $out/bench/"
test -s "$out/bench/results.json"
