#!/usr/bin/env bash
# validate.sh: static checks of the operator packaging, run by .ci/run. It
# boots no VM and starts no service; it needs ruby, systemd (for
# systemd-analyze, not a running systemd) and go. shellcheck is used when
# installed.
#
#   Vagrantfile              ruby -c
#   deploy/*.service         systemd-analyze verify, failing on any warning
#                            (verify itself only warns about unknown keys and
#                            bad values), with ExecStart= pointed at a fresh
#                            build of ./cmd/xdpfab; capability names known to
#                            systemd and the ambient and bounding sets equal;
#                            the agent flags it uses against `xdpfab agent
#                            --help` once the agent exists
#   deploy/xdpfab.sysusers   systemd-sysusers --dry-run
#   deploy/xdpfab.default    KEY=value lines, defining what the unit uses
#   deploy/**.sh             bash -n (and shellcheck)
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
bad() {
  echo "validate: $*" >&2
  fail=1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Vagrantfile
ruby -c Vagrantfile >/dev/null || bad "Vagrantfile: ruby syntax error"

# The unit
unit=deploy/xdpfab.service
go build -o "$tmp/xdpfab" ./cmd/xdpfab
for u in deploy/*.service; do
  sed "s|/usr/local/bin/xdpfab|$tmp/xdpfab|" "$u" >"$tmp/${u##*/}"
done
if ! out=$(cd "$tmp" && systemd-analyze verify --man=no ./*.service 2>&1) || [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  bad "deploy/*.service: systemd-analyze verify complained (above)"
fi
caps() { # key: the capability names of that setting, sorted
  sed -n "s/^$1=//p" "$unit" | tr ' ' '\n' | sed '/^$/d' | sort
}
ambient=$(caps AmbientCapabilities)
bounding=$(caps CapabilityBoundingSet)
[ -n "$ambient" ] || bad "$unit: no AmbientCapabilities="
[ "$ambient" = "$bounding" ] || bad "$unit: AmbientCapabilities= and CapabilityBoundingSet= differ"
for c in $bounding; do
  systemd-analyze capability "$c" >/dev/null 2>&1 || bad "$unit: unknown capability $c"
done
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
help=$("$tmp/xdpfab" agent --help 2>&1 || true)
if grep -q -- '-iface' <<<"$help"; then
  while read -r f; do
    grep -Eq -- "(^|[[:space:]])--?${f#--}([[:space:]=]|$)" <<<"$help" ||
      bad "$unit: xdpfab agent --help does not list $f"
  done < <(grep -o -- '--[a-z][a-z-]*' <<<"$exec_start")
else
  bad "xdpfab agent --help does not list --iface: its flags in $unit cannot be checked"
fi

# sysusers.d entry (dry run: nothing is created)
if ! out=$(systemd-sysusers --dry-run "$PWD/deploy/xdpfab.sysusers" 2>&1) ||
  grep -qiE 'error|ignoring|unknown|failed' <<<"$out"; then
  printf '%s\n' "$out" >&2
  bad "deploy/xdpfab.sysusers: systemd-sysusers --dry-run complained (above)"
fi

# Environment file: comments, blank lines and KEY=value only; every ${VAR}
# and $VAR of the unit defined there or by Environment=.
def=deploy/xdpfab.default
if grep -nvE '^(#.*|[[:space:]]*|[A-Za-z_][A-Za-z0-9_]*=.*)$' "$def" >&2; then
  bad "$def: lines above are neither comments nor KEY=value"
fi
for u in deploy/*.service; do
  while read -r v; do
    grep -q "^$v=" "$def" || bad "$def: does not define $v, which $u uses"
  done < <(grep -v '^#' "$u" | grep -oE '[$][{]?[A-Za-z_][A-Za-z0-9_]*' | tr -d '{}$' | sort -u)
done

# Shell
for s in deploy/*.sh deploy/vagrant/*.sh; do
  [ -e "$s" ] || continue
  bash -n "$s" || bad "$s: bash syntax error"
done
if command -v shellcheck >/dev/null; then
  shellcheck deploy/*.sh deploy/vagrant/*.sh || bad "shellcheck (above)"
else
  echo "validate: shellcheck not installed: skipped"
fi

[ "$fail" = 0 ] || exit 1
echo "validate: deploy/ and Vagrantfile ok"
