#pragma once
// One kernel variant as source: an instantiation unit over the embedded kernel
// templates, ready for any compiler backend.
#include <string>
#include <vector>

namespace ft {

struct KernelSource {
  std::string name;                       // variant kernel name, e.g. ft_gfx942_moe1_bf16_m64n128k32_w2x2_mfma16x16x16_s2
  std::string text;                       // the translation unit; includes headers such as "ft/kernels.hpp"
  std::vector<std::string> entry_points;  // extern "C" symbols it defines (checked in the code object)
};

}  // namespace ft
