#!/usr/bin/env bash
# check-doc-links.sh: the documentation's links and the code's citations of it
# resolve. Run from anywhere; it works on the repository it lives in, needs
# bash, awk, find and sed (and git, if present, to list the source files),
# and never touches the network.
#
# Checks:
#   1. every relative link in README.md and docs/**/*.md ([text](target),
#      ![alt](target), [label]: target) names a file or directory that
#      exists, relative to the markdown file;
#   2. every docs/<name>.md path cited in a comment of a Go, C or header file
#      names a file that exists (relative to the repository root);
#   3. anchors: a link or citation with #fragment into a markdown file names
#      a heading of that file (GitHub's anchor for it) or an explicit
#      <a id="..."> / <a name="...">. --no-anchors skips this check.
#
# Links with a scheme (https:, mailto:, ...) are not followed; code spans and
# fenced code blocks are ignored. Exit status 1 lists every broken link as
# file:line: message.
#
# Usage: scripts/check-doc-links.sh [--no-anchors]
set -euo pipefail
export LC_ALL=C

anchors=1
case "${1:-}" in
  "") ;;
  --no-anchors) anchors=0 ;;
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--no-anchors]" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."

bad=0
links=0
cites=0
fail() { echo "$1" >&2; bad=$((bad + 1)); }

# slugs FILE: the anchors FILE's headings get on GitHub (lower case,
# punctuation dropped, spaces to hyphens, -1, -2, ... for repeats), and its
# explicit <a id/name> anchors, one per line.
slugs() {
  awk '
    /^ ? ? ?(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      while (match(line, /<a +(id|name)="[^"]+"/)) {
        a = substr(line, RSTART, RLENGTH)
        sub(/^<a +(id|name)="/, "", a); sub(/"$/, "", a)
        print a
        line = substr(line, RSTART + RLENGTH)
      }
    }
    /^ ? ? ?#+( |$)/ {
      t = $0
      sub(/^ *#+ */, "", t); sub(/[ \t]+#+[ \t]*$/, "", t); sub(/[ \t]+$/, "", t)
      gsub(/\]\([^)]*\)/, "", t)                 # [text](url) -> [text
      gsub(/<[^>]*>/, "", t)                     # inline HTML
      t = tolower(t)
      gsub(/\342\200[\223\224]/, "", t)          # en and em dashes
      gsub(/[^a-z0-9 _\200-\377-]/, "", t)
      gsub(/ /, "-", t)
      n = seen[t]++
      print (n ? t "-" n : t)
    }
  ' "$1"
}

declare -A slugcache
has_anchor() { # file anchor
  local f=$1 a=$2
  if [[ -z ${slugcache[$f]+x} ]]; then
    slugcache[$f]=$'\n'"$(slugs "$f")"$'\n'
  fi
  [[ ${slugcache[$f]} == *$'\n'"$a"$'\n'* ]]
}

# check_target WHERE BASE TARGET: TARGET (path[#anchor]) relative to BASE.
check_target() {
  local where=$1 base=$2 target=$3 path frag file
  path=${target%%#*}
  frag=
  [[ $target == *#* ]] && frag=${target#*#}
  if [[ -z $path ]]; then
    file=$where_file
  else
    file=$base/$path
    file=${file#./}
    if [[ ! -e $file ]]; then
      fail "$where: $target: no such file ($file)"
      return
    fi
  fi
  if ((anchors)) && [[ -n $frag && $file == *.md && -f $file ]]; then
    has_anchor "$file" "$frag" || fail "$where: $target: no heading or anchor \"$frag\" in $file"
  fi
}

# 1. Markdown links.
mdfiles=(README.md)
while IFS= read -r f; do mdfiles+=("$f"); done < <(find docs -name '*.md' -type f | sort)

for md in "${mdfiles[@]}"; do
  [[ -f $md ]] || continue
  where_file=$md
  base=$(dirname "$md")
  while IFS=$'\t' read -r line target; do
    links=$((links + 1))
    target=${target#<}; target=${target%>}
    case $target in
      [a-zA-Z]*:*) continue ;; # a scheme: https:, mailto:, ...
    esac
    check_target "$md:$line" "$base" "$target"
  done < <(awk '
    /^ ? ? ?(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)                  # code spans
      if (match(line, /^ ? ? ?\[[^]]+\]:[ \t]+[^ \t]+/)) {
        d = substr(line, RSTART, RLENGTH)
        sub(/^ ? ? ?\[[^]]+\]:[ \t]+/, "", d)
        print NR "\t" d
        next
      }
      while (match(line, /\]\([^) \t]+/)) {
        print NR "\t" substr(line, RSTART + 2, RLENGTH - 2)
        line = substr(line, RSTART + RLENGTH)
      }
    }
  ' "$md")
done

# 2. Citations of docs/*.md in code comments.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t srcs < <(git ls-files -co --exclude-standard -- '*.go' '*.c' '*.h')
else
  mapfile -t srcs < <(find . -path ./.git -prune -o -type f \( -name '*.go' -o -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||')
fi

where_file=
if ((${#srcs[@]})); then
  while IFS=$'\t' read -r src line target; do
    cites=$((cites + 1))
    where_file=$src
    check_target "$src:$line" . "$target"
  done < <(awk '
    FNR == 1 { block = 0 }
    {
      c = ""
      line = $0
      if (block) {
        c = line
        if (index(line, "*/")) block = 0
      } else if (i = index(line, "//")) {
        c = substr(line, i + 2)
      } else if (i = index(line, "/*")) {
        c = substr(line, i + 2)
        if (!index(c, "*/")) block = 1
      }
      while (match(c, /(^|[^A-Za-z0-9_.\/-])docs\/[A-Za-z0-9_.\/-]*\.md(#[A-Za-z0-9_-]+)?/)) {
        t = substr(c, RSTART, RLENGTH)
        sub(/^[^d]*/, "", t)
        print FILENAME "\t" FNR "\t" t
        c = substr(c, RSTART + RLENGTH)
      }
    }
  ' "${srcs[@]}")
fi

if ((bad)); then
  echo "check-doc-links: $bad broken link(s) or citation(s)" >&2
  exit 1
fi
echo "check-doc-links: ok ($links markdown links, $cites code citations)"
