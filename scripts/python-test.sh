#!/usr/bin/env bash
# The Python package (docs/PYTHON.md) in CI, without a GPU:
#   1. `pip install .` in a clean virtual environment (build isolation; the build's
#      jaxlib is the newest), then `import flytune` and the package tests there;
#   2. the wheel built against the oldest jaxlib supported (JAX_OLDEST), tested
#      with that jax;
#   3. the same wheel with the newest jax and torch (CPU use of the PyPI wheels)
#      with safetensors (the Mixtral model's checkpoint test) and hypothesis (the
#      property tests of bad input), every test (GPU tests skip with their reason).
# Wheels are kept in $FLYTUNE_CACHE_DIR/python-wheels (offline once fetched) and
# the environments of steps 2 and 3 in $FLYTUNE_CACHE_DIR/python (remade when
# their requirements change). Needs build/release/cli/flytune (the test export).
set -euo pipefail
cd "$(dirname "$0")/.."

JAX_OLDEST=0.6.0   # the first jaxlib whose FFI has DeviceOrdinal
JAX_NEWEST=0.10.2
TORCH=2.11.0       # the H200 machine's
HYPOTHESIS=6.155.2 # property-based tests of bad input (python/tests/test_bad_input_properties.py)
cache="${FLYTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flytune}"
wheels="$cache/python-wheels"
py="${FLYTUNE_PYTHON:-python3}"
mkdir -p "$wheels" build/python
export PIP_DISABLE_PIP_VERSION_CHECK=1 FLYTUNE_BIN="$PWD/build/release/cli/flytune"
say() { echo "python-test: $*"; }

# pip install from the wheel folder, fetching into it only when something is missing.
install() {
  local venv=$1; shift
  "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@" 2>/dev/null && return 0
  say "fetching into $wheels: $*"
  "$venv/bin/pip" download -q -d "$wheels" --find-links "$wheels" "$@"
  "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@"
}

# A cached environment, remade when its requirements change.
environment() {
  local venv=$1; shift
  if [ "$(cat "$venv/.flytune-requirements" 2>/dev/null)" != "$*" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    install "$venv" "$@"
    echo "$*" >"$venv/.flytune-requirements"
  fi
}

# shellcheck source=scripts/ccache-env.sh
source scripts/ccache-env.sh
launcher=()
[ ${#ccache_launcher[@]} -eq 0 ] || launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
started=$SECONDS

# 1. pip install . into a clean environment, with build isolation (its build
#    requirements from the wheel folder, fetched there first).
clean=build/python/clean-venv
rm -rf "$clean" build/python/isolated
"$py" -m venv "$clean"
"$clean/bin/pip" download -q --no-index --find-links "$wheels" -d "$wheels" scikit-build-core nanobind \
    "jaxlib==$JAX_NEWEST" numpy 2>/dev/null ||
  "$clean/bin/pip" download -q --find-links "$wheels" -d "$wheels" scikit-build-core nanobind "jaxlib==$JAX_NEWEST" numpy
PIP_FIND_LINKS="$wheels" "$clean/bin/pip" install -q "${launcher[@]}" -C build-dir=build/python/isolated .
"$clean/bin/python" -c "import flytune; print('python-test: import flytune', flytune.__version__, 'from', flytune.__file__)"
install "$clean" pytest
"$clean/bin/python" -m pytest -q python/tests/test_package.py
say "1. clean install: $((SECONDS - started)) s"

# 2. The wheel against the oldest jaxlib, tested with the oldest jax.
oldest="$cache/python/oldest-py$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')"
environment "$oldest" scikit-build-core nanobind "jax==$JAX_OLDEST" "jaxlib==$JAX_OLDEST" numpy pytest
rm -rf build/python/dist
"$oldest/bin/pip" wheel -q --no-build-isolation --no-deps "${launcher[@]}" -C build-dir=build/python/oldest -w build/python/dist .
wheel=$(ls build/python/dist/flytune-*.whl)
"$oldest/bin/pip" install -q --force-reinstall --no-deps "$wheel"
FLYTUNE_EXPECT_JAX=1 "$oldest/bin/python" -m pytest -q python/tests/test_package.py python/tests/test_jax.py \
  python/tests/test_train_jax.py
say "2. jax $JAX_OLDEST: $((SECONDS - started)) s"

# 3. The same wheel with the newest jax and torch.
newest="$cache/python/newest-py$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')"
environment "$newest" "jax==$JAX_NEWEST" "jaxlib==$JAX_NEWEST" "torch==$TORCH" numpy pytest safetensors \
  "hypothesis==$HYPOTHESIS"
"$newest/bin/pip" install -q --force-reinstall --no-deps "$wheel"
FLYTUNE_EXPECT_JAX=1 FLYTUNE_EXPECT_TORCH=1 FLYTUNE_EXPECT_SAFETENSORS=1 FLYTUNE_EXPECT_HYPOTHESIS=1 \
  "$newest/bin/python" -m pytest -q -rs --durations=5 python/tests
say "3. jax $JAX_NEWEST, torch $TORCH: $((SECONDS - started)) s"
