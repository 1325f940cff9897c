#!/usr/bin/env bash
# The main job: build flytune, then show targets and devices.
# (flytune search on the built-in Mixtral problem takes over here once it lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target flytune
./build/release/cli/flytune targets
