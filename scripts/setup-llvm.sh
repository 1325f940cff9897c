#!/usr/bin/env bash
# Prepares the LLVM that compiles gfx950: a minimal Debian 13 (trixie) in a folder, holding
# clang-22, lld-22 and llvm-22 (llvm-objdump) from Debian's own packages, which flytune runs
# through the folder's own loader (Debian 12's clang 19 stops at gfx942; trixie's packages need
# a newer glibc than Debian 12 has, hence a folder rather than apt-get install).
#
# Idempotent and cached: the folder lives at $FLYTUNE_LLVM_ROOT, else
# ${FLYTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flytune}/trixie-llvm (where flytune
# looks for it); a finished folder carries a stamp naming its packages, and a run that finds
# the stamp only prints one line. debootstrap needs root and a Debian mirror: the one this
# machine's apt sources already use.
#
# Exit status: 0 the folder is ready; 125 skipped (no root, no debootstrap, no Debian mirror:
# one line says which); 1 it failed.
set -euo pipefail

packages="clang-22,lld-22,llvm-22"
suite="trixie"
cache="${FLYTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flytune}"
root="${FLYTUNE_LLVM_ROOT:-$cache/trixie-llvm}"
stamp="$root/.flytune-llvm"
stamp_text="$suite $packages"

say() { echo "setup-llvm: $*"; }
skip() { say "skipped: $*"; exit 125; }

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ]; then
  say "ready: $root ($(ls -d "$root"/usr/lib/llvm-*/bin/clang 2>/dev/null | head -1))"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || skip "debootstrap needs root; without it, install clang >= 20 (clang++-20..22 on PATH) or set FLYTUNE_CLANG"
command -v debootstrap >/dev/null || skip "no debootstrap (apt-get install debootstrap; scripts/setup.sh does)"
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || skip "no Debian archive keyring to check $suite's packages with"

# The Debian mirror this machine's apt already uses: a deb822 .sources entry ("URIs:" with
# Debian suites) or a one-line "deb URI suite ..." entry, security archives left out.
debian_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*deb[[:space:]]/ {
        n = 2; if ($2 ~ /^\[/) { while (n <= NF && $n !~ /\]$/) n++; n++ }
        print $n, $(n + 1); next
      }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { suite = $2 }
      /^[[:space:]]*$/ { if (uri != "") print uri, suite; uri = ""; suite = "" }
      END { if (uri != "") print uri, suite }
    ' "$f"
  done | awk '$2 ~ /^(bullseye|bookworm|trixie|forky|sid|stable|testing|unstable)(-updates|-backports)?$/ && $1 !~ /security/ { print $1; exit }'
}
mirror="$(debian_mirror)"
[ -n "$mirror" ] || skip "no Debian mirror in /etc/apt/sources.list* (this step needs a Debian machine)"

case "$root" in /|/usr|/usr/*|/etc|/etc/*|"$HOME") say "error: $root cannot be the LLVM folder" >&2; exit 1 ;; esac
if [ -e "$root" ] && [ ! -f "$stamp" ]; then
  say "error: $root exists but is not a folder this script made (no $stamp); remove it or set FLYTUNE_LLVM_ROOT" >&2
  exit 1
fi
partial="$root.partial"
if [ -d "$partial" ]; then
  # A run that stopped half way: debootstrap may have left /proc or /sys mounted inside.
  for m in proc sys dev/pts dev; do umount "$partial/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$partial"
fi
mkdir -p "$(dirname "$root")"
log="$(dirname "$root")/setup-llvm.log"
say "debootstrap $suite with $packages from $mirror into $root (log: $log; a few minutes, once)"
started=$SECONDS
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$partial" "$mirror" >"$log" 2>&1; then
  say "error: debootstrap failed; the last lines of $log:" >&2
  tail -5 "$log" >&2
  exit 1
fi
rm -rf --one-file-system "$root"  # an older stamp's folder (checked above)
mv "$partial" "$root"
# The downloaded packages are not needed once installed.
rm -rf "$root"/var/cache/apt/archives/*.deb
echo "$stamp_text" >"$stamp"
say "ready: $root in $((SECONDS - started)) s ($(du -sh "$root" | cut -f1))"
