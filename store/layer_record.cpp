#include "store/layer_record.hpp"

#include <fmt/format.h>

namespace ft::db {

using nlohmann::json;

LayerRecord LayerRecord::of(const Variant& stage1, const Variant& stage2) {
  return {stage1.to_json(), stage2.to_json(), stage1.name(), stage2.name()};
}

json LayerRecord::to_params() const {
  return {{"stage1", stage1}, {"stage2", stage2}, {"stage1_kernel", stage1_kernel}, {"stage2_kernel", stage2_kernel}};
}

Result<LayerRecord> LayerRecord::from_params(const json& params) {
  if (!params.is_object() || !params.contains("stage1") || !params.contains("stage2") || !params.contains("stage1_kernel") ||
      !params.contains("stage2_kernel"))
    return fail(Errc::database, "the layer variant lacks stage1/stage2 parameters");
  if (!params["stage1_kernel"].is_string() || !params["stage2_kernel"].is_string())
    return fail(Errc::database, "the layer variant's stage1_kernel/stage2_kernel are not names");
  return LayerRecord{params["stage1"], params["stage2"], params["stage1_kernel"].get<std::string>(),
                     params["stage2_kernel"].get<std::string>()};
}

Result<std::pair<Variant, Variant>> LayerRecord::variants() const {
  Variant v1 = FT_TRY(Variant::from_json(stage1));
  Variant v2 = FT_TRY(Variant::from_json(stage2));
  return std::pair{std::move(v1), std::move(v2)};
}

Status LayerRecord::check_names(const Variant& v1, const Variant& v2) const {
  for (const auto& [v, kernel] : {std::pair<const Variant&, const std::string&>{v1, stage1_kernel}, {v2, stage2_kernel}})
    if (v.name() != kernel) return fail(Errc::database, fmt::format("stage parameters name {}, the row says {}", v.name(), kernel));
  return {};
}

}  // namespace ft::db
