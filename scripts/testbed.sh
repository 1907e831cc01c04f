#!/usr/bin/env bash
# testbed.sh: xdpfab's test bed from a shell, the same topology as the Go
# package internal/netlab: two (or more) network namespaces joined by veth,
# addressed from 198.18.0.0/15 and 2001:2::/48, optionally with an XDP
# program attached to every host's interface (native mode, or generic).
#
#   scripts/testbed.sh up [NAME] [options]   build it and print what it made
#   scripts/testbed.sh down [NAME]           remove it (idempotent)
#   scripts/testbed.sh show [NAME]           print what exists
#
# Options for up:
#   --hosts N           hosts (default 2); more than 2 adds a bridge namespace
#   --net X             subnet 0..511: 198.(18+X/256).(X%256).0/24 and
#                       2001:2:0:X::/64 (default 0)
#   --static-neigh      permanent ARP and NDP entries between all hosts
#   --xdp-obj FILE      attach the program in FILE (section --xdp-sec, default
#                       "xdp") to every host's veth0 with ip(8)
#   --xdp-pinned PATH   attach a program pinned at PATH with bpftool, run
#                       through nsenter --net (not `ip netns exec`, whose
#                       /sys remount hides a bpffs at /sys/fs/bpf)
#   --mode native|generic   XDP attach mode (default native)
#
# Hosts are namespaces NAME-a, NAME-b, ...; each has one interface, veth0,
# with addresses .1, .2, ... (::1, ::2, ...). The bridge namespace is
# NAME-br. NAME defaults to xdpfab-tb. Needs root, iproute2, and for
# --xdp-pinned bpftool and nsenter. Touches nothing outside its namespaces.
set -euo pipefail

readonly LINK=veth0

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}

die() {
  echo "testbed: $*" >&2
  exit 1
}

check_name() {
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$ ]] || die "bad name '$1' (letters, digits, _ . -; at most 31)"
}

# namespaces NAME: the bed's namespaces that exist, one per line.
namespaces() {
  local re=${1//./\\.}
  ip netns list | awk '{print $1}' | grep -E "^$re-([a-z]|br)\$" || true
}

readonly LETTERS=abcdefghijklmnopqrstuvwxyz

host_letter() {
  echo "${LETTERS:$1:1}"
}

cmd_up() {
  local name=$1
  shift
  local hosts=2 net=0 static=0 obj="" sec=xdp pinned="" mode=native
  while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=${2:?--hosts needs a number}; shift 2 ;;
    --net) net=${2:?--net needs a number}; shift 2 ;;
    --static-neigh) static=1; shift ;;
    --xdp-obj) obj=${2:?--xdp-obj needs a file}; shift 2 ;;
    --xdp-sec) sec=${2:?--xdp-sec needs a section}; shift 2 ;;
    --xdp-pinned) pinned=${2:?--xdp-pinned needs a path}; shift 2 ;;
    --mode) mode=${2:?--mode needs native or generic}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) die "unknown option '$1'" ;;
    esac
  done
  if ! [[ $hosts =~ ^[0-9]+$ ]] || [ "$hosts" -lt 2 ] || [ "$hosts" -gt 26 ]; then
    die "--hosts must be 2..26"
  fi
  if ! [[ $net =~ ^[0-9]+$ ]] || [ "$net" -gt 511 ]; then
    die "--net must be 0..511"
  fi
  [ "$mode" = native ] || [ "$mode" = generic ] || die "--mode must be native or generic"
  [ -z "$obj" ] || [ -z "$pinned" ] || die "give --xdp-obj or --xdp-pinned, not both"
  [ -z "$obj" ] || [ -r "$obj" ] || die "cannot read $obj"
  if [ -n "$(namespaces "$name")" ]; then
    die "$name exists already: run '$0 down $name' first"
  fi

  local v4net v6net
  v4net="198.$((18 + net / 256)).$((net % 256))"
  v6net="2001:2:0:$(printf %x "$net")"

  # Undo a half-built bed on any failure.
  trap 'echo "testbed: failed, removing $name" >&2; cmd_down "$name" >/dev/null' ERR

  local i ns letter
  for ((i = 0; i < hosts; i++)); do
    letter=$(host_letter "$i")
    ip netns add "$name-$letter"
    ip -n "$name-$letter" link set lo up
  done
  if [ "$hosts" -eq 2 ]; then
    ip -n "$name-a" link add "$LINK" type veth peer name "$LINK" netns "$name-b"
  else
    local br=$name-br
    ip netns add "$br"
    ip -n "$br" link set lo up
    ip -n "$br" link add br0 type bridge
    for ((i = 0; i < hosts; i++)); do
      letter=$(host_letter "$i")
      ip -n "$br" link add "p$letter" type veth peer name "$LINK" netns "$name-$letter"
      ip -n "$br" link set "p$letter" master br0 up
    done
    ip -n "$br" link set br0 up
  fi
  for ((i = 0; i < hosts; i++)); do
    ns=$name-$(host_letter "$i")
    ip -n "$ns" addr add "$v4net.$((i + 1))/24" dev "$LINK"
    ip -n "$ns" addr add "$v6net::$((i + 1))/64" dev "$LINK" nodad
    ip -n "$ns" link set "$LINK" up
  done
  if [ "$static" = 1 ]; then
    local j mac
    for ((j = 0; j < hosts; j++)); do
      mac=$(ip -n "$name-$(host_letter "$j")" -br link show dev "$LINK" | awk '{print $3}')
      for ((i = 0; i < hosts; i++)); do
        [ "$i" -ne "$j" ] || continue
        ns=$name-$(host_letter "$i")
        ip -n "$ns" neigh replace "$v4net.$((j + 1))" lladdr "$mac" dev "$LINK" nud permanent
        ip -n "$ns" neigh replace "$v6net::$((j + 1))" lladdr "$mac" dev "$LINK" nud permanent
      done
    done
  fi
  if [ -n "$obj" ] || [ -n "$pinned" ]; then
    local ipmode=xdpdrv
    [ "$mode" = native ] || ipmode=xdpgeneric
    for ((i = 0; i < hosts; i++)); do
      ns=$name-$(host_letter "$i")
      if [ -n "$obj" ]; then
        ip -n "$ns" link set dev "$LINK" "$ipmode" obj "$obj" sec "$sec"
      else
        nsenter --net="/var/run/netns/$ns" bpftool net attach "$ipmode" pinned "$pinned" dev "$LINK"
      fi
    done
  fi
  trap - ERR
  cmd_show "$name"
}

cmd_down() {
  local name=$1 ns removed=0
  for ns in $(namespaces "$name"); do
    ip netns del "$ns"
    echo "removed netns $ns"
    removed=1
  done
  [ "$removed" = 1 ] || echo "nothing to remove for $name"
}

cmd_show() {
  local name=$1 ns list
  list=$(namespaces "$name" | sort)
  [ -n "$list" ] || die "no test bed named $name"
  for ns in $list; do
    echo "netns $ns"
    if [ "${ns##*-}" = br ]; then
      ip -n "$ns" -br link show master br0 | awk '{print "  bridge port " $1 " " $2}'
      continue
    fi
    ip -n "$ns" -br link show dev "$LINK" | awk '{print "  " $1 " " $2 " " $3}'
    ip -n "$ns" -br addr show dev "$LINK" | awk '{$1=$2=""; print "  addr" $0}'
    local detail xdp
    detail=$(ip -n "$ns" link show dev "$LINK")
    xdp=$(grep -oE 'prog/xdp id [0-9]+( name [^ ]+)?' <<<"$detail" || true)
    if [ -n "$xdp" ]; then
      case $(head -n1 <<<"$detail") in
      *" xdpgeneric "*) echo "  $xdp (generic)" ;;
      *) echo "  $xdp (native)" ;;
      esac
    fi
    ip -n "$ns" neigh show dev "$LINK" nud permanent | sed 's/^/  neigh /'
  done
}

main() {
  [ $# -ge 1 ] || usage
  local cmd=$1
  shift
  local name=xdpfab-tb
  if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    name=$1
    shift
  fi
  check_name "$name"
  case $cmd in
  up) cmd_up "$name" "$@" ;;
  down) [ $# -eq 0 ] || die "down takes only a name"; cmd_down "$name" ;;
  show) cmd_show "$name" ;;
  -h | --help | help) usage 0 ;;
  *) usage ;;
  esac
}

main "$@"
