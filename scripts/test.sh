#!/usr/bin/env bash
# Builds flytune (release and ASan+UBSan) and runs every test that can run on
# this machine. GPU tests (ctest label gpu) skip with their reason where no GPU is.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# shellcheck source=scripts/ccache-env.sh
source scripts/ccache-env.sh

# Each part's wall time, printed as it ends and again as a table at the end, so a CI log says where
# its minutes go (docs/PERFORMANCE.md's CI budget quotes these lines).
part_times=()
part_start=$SECONDS
part_done() {
  local took=$((SECONDS - part_start))
  part_times+=("$(printf '%-18s %5d s' "$1" "$took")")
  echo "test.sh: $1 took ${took} s" >&2
  part_start=$SECONDS
}
trap 'printf "test.sh: parts so far\n" >&2; printf "  %s\n" "${part_times[@]}" >&2' EXIT

# gfx950 needs LLVM >= 20: Debian 13's clang-22 in a cached folder (seconds once prepared).
# Where it is ready, the gfx950 compile tests must run rather than skip (FLYTUNE_EXPECT_TARGETS);
# where it fails (rather than being skipped for want of root or debootstrap), CI fails.
llvm_status=0
bash scripts/setup-llvm.sh || llvm_status=$?
case $llvm_status in
  0) export FLYTUNE_EXPECT_TARGETS=gfx950 ;;
  125) ;;  # skipped, with its reason printed: the gfx950 tests skip with theirs
  *) exit "$llvm_status" ;;
esac
part_done setup-llvm

# As root (CI), the Slurm test (tests/slurm: a one-node cluster of slurm-wlm and munge, which
# scripts/setup.sh installs) must run rather than skip.
[ "$(id -u)" -ne 0 ] || export FLYTUNE_EXPECT_SLURM=1

cmake --preset release "${ccache_launcher[@]}" >/dev/null
cmake --build build/release -j "$jobs"
part_done build-release
# Label fullspace: the compile suite's whole spaces, every variant (docs/PERFORMANCE.md's CI budget); CI builds
# each space's covering sample instead (label compile).
ctest --preset release -LE fullspace -j "$jobs"
part_done ctest-release

# The Python package (docs/PYTHON.md): pip install . in a clean venv, the JAX FFI
# handler against the oldest and newest jaxlib, the torch op; an export made by
# the tool just built. Cached venvs and wheels in $FLYTUNE_CACHE_DIR.
bash scripts/python-test.sh
part_done python-test

# CI's record of gfx950: the resources of the default space's covering sample and the summary line,
# from the code objects the compile tests just built (their cache folder, so this takes seconds).
if [[ ",${FLYTUNE_EXPECT_TARGETS:-}," == *,gfx950,* ]]; then
  build/release/cli/flytune compile --target gfx950 --covering-sample --out build/release/gfx950-default-space \
    --cache-dir build/release/tests/compile/cache/Mixtral_DefaultSpace_gfx950 \
    2>&1 | grep -v '^compile gfx950: [0-9]'
  part_done gfx950-record
fi

# The sanitizer build of the unit tests.
cmake --preset asan "${ccache_launcher[@]}" >/dev/null
cmake --build build/asan -j "$jobs" --target ft_unit_tests
part_done build-asan
# Leak checks cover flytune's code; tests/lsan.supp names the vendor libraries
# (comgr, NVRTC, libLLVM, GPU runtimes) whose own allocations are not ours.
# use_sigaltstack=0: comgr's LLVM installs its own per-thread signal stacks,
# which ASan's would otherwise fail to unmap when a compile thread exits.
# intercept_tls_get_addr=0: GCC 12's leak checker records a bogus dynamic-TLS block of the
# dlopen'd vendor libraries once the gfx950 clang has been probed besides clang-19 (the
# gfx90a analysis tests then pass and the tracer crashes at exit on "DTLS 6 at 0x158e-...");
# the vendor libraries' TLS is theirs, not flytune's, so it is not scanned.
ASAN_OPTIONS=detect_leaks=1:use_sigaltstack=0:intercept_tls_get_addr=0 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset asan -L unit -j "$jobs"
part_done ctest-asan

# The fuzz targets (problem files, --space, --tokens, --routing), built with
# clang's libFuzzer and run for a bounded time.
bash scripts/fuzz.sh
part_done fuzz
