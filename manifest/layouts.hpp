#pragma once
// The manifest's layout facts, read off the structs and the layer program they
// describe: the launch argument structs' byte layouts, the weight layouts, and
// an fp8 problem's scales and scale tensors (docs/EXPORT.md). The manifest's
// encoding writes them; the export's C header states the same fields and
// offsets from here.
#include <cstddef>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"

namespace ft::manifest {

// One field of an argument struct as the manifest documents it.
struct ArgField {
  const char* name;
  std::size_t offset, size;
  const char* type;
  const char* meaning;  // "" for none
};
// ft::MoeArgs, field by field (templates/ft/moe_args.hpp, offsetof).
std::span<const ArgField> moe_args_fields();
// The offset of element (row, k) of a [rows, cols] matrix in a weight layout,
// as a C expression (templates/ft/weight_layout.hpp).
std::string weight_offset(WeightLayout layout);

nlohmann::json moe_args_layout();  // "args"
nlohmann::json shuffle_layout();   // "shuffle": its argument struct, grid and block
nlohmann::json weight_layouts();   // "weight_layouts"
// An fp8 problem's "scales" and "fp8" members.
nlohmann::json fp8_problem_json(const Problem& p, const Target& t);

}  // namespace ft::manifest
