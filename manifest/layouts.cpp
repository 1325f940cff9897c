#include "manifest/layouts.hpp"

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "layer/program.hpp"

namespace ft::manifest {
namespace {

using nlohmann::json;

#define FT_FIELD(name, type, meaning) ArgField{#name, offsetof(MoeArgs, name), sizeof(MoeArgs::name), type, meaning}
const ArgField kMoeArgsFields[] = {
    FT_FIELD(x, "const u16*", "[T, hidden] activations"),
    FT_FIELD(topk_ids, "const i32*", "[T, topk] expert of each (token, slot)"),
    FT_FIELD(topk_weights, "const f32*", "[T, topk] routed weight of each (token, slot)"),
    FT_FIELD(w1, "const u16*", "[experts, 2*inter, hidden] gate rows then up rows, in stage 1's weight layout"),
    FT_FIELD(w2, "const u16*", "[experts, hidden, inter], in stage 2's weight layout"),
    FT_FIELD(inter, "u16*", "[T*topk, inter] stage-1 output (workspace)"),
    FT_FIELD(y_acc, "f32*", "atomic: [T, hidden]; partials: [T*topk, hidden] (workspace)"),
    FT_FIELD(y, "u16*", "[T, hidden] output"),
    FT_FIELD(sorted_ids, "i32*", "[max_padded_rows] (workspace)"),
    FT_FIELD(block_experts, "i32*", "[max_padded_rows / align_block] (workspace)"),
    FT_FIELD(padded_rows, "i32*", "[1] (workspace)"),
    FT_FIELD(tokens, "i32", "T"),
    FT_FIELD(hidden, "i32", "hidden"),
    FT_FIELD(inter_size, "i32", "inter"),
    FT_FIELD(experts, "i32", "experts"),
    FT_FIELD(topk, "i32", "topk"),
    FT_FIELD(align_block, "i32", "align_block of the bucket"),
    FT_FIELD(max_padded_rows, "i32", "max_padded_rows for T and align_block"),
    FT_FIELD(flags, "i32", "0 (bit 0 is read by the reference kernels only)"),
    FT_FIELD(bad_ids, "i32*", "[1] or null: align writes the count of topk_ids outside [-1, experts)"),
    // fp8 layers (appended; null / 0 in 16-bit layers): templates/ft/moe_args.hpp, ft::Scales
    FT_FIELD(x_scale, "const f32*", "fp8 per-tensor and static: [1] the static activation scale"),
    FT_FIELD(w1_scales, "const f32*", "fp8: W1 scales, per-tensor and static [experts], per-token [experts, 2*inter], block128 [experts, 2*inter/128, hidden/128]"),
    FT_FIELD(w2_scales, "const f32*", "fp8: W2 scales, per-tensor and static [experts], per-token [experts, hidden], block128 [experts, hidden/128, inter/128]"),
    FT_FIELD(xq, "u8*", "fp8: [T, hidden] e4m3 activations (workspace)"),
    FT_FIELD(x_scales, "f32*", "fp8: activation scales, per-tensor and static [1], per-token [T], block128 [T, hidden/128] (workspace)"),
    FT_FIELD(inter_q, "u8*", "fp8: [T*topk, inter] e4m3 intermediate (workspace)"),
    FT_FIELD(inter_scales, "f32*", "fp8: [T*topk, inter/128] its group scales (workspace)"),
    FT_FIELD(scales, "i32", "fp8: 1 per-tensor, 2 per-token, 3 block128, 4 static; 0 in 16-bit layers"),
    FT_FIELD(reserved, "i32", "0"),
    FT_FIELD(inter_scale, "const f32*", "fp8 static: [1] the static intermediate scale; null in the other modes"),
    FT_FIELD(tile_tickets, "i32*", "[2] stage 1's and stage 2's tile tickets where a stage schedules its tiles dynamically (workspace, zeroed by the clear_tile_tickets step); null otherwise"),
};
#undef FT_FIELD
#define FT_FIELD(name, type, meaning) ArgField{#name, offsetof(ShuffleArgs, name), sizeof(ShuffleArgs::name), type, meaning}
const ArgField kShuffleArgsFields[] = {
    FT_FIELD(src, "const u16*", ""),
    FT_FIELD(dst, "u16*", ""),
    FT_FIELD(rows, "i32", ""),
    FT_FIELD(cols, "i32", ""),
    FT_FIELD(layout, "i32", "the layout dst receives: 1 shuffled, 2 tiled (0 is read as shuffled)"),
    FT_FIELD(reserved, "i32", "0"),
};
#undef FT_FIELD

json fields_json(std::span<const ArgField> fields) {
  json out = json::array();
  for (const ArgField& f : fields) {
    json field{{"name", f.name}, {"offset", f.offset}, {"size", f.size}, {"type", f.type}};
    if (*f.meaning) field["meaning"] = f.meaning;
    out.push_back(std::move(field));
  }
  return out;
}

}  // namespace

json moe_args_layout() {
  return {{"struct", "ft::MoeArgs"}, {"size", sizeof(MoeArgs)}, {"alignment", alignof(MoeArgs)},
          {"passed_as", fmt::format("the kernel's single by-value parameter; a stage step with a \"weight_map\" takes "
                                    "ft::MappedMoeArgs instead: the {} bytes of that tensor map (cuTensorMapEncodeTiled, "
                                    "{}-byte aligned), then these fields at offset {}, {} bytes in all",
                                    sizeof(TensorMap), alignof(TensorMap), offsetof(MappedMoeArgs, moe), sizeof(MappedMoeArgs))},
          {"fields", fields_json(kMoeArgsFields)}};
}

json shuffle_layout() {
  return {{"args", {{"struct", "ft::ShuffleArgs"}, {"size", sizeof(ShuffleArgs)}, {"fields", fields_json(kShuffleArgsFields)}}},
          {"grid_formula", fmt::format("[ceil(rows*cols/8 / {0}), 1, 1]", kReduceThreads)},
          {"block", {kReduceThreads, 1, 1}}};
}

json weight_layouts() {
  const json w1{{"rows", "experts * 2 * inter"}, {"cols", "hidden"}}, w2{{"rows", "experts * hidden"}, {"cols", "inter"}};
  return {{"plain", {{"offset", weight_offset(WeightLayout::plain)}, {"meaning", "row-major [rows, cols]"}}},
          {"shuffled",
           {{"offset", weight_offset(WeightLayout::shuffled)},
            {"meaning", "16-row x 8-column blocks stored contiguously, row-block-major (templates/ft/weight_layout.hpp)"},
            {"requires", "rows a multiple of 16, cols a multiple of 8"},
            {"w1", w1},
            {"w2", w2}}},
          {"tiled",
           {{"offset", weight_offset(WeightLayout::tiled)},
            {"meaning",
             "64-column slices of all rows, slice after slice; in a slice each row's 16-byte chunks sit in the 128-byte "
             "swizzle (chunk c at c ^ (row % 8)) (templates/ft/weight_layout.hpp); read by the sm_90a wgmma kernels "
             "with a producer warpgroup (names ending _tiled_ws)"},
            {"requires", "rows a multiple of 16, cols a multiple of 64"},
            {"w1", w1},
            {"w2", w2}}},
          {"mapped",
           {{"offset", weight_offset(WeightLayout::mapped)},
            {"meaning",
             "the plain weights, read through a tensor map the host encodes on every launch (the stage step's "
             "weight_map; the kernel takes ft::MappedMoeArgs, args.passed_as); read by the sm_90a wgmma kernels with a "
             "producer warpgroup named _map_ws; no arranged copy"},
            {"w1", w1},
            {"w2", w2}}}};
}

// What an fp8 problem's caller passes besides codes: the scale mode, the
// weights' format, and each scale tensor's shape (the layer program's
// scale_shape, which sizes the buffers) and meaning.
json fp8_problem_json(const Problem& p, const Target& t) {
  auto tensor = [&](Buf b, const char* meaning) {
    const ScaleShape s = scale_shape(p, b);
    return json{{"dtype", "f32"}, {"shape", std::vector<long long>(s.dims.begin(), s.dims.begin() + s.rank)},
                {"layout", "row-major"}, {"meaning", meaning}};
  };
  json scales = json::object();
  switch (p.scales) {
    case Scales::static_tensor:
      scales["inter_scale"] = tensor(Buf::inter_scale, "the static intermediate scale: stage 1 stores h as code = sat(h / inter_scale)");
      [[fallthrough]];
    case Scales::per_tensor:
      scales["x_scale"] = tensor(Buf::x_scale, "the static activation scale: x is quantised as code = sat(x / x_scale)");
      scales["w1_scales"] = tensor(Buf::w1_scales, "one scale per expert: W1 = code * w1_scales[e]");
      scales["w2_scales"] = tensor(Buf::w2_scales, "one scale per expert: W2 = code * w2_scales[e]");
      break;
    case Scales::per_token:
      scales["w1_scales"] = tensor(Buf::w1_scales, "per output channel: W1[e, n, :] = code * w1_scales[e, n] (gate rows, then up rows)");
      scales["w2_scales"] = tensor(Buf::w2_scales, "per output channel: W2[e, n, :] = code * w2_scales[e, n]");
      break;
    case Scales::block128:
      scales["w1_scales"] = tensor(Buf::w1_scales, "per 128 x 128 block: W1[e, n, k] = code * w1_scales[e, n / 128, k / 128]");
      scales["w2_scales"] = tensor(Buf::w2_scales, "per 128 x 128 block: W2[e, n, k] = code * w2_scales[e, n / 128, k / 128]");
      break;
    case Scales::none: break;
  }
  const char* activations = tensor_scales(p.scales)         ? "quantised on the device with x_scale"
                            : p.scales == Scales::per_token ? "quantised on the device, one dynamic scale per token (amax / max)"
                                                            : "quantised on the device, one dynamic scale per 1 x 128 group of a token (amax / max)";
  const bool fnuz = t.fp8 == Fp8Flavour::fnuz;
  json fp8{{"weights_format", fnuz ? "e4m3fnuz (max 240, 0x80 the one NaN, no -0)" : "e4m3 OCP float8_e4m3fn (max 448)"},
          {"weights", "w1 [experts, 2*inter, hidden] and w2 [experts, hidden, inter] as one code byte per element"},
          {"activations", std::string("x and y are bf16; x is ") + activations},
          {"intermediate", p.scales == Scales::static_tensor
                               ? "stage 1 stores e4m3 codes of the static inter_scale (workspace inter_q) and that scale in "
                                 "each of a row's 1 x 128 slots (workspace inter_scales), which stage 2 reads"
                               : "stage 2 reads e4m3 codes with one fp32 scale per 1 x 128 group (workspace inter_q, inter_scales); "
                                 "a stage 2 named _rowscale reads one scale per row, held in each of the row's group slots"},
          {"scale_tensors", std::move(scales)},
          {"fnuz_checkpoints", fnuz ? "the same bits as OCP mean half the value: convert OCP weights by zeroing the 0x80 "
                                      "pattern and doubling the scales (ft_fp8_ocp_to_fnuz in flytune_runtime.h)"
                                    : "OCP codes as stored by torch.float8_e4m3fn"}};
  return {{"scales", std::string(to_string(p.scales))}, {"fp8", std::move(fp8)}};
}

std::span<const ArgField> moe_args_fields() { return kMoeArgsFields; }

std::string weight_offset(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::plain:
    case WeightLayout::mapped: return "row * cols + k";  // mapped: plain, read through a tensor map
    case WeightLayout::shuffled: return "(((row >> 4) * (cols >> 3) + (k >> 3)) * 16 + (row & 15)) * 8 + (k & 7)";
    case WeightLayout::tiled: return "((k >> 6) * rows + row) * 64 + ((((k >> 3) & 7) ^ (row & 7)) << 3) + (k & 7)";
  }
  return "";
}

}  // namespace ft::manifest
