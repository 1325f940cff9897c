# Every dependency comes from Debian's packages (scripts/setup.sh installs them).
# Libraries the GPU machine lacks (fmt, SQLite, xxHash) are linked statically or
# header-only, so one binary built here runs there; GPU runtimes, NVRTC, comgr
# and libLLVM are opened with dlopen at run time (system/dynlib.hpp).
#
# FLYTUNE_PYTHON (the Python package, pyproject.toml) builds only the runtime:
# fmt, nlohmann_json, xxHash and the CUDA and HIP headers.

find_package(fmt 9 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
find_path(FLYTUNE_XXHASH_INCLUDE xxhash.h REQUIRED)
find_library(FLYTUNE_XXHASH_STATIC NAMES libxxhash.a REQUIRED)
find_path(FLYTUNE_HIP_INCLUDE hip/hip_runtime_api.h REQUIRED)
# CUDA toolkit: cuda.h and nvrtc.h for types; libcuda and libnvrtc are dlopened.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit 12 REQUIRED)
if(FLYTUNE_PYTHON)
  message(STATUS "flytune: the Python package (runtime and bindings only); CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_INCLUDE_DIRS}")
  return()
endif()

find_package(CLI11 2 REQUIRED)
find_package(SQLite3 REQUIRED)
find_library(FLYTUNE_SQLITE_STATIC NAMES libsqlite3.a REQUIRED)

# ROCm compiler support (comgr) and HIP: headers at build time, library names
# recorded for dlopen.
find_package(amd_comgr REQUIRED CONFIG)
get_target_property(FLYTUNE_COMGR_INCLUDE amd_comgr INTERFACE_INCLUDE_DIRECTORIES)
if(NOT FLYTUNE_COMGR_INCLUDE)
  find_path(FLYTUNE_COMGR_INCLUDE amd_comgr.h REQUIRED)
endif()

# LLVM 19: the llvm-c disassembler API (opened from libLLVM at run time) and
# clang-19 as the amdgcn compiler for ISAs comgr lacks.
find_package(LLVM REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
if(LLVM_VERSION_MAJOR LESS 19)
  message(FATAL_ERROR "flytune needs LLVM >= 19 (llvm-19-dev); found ${LLVM_VERSION}")
endif()
find_program(FLYTUNE_CLANG NAMES clang++-19 clang++ HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)
find_program(FLYTUNE_LLD NAMES ld.lld-19 ld.lld HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)
set(FLYTUNE_LIBLLVM "${LLVM_LIBRARY_DIR}/libLLVM.so.${LLVM_VERSION_MAJOR}.${LLVM_VERSION_MINOR}")
if(NOT EXISTS "${FLYTUNE_LIBLLVM}")
  set(FLYTUNE_LIBLLVM "${LLVM_LIBRARY_DIR}/libLLVM-${LLVM_VERSION_MAJOR}.so")
endif()

if(FLYTUNE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

message(STATUS "flytune: clang ${FLYTUNE_CLANG}, libLLVM ${FLYTUNE_LIBLLVM}, CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_INCLUDE_DIRS}")
