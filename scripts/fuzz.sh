#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz) with clang-19's libFuzzer, ASan and UBSan
# and runs each for a bounded time (FLYTUNE_FUZZ_SECONDS, default 45) from the
# seed corpus in tests/fuzz/corpus. New inputs go to a scratch copy; a crash
# leaves its input in build/fuzz/ (crash-*) and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FLYTUNE_FUZZ_SECONDS:-45}
build=build/fuzz

# shellcheck source=scripts/ccache-env.sh
source scripts/ccache-env.sh
CXX=clang++-19 cmake -S tests/fuzz/cmake -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${ccache_launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp tests/fuzz/corpus/inputs/* "$scratch"/
"$build"/ft_fuzz_inputs -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build"/ -print_final_stats=1 "$scratch" 2>"$build"/fuzz.log || {
  tail -40 "$build"/fuzz.log >&2
  echo "fuzz: ft_fuzz_inputs failed; the input is in $build/ (crash-*, leak-*, timeout-*)" >&2
  exit 1
}
grep -E "stat::number_of_executed_units|Done" "$build"/fuzz.log | sed 's/^/fuzz: /'
