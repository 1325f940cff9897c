#include <fmt/format.h>

#include "generator/families/families.hpp"
#include "generator/variant.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft::axes {
namespace {

Axis integer(std::string_view key, std::string_view spelling, Values v, int initial, int rank,
             std::string (*token)(const Variant&, AxisValue)) {
  Axis a;
  a.key = key;
  a.type = AxisType::integer;
  a.spelling = spelling;
  a.cpp_type = "int";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.initial = initial;
  a.required = true;
  a.token = token;
  a.name_rank = rank;
  return a;
}

bool stage2_only(const Variant& v) { return v.role == StageRole::stage2; }

}  // namespace

Axis atom() {
  Axis a;
  a.key = "atom";
  a.type = AxisType::atom;
  a.spelling = "atom";
  a.required = true;
  a.token = [](const Variant& v, AxisValue) { return fmt::format("_{}", v.atom()->short_name()); };
  a.name_rank = kAtom;
  return a;
}

Axis tile_m(std::string_view spelling, Values v, int initial) {
  return integer("tile_m", spelling, std::move(v), initial, kTileM,
                 [](const Variant&, AxisValue x) { return fmt::format("_m{}", x); });
}
Axis tile_n(std::string_view spelling, Values v, int initial) {
  return integer("tile_n", spelling, std::move(v), initial, kTileN, [](const Variant&, AxisValue x) { return fmt::format("n{}", x); });
}
Axis tile_k(std::string_view spelling, Values v, int initial) {
  return integer("tile_k", spelling, std::move(v), initial, kTileK, [](const Variant&, AxisValue x) { return fmt::format("k{}", x); });
}
Axis stages(std::string_view spelling, Values v, int initial) {
  return integer("stages", spelling, std::move(v), initial, kStages, [](const Variant&, AxisValue x) { return fmt::format("_s{}", x); });
}

Axis warps(std::string_view spelling, Values v, AxisValue initial) {
  Axis a = integer("warps", spelling, std::move(v), initial, kWarps, [](const Variant&, AxisValue x) {
    return fmt::format("_w{}x{}", pair_first(x), pair_second(x));
  });
  a.type = AxisType::pair;
  a.pair_keys = {"warps_m", "warps_n"};
  return a;
}

Axis warp_specialized(std::string_view spelling, Values v) {
  Axis a;
  a.key = "warp_specialized";
  a.type = AxisType::boolean;
  a.spelling = spelling;
  a.names = {"off", "on"};
  a.cpp_type = "bool";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.token = [](const Variant&, AxisValue x) { return std::string(x ? "_ws" : ""); };
  a.name_rank = kProducer;
  return a;
}

Axis tiles_per_block(std::string_view spelling, Values v) {
  Axis a = integer("tiles_per_block", spelling, std::move(v), 1, kTiles,
                   [](const Variant&, AxisValue x) { return x > 1 ? fmt::format("_t{}", x) : std::string(); });
  a.required = false;  // records written before the axis existed: one tile per block
  a.applies = [](const Variant& v) { return v.get("warp_specialized") != 0; };
  return a;
}

Axis weight_in_stage1(Values v) {
  Axis a;
  a.key = "weight_in_stage1";
  a.type = AxisType::boolean;
  a.spelling = "weight";
  a.names = {"stage2", "stage1"};
  a.cpp_type = "bool";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.required = true;
  a.token = [](const Variant& var, AxisValue x) {
    return std::string(!x ? "" : var.role == StageRole::stage1 ? "_rw" : "_norw");
  };
  a.name_rank = kWeight;
  return a;
}

Axis split_k(Values v) {
  Axis a = integer("split_k", "split_k", std::move(v), 1, kSplitK, [](const Variant& var, AxisValue x) {
    return var.role == StageRole::stage2 && x > 1 ? fmt::format("_sk{}", x) : std::string();
  });
  a.applies = stage2_only;
  return a;
}

Axis reduce(Values v) {
  Axis a;
  a.key = "reduce";
  a.type = AxisType::choice;
  a.spelling = "reduce";
  a.names = {"atomic", "partials", "partials16", "atomic_y", "partials_y"};  // the order of ft::Reduce (templates/ft/moe_args.hpp)
  a.cpp_type = "ft::Reduce";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.required = true;
  a.applies = stage2_only;
  a.token = [](const Variant& var, AxisValue x) {
    return var.role == StageRole::stage2 ? fmt::format("_{}", to_string(Reduce(x))) : std::string();
  };
  a.name_rank = kReduce;
  return a;
}

Axis layout(std::string_view spelling, Values v, AxisValue (*derived)(const Variant&)) {
  Axis a;
  a.key = "layout";
  a.type = AxisType::choice;
  a.spelling = spelling;
  a.names = {"plain", "shuffled", "tiled", "mapped"};  // the order of ft::WeightLayout (templates/ft/moe_args.hpp)
  a.cpp_type = "ft::WeightLayout";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.required = true;
  if (derived) {
    a.applies = [](const Variant&) { return false; };
    a.inactive = derived;
  }
  a.token = [](const Variant&, AxisValue x) {
    switch (WeightLayout(x)) {
      case WeightLayout::shuffled: return std::string("_shuf");
      case WeightLayout::tiled: return std::string("_tiled");
      case WeightLayout::mapped: return std::string("_map");
      case WeightLayout::plain: break;
    }
    return std::string();
  };
  a.name_rank = kLayout;
  return a;
}

namespace {
bool fp8_variant(const Variant& v) { return v.dtype == DType::e4m3; }
}  // namespace

Axis scales() {
  Axis a;
  a.key = "scales";
  a.type = AxisType::choice;
  a.names = {"none", "per_tensor", "per_token", "block128", "static_tensor"};  // the order of ft::Scales (templates/ft/moe_args.hpp)
  a.cpp_type = "ft::Scales";
  a.initial = int(Scales::none);  // the space sets the problem's (from_problem)
  a.present = fp8_variant;
  a.from_problem = [](const Problem& p) { return AxisValue(p.scales); };
  a.token = [](const Variant&, AxisValue x) {
    switch (Scales(x)) {
      case Scales::per_tensor: return std::string("_tensor");
      case Scales::per_token: return std::string("_token");
      case Scales::block128: return std::string("_block128");
      case Scales::static_tensor: return std::string("_static");
      case Scales::none: break;
    }
    return std::string("_noscales");
  };
  a.name_rank = kScales;
  return a;
}

Axis inter_store(Values v) {
  Axis a;
  a.key = "inter_store";
  a.type = AxisType::choice;
  a.spelling = "inter_store";
  a.names = {"bf16", "fp8"};  // the order of ft::InterStore (templates/ft/moe_args.hpp)
  a.cpp_type = "ft::InterStore";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  // Not with a static intermediate scale: such a stage 1 always quantises on store, with that scale.
  a.present = [](const Variant& var) {
    return fp8_variant(var) && var.role == StageRole::stage1 && fp8::scales(var) != Scales::static_tensor;
  };
  a.token = [](const Variant&, AxisValue x) { return std::string(InterStore(x) == InterStore::fp8 ? "_qstore" : ""); };
  a.name_rank = kInterStore;
  return a;
}

Axis inter_scales(Values v) {
  Axis a;
  a.key = "inter_scales";
  a.type = AxisType::choice;
  a.spelling = "inter_scales";
  a.names = {"group", "row"};  // the order of ft::InterScales (templates/ft/moe_args.hpp)
  a.cpp_type = "ft::InterScales";
  a.defaults = std::move(v.defaults);
  a.wide = std::move(v.wide);
  a.small = std::move(v.small);
  a.required = false;  // a record from before the axis read group scales
  a.present = [](const Variant& var) { return fp8_variant(var) && var.role == StageRole::stage2; };
  a.token = [](const Variant&, AxisValue x) { return std::string(InterScales(x) == InterScales::row ? "_rowscale" : ""); };
  a.name_rank = kInterScales;
  return a;
}

Axis promote(Values v) {
  Axis a = integer("promote", "promote", std::move(v), 1, kPromote, [](const Variant&, AxisValue x) {
    if (x == 1) return std::string();  // the kernels' default: fp8 names from before the axis stay
    return x == 0 ? std::string("_fastacc") : fmt::format("_promote{}", x);
  });
  a.least = 0;         // 0: never
  a.required = false;  // a record from before the axis promoted every k-tile
  a.present = fp8_variant;
  // Searched only where the scales are constant along k (stage 1, per-tensor
  // and per-token: the scales axis comes first); elsewhere every k-tile.
  a.applies = [](const Variant& var) { return fp8::promote_may_vary(var); };
  a.inactive = [](const Variant&) { return AxisValue(1); };
  return a;
}

AxisValue k_tile_of_row(const Variant& v) {
  const AtomInfo* atom = v.atom();
  return atom ? 128 / atom->operand_bytes() : 64;
}

}  // namespace ft::axes

namespace ft::fp8 {

Scales scales(const Variant& v) {
  return v.dtype == DType::e4m3 && v.has("scales") ? Scales(v.get("scales")) : Scales::none;
}
bool quantise_on_store(const Variant& v) {
  return scales(v) != Scales::none && v.role == StageRole::stage1 && v.has("inter_store") &&
         InterStore(v.get("inter_store")) == InterStore::fp8;
}
bool static_inter(const Variant& v) { return scales(v) == Scales::static_tensor; }
bool inter_row_scales(const Variant& v) {
  return scales(v) != Scales::none && v.role == StageRole::stage2 && v.has("inter_scales") &&
         InterScales(v.get("inter_scales")) == InterScales::row;
}
bool promote_may_vary(const Variant& v) {
  const Scales s = scales(v);
  return (v.role == StageRole::stage1 || inter_row_scales(v)) && (tensor_scales(s) || s == Scales::per_token);
}
int promote_every(const Variant& v) {
  if (scales(v) == Scales::none) return 0;
  return v.has("promote") ? v.get("promote") : 1;  // templates/ft/moe_scales.hpp promote_every_of
}
bool promotes(const Variant& v) { return promote_every(v) > 0; }
int staged_bytes(const Variant& v) {
  const int tile = v.get("tile_m") * v.get("tile_n");
  return quantise_on_store(v) ? tile * 4 + tile / 2 : 0;
}

std::optional<std::string> shape_rules(const Variant& v) {
  if (v.dtype != DType::e4m3) return std::nullopt;
  const Scales s = scales(v);
  if (s == Scales::none) return std::string("an fp8 variant needs its scales (per-tensor, per-token, block128 or static)");
  const int tn = v.get("tile_n");
  if (s == Scales::block128 && kScaleGroup % tn != 0)
    return fmt::format("block128 scales: tile_n {} must divide 128 (a tile's columns share one 128-row weight block)", tn);
  if (inter_row_scales(v) && s == Scales::block128)
    return std::string("row intermediate scales: block128's W2 block scales change along k (per-tensor and per-token only)");
  // Stage 1 writes the static scale into every slot, so a family's group-scale stage 2 reads it too,
  // but one that can read row scales does: constant along k, it need not promote every k-tile.
  if (static_inter(v) && v.role == StageRole::stage2 && v.has("inter_scales") && !inter_row_scales(v))
    return std::string("a static intermediate scale is one scale for every row: stage 2 reads it as row scales (inter_scales=row)");
  if (inter_row_scales(v) && promote_every(v) == 1)
    return std::string("row intermediate scales promoting every k-tile: the group scales' kernel, slower (promote 0 or n > 1)");
  if (quantise_on_store(v) && tn % kScaleGroup != 0)
    return fmt::format("quantise-on-store writes whole 128-column scale groups; tile_n {} is not a multiple of 128", tn);
  if (const int every = promote_every(v); every < 0)
    return fmt::format("promote {} is not a count of k-tiles (0: never, n: every n k-tiles)", every);
  else if (every != 1 && !promote_may_vary(v))
    return fmt::format("promote {}: the {} scales of {} change along k, so it promotes every k-tile", every, to_string(s),
                       to_string(v.role));
  if (promotes(v) && kScaleGroup % v.get("tile_k") != 0)
    return fmt::format("k-tiles of {} do not divide the 128-deep scale groups the kernel promotes", v.get("tile_k"));
  return std::nullopt;
}

}  // namespace ft::fp8
