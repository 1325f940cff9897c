#pragma once
// The manifest's layout facts, read off the structs and the layer program they
// describe: the launch argument structs' byte layouts, the weight layouts, and
// an fp8 problem's scales and scale tensors (docs/EXPORT.md).
#include <nlohmann/json.hpp>

#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft::db {

nlohmann::json moe_args_layout();
nlohmann::json shuffle_args_layout();
nlohmann::json weight_layouts();
nlohmann::json fp8_problem_json(const Problem& p, const Target& t);

}  // namespace ft::db
