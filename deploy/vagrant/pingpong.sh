#!/usr/bin/env bash
# pingpong.sh: run one side of the ping-pong between the Vagrant VMs (as root).
#
#   pingpong.sh server COMMAND
#   pingpong.sh client COMMAND
#
# bash runs COMMAND. The server runs as the transient systemd unit
# xdpfab-pingpong-server, so provisioning goes on while it waits; it is
# stopped after an hour at the latest. The client tries again until the
# server answers, for about ten minutes.
set -euo pipefail

[ $# -eq 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
role=$1 cmd=$2
echo "pingpong $role: $cmd"

case $role in
  server)
    unit=xdpfab-pingpong-server
    systemctl stop "$unit" 2>/dev/null || true
    systemctl reset-failed "$unit" 2>/dev/null || true
    systemd-run --unit="$unit" --collect --property=RuntimeMaxSec=3600 /bin/bash -c "$cmd"
    sleep 2
    systemctl is-active --quiet "$unit" || {
      journalctl -u "$unit" -n 40 --no-pager >&2
      exit 1
    }
    echo "server running: journalctl -u $unit"
    ;;
  client)
    for try in $(seq 1 10); do
      if timeout 60 bash -c "$cmd"; then
        exit 0
      fi
      echo "pingpong client: try $try failed; again in 5 s"
      sleep 5
    done
    echo "pingpong client: the server never answered" >&2
    exit 1
    ;;
  *)
    echo "pingpong.sh: role must be server or client, not '$role'" >&2
    exit 2
    ;;
esac
