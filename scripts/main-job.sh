#!/usr/bin/env bash
# The main job: build flytune, show the targets and GPUs, then search the
# built-in Mixtral 8x7B problem -- on the GPU when there is one; without one, a
# dry run that generates, compiles and analyses the default space for gfx942 and
# sm_90a into ./flytune.db. Re-running resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target flytune
./build/release/cli/flytune targets
./build/release/cli/flytune devices
./build/release/cli/flytune search --problem mixtral-8x7b --db flytune.db
