#include "generator/variant.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ft {

int Variant::threads() const { return (warps_m * warps_n + (warp_specialized ? 4 : 0)) * atom->lanes; }

int Variant::lds_bytes() const {
  // Mirrors ft::WgmmaGemm::kSmemBytes: 128-byte rows (tile_k 64) of A and all
  // weight tiles per stage, plus 1024 bytes to align the ring for the swizzle.
  // Warp-specialised blocks add a full and an empty mbarrier (8 bytes each) per stage.
  if (atom->warpgroup())
    return stages * (tile_m + weight_matrices() * tile_n) * tile_k * 2 + 1024 + (warp_specialized ? 16 * stages : 0);
  // Mirrors ft::TiledGemm::kSmemBytes: rows of A then of each weight matrix,
  // each tile_k wide plus one 16-byte pad, per LDS stage.
  const int rows = tile_m + weight_matrices() * tile_n;
  return stages * rows * (tile_k + 8) * 2;
}

int Variant::register_estimate() const {
  if (atom->warpgroup()) {
    const int groups = warps_m * warps_n / 4;
    const int acc = tile_m / groups / atom->m * weight_matrices() * tile_n / 2;
    // A producer warpgroup copies only A 16 bytes at a time (bulk copies move the weights).
    const int chunks = warp_specialized ? tile_m * 8 / 128 : (tile_m + weight_matrices() * tile_n) * 8 / threads();
    // Accumulators, a 64-bit source pointer per copy, addressing; a producer
    // warpgroup holds the pointers but no accumulators, yet all threads get
    // the kernel's register count.
    return warp_specialized ? std::max(acc, chunks * 2) + 24 : acc + chunks * 2 + 24;
  }
  const int rm = tile_m / warps_m / atom->m, rn = tile_n / warps_n / atom->n;
  const int acc = weight_matrices() * rm * rn * atom->c_regs();
  const int frags = (rm * atom->a_regs() + rn * atom->b_regs()) / 2;  // two 16-bit values per register
  const int chunks = ((tile_m + weight_matrices() * tile_n) * tile_k / 8 + threads() - 1) / threads();
  const int staged = stages == 2 ? chunks * 4 : 0;
  const int addressing = chunks * 3 + 24;  // row pointers, strides, indices
  return acc + frags + staged + addressing;
}

std::string Variant::name() const {
  std::string s = fmt::format("ft_{}_{}_{}_m{}n{}k{}_w{}x{}_{}_s{}", target->name, to_string(kind), to_string(dtype), tile_m,
                              tile_n, tile_k, warps_m, warps_n, atom->short_name(), stages);
  if (kind == KernelKind::moe1) {
    if (weight_in_stage1) s += "_rw";
  } else {
    s += reduce == Reduction::atomic ? "_atomic" : "_partials";
    if (split_k > 1) s += fmt::format("_sk{}", split_k);
    if (weight_in_stage1) s += "_norw";
  }
  if (layout == WeightLayoutKind::shuffled) s += "_shuf";
  if (layout == WeightLayoutKind::tiled) s += "_tiled";
  if (warp_specialized) s += "_ws";
  if (tiles_per_block > 1) s += fmt::format("_t{}", tiles_per_block);
  return s;
}

nlohmann::json Variant::to_json() const {
  return nlohmann::json{{"target", target->name},
                        {"kind", to_string(kind)},
                        {"dtype", to_string(dtype)},
                        {"atom", atom->id},
                        {"tile_m", tile_m},
                        {"tile_n", tile_n},
                        {"tile_k", tile_k},
                        {"warps_m", warps_m},
                        {"warps_n", warps_n},
                        {"stages", stages},
                        {"warp_specialized", warp_specialized},
                        {"tiles_per_block", tiles_per_block},
                        {"split_k", split_k},
                        {"weight_in_stage1", weight_in_stage1},
                        {"reduce", to_string(reduce)},
                        {"layout", to_string(layout)}};
}

Result<Variant> Variant::from_json(const nlohmann::json& j) {
  auto bad = [](std::string what) { return fail(Errc::invalid_input, "variant parameters: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  Variant v;
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string{};
  };
  auto num = [&](const char* key, int& out) -> bool {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return false;
    out = it->get<int>();
    return true;
  };
  v.target = find_target(str("target"));
  if (!v.target) return bad("unknown target '" + str("target") + "'");
  std::string kind = str("kind");
  if (kind == "moe1") v.kind = KernelKind::moe1;
  else if (kind == "moe2") v.kind = KernelKind::moe2;
  else return bad("unknown kind '" + kind + "'");
  auto dt = parse_dtype(str("dtype"));
  if (!dt) return std::unexpected(dt.error());
  v.dtype = *dt;
  v.atom = find_atom(str("atom"));
  if (!v.atom) return bad("unknown atom '" + str("atom") + "'");
  if (!num("tile_m", v.tile_m) || !num("tile_n", v.tile_n) || !num("tile_k", v.tile_k) || !num("warps_m", v.warps_m) ||
      !num("warps_n", v.warps_n) || !num("stages", v.stages) || !num("split_k", v.split_k))
    return bad("missing or non-integer tile, warp, stage or split_k field");
  auto w = j.find("weight_in_stage1");
  if (w == j.end() || !w->is_boolean()) return bad("missing weight_in_stage1");
  v.weight_in_stage1 = w->get<bool>();
  // Absent in records written before the field existed: not specialised.
  if (auto ws = j.find("warp_specialized"); ws != j.end()) {
    if (!ws->is_boolean()) return bad("warp_specialized is not a boolean");
    v.warp_specialized = ws->get<bool>();
  }
  // Absent in records written before the field existed: one tile per block.
  if (j.contains("tiles_per_block") && (!num("tiles_per_block", v.tiles_per_block) || v.tiles_per_block < 1))
    return bad("tiles_per_block is not a positive integer");
  std::string reduce = str("reduce"), layout = str("layout");
  if (reduce == "atomic") v.reduce = Reduction::atomic;
  else if (reduce == "partials") v.reduce = Reduction::partials;
  else return bad("unknown reduce '" + reduce + "'");
  if (layout == "plain") v.layout = WeightLayoutKind::plain;
  else if (layout == "shuffled") v.layout = WeightLayoutKind::shuffled;
  else if (layout == "tiled") v.layout = WeightLayoutKind::tiled;
  else return bad("unknown layout '" + layout + "'");
  return v;
}

std::string_view to_string(KernelKind k) { return k == KernelKind::moe1 ? "moe1" : "moe2"; }
std::string_view to_string(Reduction r) { return r == Reduction::atomic ? "atomic" : "partials"; }
std::string_view to_string(WeightLayoutKind l) {
  switch (l) {
    case WeightLayoutKind::plain: return "plain";
    case WeightLayoutKind::shuffled: return "shuffled";
    case WeightLayoutKind::tiled: return "tiled";
  }
  return "?";
}

}  // namespace ft
