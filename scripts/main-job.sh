#!/usr/bin/env bash
# The main job: build the flytune tool (only it, through ccache where it is installed:
# scripts/ccache-env.sh, as scripts/test.sh), show the targets and GPUs, then search the built-in
# Mixtral 8x7B problem -- on the GPU when there is one; without one, a dry run that generates,
# compiles and analyses the small space (`--space small`: 51 variants) for gfx942 and sm_90a into
# ./flytune.db, with progress and ETA (the default space's 752 variants: `flytune search --dry-run`,
# about 4 minutes on two cores). Re-running resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ccache-env.sh
source scripts/ccache-env.sh
started=$SECONDS
cmake --preset release "${ccache_launcher[@]}" >/dev/null
cmake --build build/release -j "$(nproc)" --target flytune
echo "main-job: flytune built in $((SECONDS - started)) s"
flytune=./build/release/cli/flytune
"$flytune" targets
devices=$("$flytune" devices)
echo "$devices"
if grep -qx 'no GPU found' <<<"$devices"; then
  echo "main-job: no GPU here: a dry run of the small space (the default space: flytune search --dry-run)"
  "$flytune" search --problem mixtral-8x7b --db flytune.db --dry-run --space small
else
  "$flytune" search --problem mixtral-8x7b --db flytune.db
fi
echo "main-job: done in $((SECONDS - started)) s"
