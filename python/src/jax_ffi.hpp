#pragma once
// The XLA FFI handlers of flytune.jax (python/src/jax_ffi.cpp), compiled against
// jaxlib's xla/ffi/api/ffi.h; only this file's .cpp includes those headers.
#include <utility>
#include <vector>

namespace ft::py {

struct JaxHandler {
  const char* name;      // the custom call target
  const char* platform;  // "CUDA", "ROCM" or "cpu"
  void* function;        // XLA_FFI_Handler*
};
// Every handler with its platform, for jax.ffi.register_ffi_target.
std::vector<JaxHandler> jax_handlers();
// XLA_FFI_API_MAJOR / MINOR of the headers the handlers were built against.
std::pair<int, int> jax_ffi_api_version();

}  // namespace ft::py
