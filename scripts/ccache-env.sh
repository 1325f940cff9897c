# shellcheck shell=bash disable=SC2034  # ccache_launcher is for the scripts that source this
# Sourced by scripts/test.sh and scripts/python-test.sh (and by hand before a local build):
# compiles are cached by ccache (Debian's package, installed by scripts/setup.sh) in
# $FLYTUNE_CACHE_DIR/ccache. Paths are hashed relative to the checkout's parent folder, so a
# fresh clone of the same commit elsewhere (CI's) reuses a developer's or a previous run's
# objects; a cold cache builds everything, as without it. Sets ccache_launcher to the CMake
# arguments that use it (empty where ccache is missing).
ccache_launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${FLYTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flytune}/ccache"
  export CCACHE_BASEDIR
  CCACHE_BASEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  export CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
  export CCACHE_SLOPPINESS=include_file_mtime,include_file_ctime,time_macros,pch_defines
  ccache_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
