#include "layer/program.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {

long long max_padded_rows(const Problem& p, int tokens, int align_block) {
  const long long pairs = (long long)tokens * p.topk;
  const long long rows = pairs + std::min<long long>(p.experts, pairs) * (align_block - 1);
  return (rows + align_block - 1) / align_block * align_block;
}

long long sorted_ids_capacity(const Problem& p, int tokens) {
  return max_padded_rows(p, tokens, kMaxAlignBlock) + align_table_words(tokens * p.topk, p.experts);
}

long long y_acc_capacity(const Problem& p, int tokens) {
  return ((long long)tokens * p.topk * p.hidden + direct_y_words(tokens, p.hidden)) * 4;
}

LaunchShape align_launch(const Problem& p) { return {1, 1, 1, kAlignThreads, align_lds_bytes(p.experts)}; }

LaunchShape stage_launch(const Variant& v, const Problem& p, int tokens, int align_block) {
  return v.family->launch(v, p, max_padded_rows(p, tokens, align_block));
}

LaunchShape reduce_launch(const Problem& p, int tokens) {
  const long long chunks = (long long)tokens * p.hidden / 8;
  return {int((chunks + kReduceThreads - 1) / kReduceThreads), 1, 1, kReduceThreads, 0};
}

LaunchShape quantise_launch(long long rows) { return {int(rows), 1, 1, kQuantiseThreads, quantise_lds_bytes()}; }

LaunchShape shuffle_launch(long long rows, long long cols) {
  const long long chunks = rows * cols / 8;
  return {int((chunks + kReduceThreads - 1) / kReduceThreads), 1, 1, kReduceThreads, 0};
}

Result<ArrangeLaunch> arrange_launch(std::uint64_t src, std::uint64_t dst, long long rows, long long cols, int element_bytes,
                                     WeightLayout layout) {
  const std::string what(to_string(layout));
  if (layout != WeightLayout::shuffled && layout != WeightLayout::tiled)
    return fail(Errc::usage, "arrange weights: the layout must be shuffled (1) or tiled (2); plain weights need no arranging");
  if (element_bytes != 1 && element_bytes != 2)
    return fail(Errc::usage, fmt::format("{} weights: elements of {} bytes; 2 (bf16, f16) or 1 (fp8 codes)", what, element_bytes));
  const int pack = 2 / element_bytes;  // elements per 16-bit value the kernel moves
  const long long col_unit = (layout == WeightLayout::tiled ? 64 : 8) * pack;
  if (rows < 16 || cols < col_unit || rows % 16 || cols % col_unit || rows > std::numeric_limits<int>::max() ||
      cols > std::numeric_limits<int>::max())
    return fail(Errc::usage, fmt::format("{} weights: rows must be a multiple of 16 and cols of {} (got {} x {})", what, col_unit,
                                         rows, cols));
  const long long cols16 = cols / pack;
  return ArrangeLaunch{ShuffleArgs{device_pointer<const u16>(src), device_pointer<u16>(dst), int(rows), int(cols16), int(layout), 0},
                       shuffle_launch(rows, cols16)};
}

LaunchShape reference_launch(StageRole stage, const Problem& p, int tokens) {
  // Pairs or tokens along x (up to 2^31 - 1 blocks), column chunks along y.
  if (stage == StageRole::stage1)
    return {tokens * p.topk, (p.inter + kReferenceThreads - 1) / kReferenceThreads, 1, kReferenceThreads, 0};
  return {tokens, (p.hidden + kReferenceThreads - 1) / kReferenceThreads, 1, kReferenceThreads, 0};
}

LaunchShape reference_quantise_launch(const Problem& p, int tokens) {
  const int groups = p.inter / kScaleGroup;
  return {tokens * p.topk, (groups + kReferenceThreads - 1) / kReferenceThreads, 1, kReferenceThreads, 0};
}

LaunchShape fill_launch(std::uint64_t count) {
  return {int((count + 8 * kFillThreads - 1) / (8 * kFillThreads)), 1, 1, kFillThreads, 0};
}

std::string_view to_string(Buf b) {
  static constexpr std::array<std::string_view, kBufCount> names{
      "x",          "topk_ids",    "topk_weights", "w1",         "w2",     "w1_shuffled",
      "w2_shuffled", "w1_tiled",   "w2_tiled",     "inter",      "y_acc",  "y",
      "sorted_ids", "block_experts", "padded_rows", "bad_ids",
      "x_scale",    "w1_scales",   "w2_scales",    "xq",         "x_scales", "inter_q", "inter_scales"};
  return names[std::size_t(b)];
}

Buf weight_buffer(int which, WeightLayout layout) {
  switch (layout) {
    case WeightLayout::shuffled: return which == 1 ? Buf::w1_shuffled : Buf::w2_shuffled;
    case WeightLayout::tiled: return which == 1 ? Buf::w1_tiled : Buf::w2_tiled;
    case WeightLayout::plain: break;
  }
  return which == 1 ? Buf::w1 : Buf::w2;
}

bool is_workspace(Buf b) {
  switch (b) {
    case Buf::inter:
    case Buf::y_acc:
    case Buf::sorted_ids:
    case Buf::block_experts:
    case Buf::padded_rows:
    case Buf::xq:
    case Buf::x_scales:
    case Buf::inter_q:
    case Buf::inter_scales: return true;
    default: return false;
  }
}

long long ScaleShape::count() const {
  if (rank == 0) return 0;
  long long n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[std::size_t(i)];
  return n;
}

ScaleShape scale_shape(const Problem& p, Buf b) {
  const long long E = p.experts, H = p.hidden, I = p.inter, G = kScaleGroup;
  if (!p.fp8()) return {};
  const bool w1 = b == Buf::w1_scales, w2 = b == Buf::w2_scales;
  switch (p.scales) {
    case Scales::per_tensor:
      if (b == Buf::x_scale) return {1, {1, 0, 0}};
      if (w1 || w2) return {1, {E, 0, 0}};
      return {};
    case Scales::per_token:
      if (w1) return {2, {E, 2 * I, 0}};
      if (w2) return {2, {E, H, 0}};
      return {};
    case Scales::block128:
      if (w1) return {3, {E, 2 * I / G, H / G}};
      if (w2) return {3, {E, H / G, I / G}};
      return {};
    case Scales::none: break;
  }
  return {};
}

WorkspacePlacement workspace_placement(const LayerProgram& p) {
  WorkspacePlacement w;
  for (std::size_t i = 0; i < kBufCount; ++i) {
    if (!is_workspace(Buf(i)) || !p.bytes[i]) continue;
    w.offset[i] = w.total;
    w.total += (p.bytes[i] + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  }
  return w;
}

std::string_view to_string(Role r) {
  switch (r) {
    case Role::align: return "align";
    case Role::align_count: return "align_count";
    case Role::align_scatter: return "align_scatter";
    case Role::stage1: return "stage1";
    case Role::stage2: return "stage2";
    case Role::reduce_atomic: return "reduce_atomic";
    case Role::reduce_partials: return "reduce_partials";
    case Role::reduce_partials16: return "reduce_partials16";
    case Role::quantise_x: return "quantise_x";
    case Role::quantise_inter: return "quantise_inter";
  }
  return "?";
}

AlignForm align_form(const Problem& p, int tokens) {
  return (long long)tokens * p.topk > kWideAlignPairs ? AlignForm::wide : AlignForm::one_block;
}

Role reduce_role(Reduce r) {
  switch (r) {
    case Reduce::atomic: return Role::reduce_atomic;
    case Reduce::partials: return Role::reduce_partials;
    case Reduce::partials16: return Role::reduce_partials16;
    case Reduce::atomic_y:
    case Reduce::partials_y: break;  // stage 2 writes Y: the program has no reduce step
  }
  return Role::reduce_atomic;
}

const Step* LayerProgram::find(std::string_view step_name) const {
  const std::size_t i = index_of(step_name);
  return i < steps.size() ? &steps[i] : nullptr;
}

std::size_t LayerProgram::index_of(std::string_view step_name) const {
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].name == step_name) return i;
  return steps.size();
}

namespace {

std::unexpected<Error> bad(const std::string& what) { return fail(Errc::invalid_input, "layer program: " + what); }

// Roles, dtypes, targets, the routed weight's placement, and each stage's
// own legality for the problem (the space's rules: one home).
Status validate(const LayerRecipe& r) {
  const Problem& p = r.problem;
  if (!r.target) return bad("no target");
  if (!r.stage1 && !r.stage2) return bad("no stage variant");
  for (const std::optional<Variant>* s : {&r.stage1, &r.stage2}) {
    if (!*s) continue;
    const Variant& v = **s;
    if (!v.target || !v.family || !v.atom()) return bad(fmt::format("stage variant {} has no target, family or atom", v.target && v.family ? v.name() : "?"));
    if (v.target != r.target) return bad(fmt::format("{} is for {}, the layer for {}", v.name(), v.target->name, r.target->name));
    if (v.dtype != p.dtype) return bad(fmt::format("{} is {}, the problem {}", v.name(), to_string(v.dtype), to_string(p.dtype)));
  }
  if (r.stage1 && r.stage1->role != StageRole::stage1) return bad(r.stage1->name() + " is not a stage-1 kernel");
  if (r.stage2 && r.stage2->role != StageRole::stage2) return bad(r.stage2->name() + " is not a stage-2 kernel");
  if (r.stage1 && r.stage2 && r.stage1->contract().weight_in_stage1 != r.stage2->contract().weight_in_stage1)
    return bad("stage 1 and stage 2 disagree on where the routed weight is applied");
  if (r.stage1 && r.stage2 && fp8::quantise_on_store(*r.stage1) && fp8::inter_row_scales(*r.stage2))
    return bad(fmt::format("{} reads row intermediate scales, {} writes 1 x 128 group scales (quantise-on-store)",
                           r.stage2->name(), r.stage1->name()));
  for (const std::optional<Variant>* s : {&r.stage1, &r.stage2})
    if (*s)
      if (auto why = (*s)->family->problem_rules(**s, p)) return bad(fmt::format("{}: {}", (*s)->name(), *why));
  return {};
}

MoeArgs base_args(const Problem& p, int tokens, int align_block, long long rows) {
  MoeArgs a{};
  a.tokens = tokens;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.align_block = align_block;
  a.max_padded_rows = int(rows);
  a.flags = 0;  // the routed weight's placement is compiled into the stage kernels
  a.scales = int(p.scales);  // fp8: read by the quantise steps (the stages compile theirs in)
  return a;
}

Step launch_step(std::string name, Role role, std::string symbol, const LaunchShape& shape, const MoeArgs& args) {
  Step s;
  s.op = Step::Op::launch;
  s.name = std::move(name);
  s.role = role;
  s.symbol = std::move(symbol);
  s.shape = shape;
  s.args = args;
  return s;
}

// The align step(s): one block, or the wide align's count and scatter launches.
void push_align(LayerProgram& prog, const Target& t, const Problem& p, const MoeArgs& args, AlignForm form) {
  if (form == AlignForm::one_block) {
    prog.steps.push_back(launch_step("align", Role::align, align_entry(t), align_launch(p), args));
    return;
  }
  const int blocks = align_blocks(args.tokens * args.topk);
  prog.steps.push_back(launch_step("align_count", Role::align_count, align_count_entry(t),
                                   {blocks, 1, 1, kAlignThreads, align_count_lds_bytes(p.experts)}, args));
  prog.steps.push_back(launch_step("align_scatter", Role::align_scatter, align_scatter_entry(t),
                                   {blocks, 1, 1, kAlignThreads, align_scatter_lds_bytes(p.experts)}, args));
}

// fp8 layers: the caller's scales and the quantise steps' workspace.
void size_fp8_buffers(LayerProgram& prog, const LayerRecipe& r) {
  const Problem& p = r.problem;
  const std::uint64_t T = std::uint64_t(prog.tokens), H = p.hidden, I = p.inter, k = p.topk;
  auto& b = prog.bytes;
  if (r.stage1) {
    b[std::size_t(Buf::x_scale)] = std::uint64_t(scale_shape(p, Buf::x_scale).count()) * 4;
    b[std::size_t(Buf::w1_scales)] = std::uint64_t(scale_shape(p, Buf::w1_scales).count()) * 4;
    b[std::size_t(Buf::xq)] = T * H;
    b[std::size_t(Buf::x_scales)] = std::uint64_t(activation_scale_count(p.scales, T, H)) * 4;
    if (!needs_quantise_inter(*r.stage1)) b[std::size_t(Buf::inter)] = 0;
  } else {
    b[std::size_t(Buf::x)] = 0;
    b[std::size_t(Buf::inter)] = 0;
  }
  if (r.stage2) b[std::size_t(Buf::w2_scales)] = std::uint64_t(scale_shape(p, Buf::w2_scales).count()) * 4;
  b[std::size_t(Buf::inter_q)] = T * k * I;
  b[std::size_t(Buf::inter_scales)] = T * k * (I / kScaleGroup) * 4;
}

// Buffer sizes: inputs, the weight copies the stages read, the workspace.
void size_buffers(LayerProgram& prog, const LayerRecipe& r) {
  const Problem& p = r.problem;
  // Activations, the intermediate, partials and Y are 16-bit (bf16 in fp8 layers), weights the problem's type.
  const std::uint64_t T = std::uint64_t(prog.tokens), E = p.experts, H = p.hidden, I = p.inter, k = p.topk, es = 2,
                      wes = std::uint64_t(p.element_bytes());
  auto& b = prog.bytes;
  b[std::size_t(Buf::x)] = T * H * es;
  b[std::size_t(Buf::topk_ids)] = T * k * 4;
  b[std::size_t(Buf::topk_weights)] = T * k * 4;
  b[std::size_t(Buf::inter)] = T * k * I * es;
  // The wide align keeps its count table after the rows (templates/ft/moe_args.hpp).
  const bool wide = prog.find("align_count") != nullptr;
  b[std::size_t(Buf::sorted_ids)] =
      std::uint64_t(prog.max_padded_rows + (wide ? align_table_words(int(T * k), int(E)) : 0)) * 4;
  b[std::size_t(Buf::block_experts)] = std::uint64_t(prog.max_padded_rows / prog.align_block) * 4;
  b[std::size_t(Buf::padded_rows)] = 4;
  b[std::size_t(Buf::bad_ids)] = 4;
  if (r.stage1) b[std::size_t(weight_buffer(1, r.stage1->contract().weights))] = E * 2 * I * H * wes;
  if (r.stage2) {
    b[std::size_t(weight_buffer(2, r.stage2->contract().weights))] = E * H * I * wes;
    // atomic: fp32 sums per token; partials: a row per (token, slot), fp32 or in the element type;
    // the _y modes: the arrival counters first (templates/ft/moe_args.hpp, direct_y_words).
    const Reduce out = r.stage2->contract().output, sums = sums_of(out);
    b[std::size_t(Buf::y_acc)] = (sums == Reduce::atomic ? T : T * k) * H * (sums == Reduce::partials16 ? es : 4) +
                                 (writes_y(out) ? std::uint64_t(direct_y_words((long long)T, (long long)H)) * 4 : 0);
    b[std::size_t(Buf::y)] = T * H * es;
  }
  if (p.fp8() && (r.stage1 || r.stage2)) size_fp8_buffers(prog, r);
}

}  // namespace

std::uint64_t y_acc_clear_words(Reduce out, const Problem& p, int tokens) {
  const std::uint64_t sums = std::uint64_t(tokens) * std::uint64_t(p.hidden);
  const std::uint64_t counters = writes_y(out) ? std::uint64_t(direct_y_words(tokens, p.hidden)) : 0;
  return counters + (sums_of(out) == Reduce::atomic ? sums : 0);
}

// With a stage 2 reading row scales (fp8::inter_row_scales) the quantise_inter
// step writes one scale per row in each of its slots (kFlagInterRowScales in
// that step's flags); a stage 1 that quantises on store writes group scales, so
// it does not pair with such a stage 2 (validate).
bool needs_quantise_inter(const Variant& stage1) {
  return stage1.dtype == DType::e4m3 && !fp8::quantise_on_store(stage1);
}

Result<int> align_block_of(const LayerRecipe& r) {
  int block = 1;
  for (const std::optional<Variant>* s : {&r.stage1, &r.stage2})
    if (*s) block = std::lcm(block, (*s)->contract().rows_per_tile);
  if (block > kMaxAlignBlock)
    return fail(Errc::invalid_input,
                fmt::format("layer program: stage tiles of {} and {} rows need expert blocks of {} rows (their least common "
                            "multiple), more than {}",
                            r.stage1 ? r.stage1->contract().rows_per_tile : 0, r.stage2 ? r.stage2->contract().rows_per_tile : 0,
                            block, kMaxAlignBlock));
  return block;
}

Status pair_fits(const Target& t, const Problem& p, const Variant& stage1, const Variant& stage2) {
  const LayerRecipe r{&t, p, stage1, stage2};
  FT_CHECK(validate(r));
  if (auto block = align_block_of(r); !block) return std::unexpected(block.error());
  return {};
}

Result<LayerProgram> build_program(const LayerRecipe& r, int tokens) {
  FT_CHECK(validate(r));
  if (tokens < 1 || tokens > kMaxTokens) return bad(fmt::format("token count {} outside 1..{}", tokens, kMaxTokens));
  const Problem& p = r.problem;
  LayerProgram prog;
  prog.tokens = tokens;
  prog.align_block = FT_TRY(align_block_of(r));
  prog.max_padded_rows = max_padded_rows(p, tokens, prog.align_block);
  const long long words = std::max<long long>(prog.max_padded_rows, (long long)tokens * p.topk);
  if (words > std::numeric_limits<int>::max())  // pairs and rows are 32-bit kernel arguments
    return bad(fmt::format("T={} with {} experts, top-{}: sizes overflow the kernels' 32-bit arguments", tokens, p.experts, p.topk));
  const MoeArgs args = base_args(p, tokens, prog.align_block, prog.max_padded_rows);
  const Target& t = *r.target;

  const AlignForm form = r.wide_align ? align_form(p, tokens) : AlignForm::one_block;
  const Reduce out = r.stage2 ? r.stage2->contract().output : Reduce::atomic;
  const std::uint64_t clear_words = r.stage2 ? y_acc_clear_words(out, p, tokens) : 0;
  // Small _y layers: the one-block align zeroes y_acc (no clear step to launch).
  const bool align_clears = clear_words && writes_y(out) && form == AlignForm::one_block && clear_words <= kAlignClearWords;
  if (clear_words && !align_clears) {
    Step clear;
    clear.op = Step::Op::memset_u32;
    clear.name = "clear_y_acc";
    clear.buffer = Buf::y_acc;
    clear.count = clear_words;
    prog.steps.push_back(std::move(clear));
  }
  if (p.fp8() && r.stage1)
    prog.steps.push_back(launch_step("quantise_x", Role::quantise_x, quantise_x_entry(t), quantise_launch(tokens), args));
  MoeArgs align_args = args;
  if (align_clears) align_args.flags |= kFlagAlignClearsCounters | (sums_of(out) == Reduce::atomic ? kFlagAlignClearsSums : 0);
  push_align(prog, t, p, align_args, form);
  if (r.stage1) {
    Step s = launch_step("stage1", Role::stage1, r.stage1->name(), stage_launch(*r.stage1, p, tokens, prog.align_block), args);
    s.w1 = weight_buffer(1, r.stage1->contract().weights);
    prog.steps.push_back(std::move(s));
    if (needs_quantise_inter(*r.stage1)) {
      MoeArgs q = args;  // row scales where stage 2 reads them (a stage-1 program alone: groups)
      if (r.stage2 && fp8::inter_row_scales(*r.stage2)) q.flags |= kFlagInterRowScales;
      prog.steps.push_back(launch_step("quantise_inter", Role::quantise_inter, quantise_inter_entry(t),
                                       quantise_launch((long long)tokens * p.topk), q));
    }
  }
  if (r.stage2) {
    Step s = launch_step("stage2", Role::stage2, r.stage2->name(), stage_launch(*r.stage2, p, tokens, prog.align_block), args);
    s.w2 = weight_buffer(2, r.stage2->contract().weights);
    prog.steps.push_back(std::move(s));
    if (const Reduce out = r.stage2->contract().output; !writes_y(out))  // the _y modes: stage 2 wrote Y
      prog.steps.push_back(launch_step("reduce", reduce_role(out), reduce_entry(t, out, p.dtype), reduce_launch(p, tokens), args));
  }
  size_buffers(prog, r);
  return prog;
}

Result<LayerProgram> build_align_program(const Target& t, const Problem& p, int tokens, int align_block, AlignForm form) {
  if (align_block < 1 || align_block > kMaxAlignBlock)
    return bad(fmt::format("row block {} outside 1..{}", align_block, kMaxAlignBlock));
  if (tokens < 1 || tokens > kMaxTokens) return bad(fmt::format("token count {} outside 1..{}", tokens, kMaxTokens));
  LayerProgram prog;
  prog.tokens = tokens;
  prog.align_block = align_block;
  prog.max_padded_rows = max_padded_rows(p, tokens, align_block);
  push_align(prog, t, p, base_args(p, tokens, align_block, prog.max_padded_rows), form);
  size_buffers(prog, LayerRecipe{&t, p, std::nullopt, std::nullopt});
  return prog;
}

nlohmann::json steps_json(const LayerProgram& p) {
  nlohmann::json out = nlohmann::json::array();
  for (const Step& s : p.steps) {
    if (s.op == Step::Op::memset_u32) {
      out.push_back({{"step", s.name}, {"op", "memset_u32"}, {"buffer", to_string(s.buffer)}, {"value", s.value}, {"count", s.count}});
      continue;
    }
    const MoeArgs& a = s.args;
    out.push_back({{"step", s.name},
                   {"op", "launch"},
                   {"role", to_string(s.role)},
                   {"symbol", s.symbol},
                   {"grid", {s.shape.grid_x, s.shape.grid_y, s.shape.grid_z}},
                   {"block", {s.shape.block, 1, 1}},
                   {"dynamic_shared", s.shape.lds_bytes},
                   {"args",
                    {{"tokens", a.tokens},
                     {"hidden", a.hidden},
                     {"inter_size", a.inter_size},
                     {"experts", a.experts},
                     {"topk", a.topk},
                     {"align_block", a.align_block},
                     {"max_padded_rows", a.max_padded_rows},
                     {"flags", a.flags},
                     {"w1", to_string(s.w1)},
                     {"w2", to_string(s.w2)}}}});
    if (a.scales) out.back()["args"]["scales"] = a.scales;  // fp8 layers only: 16-bit steps read as before
  }
  return out;
}

nlohmann::json buffers_json(const LayerProgram& p) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (p.bytes[i]) out[std::string(to_string(Buf(i)))] = p.bytes[i];
  return out;
}

}  // namespace ft
