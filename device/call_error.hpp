#pragma once
// One wording for every failed GPU runtime call, CUDA and HIP alike:
// "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory".
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "base/error.hpp"

namespace ft {

// HIP 5 returns the code's name as its description; say it once then.
inline std::string runtime_call_message(std::string_view call, std::string_view code_name,
                                        std::string_view description) {
  if (description.empty() || description == code_name) return fmt::format("{} failed: {}", call, code_name);
  return fmt::format("{} failed: {}: {}", call, code_name, description);
}

inline Error runtime_call_error(std::string_view call, std::string_view code_name, std::string_view description,
                                std::string context) {
  return Error{Errc::device, runtime_call_message(call, code_name, description), std::move(context)};
}

}  // namespace ft
