#pragma once
// A layer winner's variants row (kind layer): the two stage variants the
// search timed together, in one typed record. Its JSON is the row's params as
// the database holds them -- {"stage1": <Variant::to_json>, "stage2": ...,
// "stage1_kernel": <name>, "stage2_kernel": <name>} -- written by the search
// (search/steps.cpp) and read by export, report and `flytune db`, which no
// longer spell its members.
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "generator/variant.hpp"

namespace ft::db {

struct LayerRecord {
  nlohmann::json stage1, stage2;            // each stage variant's JSON (Variant::to_json)
  std::string stage1_kernel, stage2_kernel;  // the stage variants' names: their own rows' kernel_name

  static LayerRecord of(const Variant& stage1, const Variant& stage2);
  std::string kernel_name() const { return stage1_kernel + "+" + stage2_kernel; }  // the layer row's kernel_name
  nlohmann::json to_params() const;
  // Errc::database naming the member a row lacks or mistypes.
  static Result<LayerRecord> from_params(const nlohmann::json& params);
  // The stage variants as recorded.
  Result<std::pair<Variant, Variant>> variants() const;
  // Errc::database when a stage variant's name is not the name recorded beside it.
  Status check_names(const Variant& stage1, const Variant& stage2) const;
};

}  // namespace ft::db
