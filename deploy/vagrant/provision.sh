#!/usr/bin/env bash
# provision.sh: set up one xdpfab test VM (run by the Vagrantfile, as root,
# with the source tree at /vagrant). Safe to re-run (vagrant provision).
#
#   provision.sh GO_VERSION IFACE ADDRESS MODE [--test]
#
# Installs the build and debugging tools and Go GO_VERSION (the go.dev
# tarball, checked against its published SHA-256), builds xdpfab, runs
# `make test` with --test, then installs the agent's systemd unit with
# deploy/install.sh and starts it on IFACE (which must hold ADDRESS), in XDP
# mode MODE.
set -euo pipefail

[ $# -ge 4 ] || { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
go_version=$1 iface=$2 addr=$3 mode=$4 run_tests=${5:-}
src=/vagrant

echo "== packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq build-essential ca-certificates curl jq make \
  clang-14 llvm libbpf-dev bpftool iproute2 ethtool tcpdump >/dev/null

echo "== go $go_version"
arch=$(dpkg --print-architecture)
tarball=go$go_version.linux-$arch.tar.gz
if ! /usr/local/go/bin/go version 2>/dev/null | grep -q "go$go_version "; then
  curl -fsSL -o "/tmp/$tarball" "https://go.dev/dl/$tarball"
  sum=$(curl -fsSL 'https://go.dev/dl/?mode=json&include=all' |
    jq -r --arg f "$tarball" '.[].files[] | select(.filename == $f) | .sha256')
  [ -n "$sum" ] || { echo "no published SHA-256 for $tarball" >&2; exit 1; }
  echo "$sum  /tmp/$tarball" | sha256sum -c --quiet -
  rm -rf /usr/local/go
  tar -C /usr/local -xzf "/tmp/$tarball"
  rm -f "/tmp/$tarball"
fi
ln -sf /usr/local/go/bin/go /usr/local/bin/go
export GOTOOLCHAIN=local
go version

echo "== build"
cd "$src"
go build -o /tmp/xdpfab ./cmd/xdpfab

if [ "$run_tests" = --test ]; then
  echo "== make test"
  make test
fi

echo "== agent on $iface ($addr)"
if ! ip -o -4 addr show dev "$iface" to "$addr/32" | grep -q .; then
  echo "$iface does not hold $addr; these do (set IFACE in the Vagrantfile):" >&2
  ip -o -4 addr show to "$addr/32" >&2
  exit 1
fi
deploy/install.sh --binary /tmp/xdpfab --iface "$iface" --mode "$mode" --start
