#pragma once
// The caller's C structs of a launch (flytune_runtime.h: ft_layer_buffers,
// ft_layer_grads) read by the size the caller passes, as the runtime's
// (LayerBuffers, GradBuffers): the C API's launches (c_api.cpp) and its rows
// by operation (c_api_operations.cpp) read them here.
#include <cstddef>

#include "base/error.hpp"
#include "runtime/include/flytune_runtime.h"
#include "runtime/src/runtime_impl.hpp"

namespace ft::rt {

// The caller's ft_layer_buffers of `size` bytes: exactly those bytes are read,
// the fields beyond them are null; Errc::usage for a size that is not one of
// the struct's, or bytes set beyond the fields this library knows.
Result<LayerBuffers> buffers_of(const ft_layer_buffers* buffers, std::size_t size);
// The caller's ft_layer_grads of `size` bytes, by the same rule.
Result<GradBuffers> grads_of(const ft_layer_grads* grads, std::size_t size);
// A launch refused for a buffer that a caller of an earlier header could not
// pass (its ft_layer_buffers of `size` bytes ends before that field) says so.
Status with_size_note(Status s, std::size_t size);

}  // namespace ft::rt
