#!/usr/bin/env bash
# Installs what flytune needs on Debian 12 / Ubuntu 24.04, idempotently: only
# missing packages are installed, and apt's lists are refreshed only then.
#   bash scripts/setup.sh              everything scripts/test.sh (CI) needs
#   bash scripts/setup.sh --main-job   only what scripts/main-job.sh needs (the README's first command):
#                                      the build of flytune and its dry run, not the test tools (chromium,
#                                      Slurm, debootstrap, shellcheck, abigail, Python headers: on Debian 12
#                                      about half of a fresh machine's download, docs/PERFORMANCE.md "First run")
set -euo pipefail

main_job_only=0
case "${1:-}" in
  "") ;;
  --main-job) main_job_only=1 ;;
  *) echo "usage: bash scripts/setup.sh [--main-job]" >&2; exit 2 ;;
esac

# scripts/main-job.sh: the release preset's configure (its tests' GoogleTest included) and the build of
# flytune, the dry run's compilers (clang-19 and lld-19 for gfx942; NVRTC below), ccache.
packages=(
  build-essential cmake ninja-build git pkg-config
  libfmt-dev libcli11-dev libsqlite3-dev sqlite3 nlohmann-json3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  libamd-comgr-dev libamdhip64-dev
  llvm-19-dev clang-19 lld-19
  ccache                 # compiles cached in $FLYTUNE_CACHE_DIR/ccache across runs and checkouts (scripts/ccache-env.sh)
)
# scripts/test.sh's tools besides.
[ "$main_job_only" -eq 1 ] || packages+=(
  libclang-rt-19-dev  # the fuzz targets: libFuzzer and the sanitizer runtimes of clang-19 (tests/fuzz)
  chromium libxml2-utils  # report tests: the HTML report in headless chromium, JUnit XML through xmllint
  debootstrap            # scripts/setup-llvm.sh: Debian 13's clang-22 in a folder, for gfx950
  slurm-wlm munge        # tests/slurm: a one-node Slurm cluster runs scripts/slurm/'s array and merge jobs
  shellcheck             # tests/slurm: scripts/slurm/ and the test itself are shellcheck-clean
  python3-venv python3-dev  # the Python package (pyproject.toml, scripts/python-test.sh)
  abigail-tools          # tests/abi: abidw/abidiff hold libflytune_runtime.so to its ABI baseline (scripts/check-abi.py)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit (headers + NVRTC) comes from NVIDIA's installer at /usr/local/cuda; without it, the
# distribution's nvidia-cuda-toolkit where it is CUDA 12 or newer (Ubuntu 24.04's multiverse: 12.0). Debian
# 12's is 11.8 (non-free), which the build rejects (find_package(CUDAToolkit 12)), so it is not installed
# there: a fresh Debian 12 needs NVIDIA's CUDA first (docs/PERFORMANCE.md "First run").
if [ ! -f /usr/local/cuda/include/nvrtc.h ] && [ ! -f /usr/include/nvrtc.h ]; then
  [ ${#missing[@]} -gt 0 ] || "${sudo_cmd[@]}" apt-get update -qq
  candidate=$(apt-cache policy nvidia-cuda-toolkit 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
  major=${candidate#*:}
  major=${major%%.*}
  if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -ge 12 ]; then
    echo "setup: no CUDA toolkit at /usr/local/cuda; installing the distribution's nvidia-cuda-toolkit $candidate"
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit >/dev/null
  else
    echo "setup: error: no CUDA toolkit at /usr/local/cuda, and the distribution's nvidia-cuda-toolkit is ${candidate:-(none)}" \
      "(12 or newer needed): install CUDA 12 or 13 from NVIDIA (https://developer.nvidia.com/cuda-downloads) to /usr/local/cuda and re-run" >&2
    exit 1
  fi
fi
echo "setup: dependencies present"
