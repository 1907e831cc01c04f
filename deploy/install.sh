#!/usr/bin/env bash
# install.sh: install the xdpfab node agent as a systemd service on this
# machine (as root). Idempotent; re-run it to upgrade.
#
#   deploy/install.sh [--binary PATH] [--iface IF] [--mode native|generic] [--start]
#
#   --binary PATH   the xdpfab binary to install (default: build ./cmd/xdpfab
#                   with go)
#   --iface IF      set IFACE in /etc/default/xdpfab
#   --mode MODE     set MODE in /etc/default/xdpfab
#   --start         enable the service and (re)start it, then check that it
#                   is still running a few seconds later
#
# It installs /usr/local/bin/xdpfab, /etc/sysusers.d/xdpfab.conf (and creates
# the user and group xdpfab), /etc/systemd/system/xdpfab.service and
# xdpfab-pinroot.service, and /etc/default/xdpfab if there is none yet. See
# docs/OPERATIONS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}

die() {
  echo "install: $*" >&2
  exit 1
}

binary="" iface="" mode="" start=0
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --iface) iface=${2:?--iface needs an interface}; shift 2 ;;
    --mode) mode=${2:?--mode needs native or generic}; shift 2 ;;
    --start) start=1; shift ;;
    -h | --help) usage 0 ;;
    *) usage ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root"
case $mode in "" | native | generic) ;; *) die "--mode: want native or generic, not '$mode'" ;; esac
[[ $iface =~ ^[A-Za-z0-9_.:@-]*$ ]] || die "--iface: bad interface name '$iface'"

if [ -z "$binary" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  go build -o "$tmp/xdpfab" ./cmd/xdpfab
  binary=$tmp/xdpfab
fi
if [ ! /usr/local/bin/xdpfab -ef "$binary" ]; then
  install -m 0755 "$binary" /usr/local/bin/xdpfab
fi

install -D -m 0644 deploy/xdpfab.sysusers /etc/sysusers.d/xdpfab.conf
systemd-sysusers /etc/sysusers.d/xdpfab.conf

for unit in xdpfab.service xdpfab-pinroot.service; do
  install -D -m 0644 "deploy/$unit" "/etc/systemd/system/$unit"
done
if [ ! -e /etc/default/xdpfab ]; then
  install -D -m 0644 deploy/xdpfab.default /etc/default/xdpfab
fi
if [ -n "$iface" ]; then
  sed -i "s/^IFACE=.*/IFACE=$iface/" /etc/default/xdpfab
fi
if [ -n "$mode" ]; then
  sed -i "s/^MODE=.*/MODE=$mode/" /etc/default/xdpfab
fi

if [ ! -d /run/systemd/system ]; then
  echo "install: systemd is not running here: installed the files only"
  exit 0
fi
systemctl daemon-reload
if [ "$start" = 1 ]; then
  systemctl enable xdpfab.service
  systemctl restart xdpfab.service
  sleep 3
  if ! systemctl is-active --quiet xdpfab.service; then
    journalctl -u xdpfab.service -n 40 --no-pager >&2 || true
    die "xdpfab.service did not stay up (journal above)"
  fi
  echo "install: xdpfab.service is running"
fi
