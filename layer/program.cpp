#include "layer/program.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "layer/program_parts.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {

using namespace program_parts;

long long max_padded_rows(const Problem& p, int tokens, int align_block) {
  const long long pairs = (long long)tokens * p.topk;
  const long long rows = pairs + std::min<long long>(p.experts, pairs) * (align_block - 1);
  return (rows + align_block - 1) / align_block * align_block;
}

long long sorted_ids_capacity(const Problem& p, int tokens) {
  return max_padded_rows(p, tokens, kMaxAlignBlock) + align_table_words(tokens * p.topk, p.experts);
}

long long y_acc_capacity(const Problem& p, int tokens) {
  // The larger head: the _y modes' counters, or the one-launch layer's at its smallest tile_m (16).
  const long long head = std::max(direct_y_words(tokens, p.hidden),
                                  onelaunch_head_words(tokens, p.hidden, max_padded_rows(p, tokens, 16) / 16));
  return ((long long)tokens * p.topk * p.hidden + head) * 4;
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

namespace {
constexpr std::array<BufferInfo, kBufCount> kBuffers{{
#define FT_BUFFER(name, member, pointee, place, meaning, size) {#name, #member, #pointee, BufPlace::place, meaning},
#include "layer/buffers.def"
#undef FT_BUFFER
}};
}  // namespace

const BufferInfo& buffer_info(Buf b) { return kBuffers[std::size_t(b)]; }
std::string_view to_string(Buf b) { return buffer_info(b).name; }

Buf weight_buffer(int which, WeightLayout layout) {
  switch (layout) {
    case WeightLayout::shuffled: return which == 1 ? Buf::w1_shuffled : Buf::w2_shuffled;
    case WeightLayout::tiled: return which == 1 ? Buf::w1_tiled : Buf::w2_tiled;
    case WeightLayout::plain:
    case WeightLayout::mapped: break;  // the plain weights, through a tensor map
  }
  return which == 1 ? Buf::w1 : Buf::w2;
}

std::optional<TensorMapSpec> weight_map_of(const Variant& v, const Problem& p, int which) {
  if (v.contract().weights != WeightLayout::mapped) return std::nullopt;
  const std::uint32_t elem = p.fp8() ? 1 : 2;
  const long long rows = which == 1 ? 2LL * p.inter * p.experts : (long long)p.hidden * p.experts;
  const long long cols = which == 1 ? p.hidden : p.inter;
  TensorMapSpec m;
  m.row_stride_bytes = std::uint64_t(cols) * elem;
  m.cols = std::uint32_t(cols), m.rows = std::uint32_t(rows);
  m.box_cols = 128 / elem;  // one k-tile: a 128-byte swizzle row
  m.box_rows = std::uint32_t(v.get("tile_n"));
  m.elem_bytes = elem;
  m.swizzle = 128;
  return m;
}

bool is_workspace(Buf b) { return buffer_info(b).place == BufPlace::workspace; }

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
    case Scales::static_tensor:
      if (b == Buf::inter_scale) return {1, {1, 0, 0}};
      [[fallthrough]];
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
    case Role::dgrad2: return "dgrad2";
    case Role::dgrad1: return "dgrad1";
    case Role::wgrad2: return "wgrad2";
    case Role::wgrad1: return "wgrad1";
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

namespace program_parts {

std::unexpected<Error> bad(const std::string& what) { return fail(Errc::invalid_input, "layer program: " + what); }

}  // namespace program_parts

namespace {

// Roles, dtypes, targets, the routed weight's placement, and each stage's
// own legality for the problem (the space's rules: one home).
Status validate(const LayerRecipe& r) {
  const Problem& p = r.problem;
  if (!r.target) return bad("no target");
  if (r.stages.empty()) return bad("no stage variant");
  if (!r.grad.empty()) return bad("a forward recipe holds no backward stages (LayerRecipe::grad; op::moe_backward builds those)");
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const Variant& v = r.stages[i];
    if (!v.target || !v.family || !v.atom()) return bad(fmt::format("stage variant {} has no target, family or atom", v.target && v.family ? v.name() : "?"));
    if (v.target != r.target) return bad(fmt::format("{} is for {}, the layer for {}", v.name(), v.target->name, r.target->name));
    if (v.dtype != p.dtype) return bad(fmt::format("{} is {}, the problem {}", v.name(), to_string(v.dtype), to_string(p.dtype)));
    if (i > 0 && r.stages[i - 1].role >= v.role)
      return bad(fmt::format("{} ({}) after {} ({}): the stages are out of the operation's order", v.name(), to_string(v.role),
                             r.stages[i - 1].name(), to_string(r.stages[i - 1].role)));
  }
  const Variant* s1 = r.stage(StageRole::stage1);
  const Variant* s2 = r.stage(StageRole::stage2);
  if (s1 && s2 && s1->contract().weight_in_stage1 != s2->contract().weight_in_stage1)
    return bad("stage 1 and stage 2 disagree on where the routed weight is applied");
  if (s1 && s2 && fp8::quantise_on_store(*s1) && fp8::inter_row_scales(*s2))
    return bad(fmt::format("{} reads row intermediate scales, {} writes 1 x 128 group scales (quantise-on-store)",
                           s2->name(), s1->name()));
  if (s1 && s2 && (s1->contract().whole_layer || s2->contract().whole_layer) &&
      (s1->family != s2->family || s1->values != s2->values))
    return bad(fmt::format("{} and {}: a one-launch stage pairs only with its twin (the same family and values)", s1->name(),
                           s2->name()));
  for (const Variant& v : r.stages)
    if (auto why = v.family->problem_rules(v, p)) return bad(fmt::format("{}: {}", v.name(), *why));
  return {};
}

// Whether the recipe is the one-launch family's (validate: then all its stages are).
bool whole_layer(const LayerRecipe& r) { return r.stages.front().contract().whole_layer; }

}  // namespace

namespace program_parts {

Result<LayerProgram> start_program(const Problem& p, int tokens, int align_block) {
  if (tokens < 1 || tokens > kMaxTokens) return bad(fmt::format("token count {} outside 1..{}", tokens, kMaxTokens));
  LayerProgram prog;
  prog.tokens = tokens;
  prog.align_block = align_block;
  prog.max_padded_rows = max_padded_rows(p, tokens, align_block);
  const long long words = std::max<long long>(prog.max_padded_rows, (long long)tokens * p.topk);
  if (words > std::numeric_limits<int>::max())  // pairs and rows are 32-bit kernel arguments
    return bad(fmt::format("T={} with {} experts, top-{}: sizes overflow the kernels' 32-bit arguments", tokens, p.experts, p.topk));
  return prog;
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

}  // namespace program_parts

namespace {

// What a buffer's size rule (layer/buffers.def) reads: the problem's sizes,
// the program's rows, which stages it holds and how they read and write.
struct BufferSizing {
  const Problem& p;
  std::uint64_t T, E, H, I, k, wes;  // wes: the weights' element bytes (1: fp8 codes)
  std::uint64_t rows, blocks, table;  // sorted_ids' rows, its row blocks, the wide align's count table (words)
  bool s1, s2, fp8;                   // fp8: an fp8 layer with a stage
  std::uint64_t head;                 // the one-launch layer's head of y_acc (words); 0: another form
  bool quantise_inter;                // stage 1 leaves a bf16 intermediate for a quantise_inter step
  bool bwd;                           // the backward's program (layer/backward.hpp): plain weights, its own rows
  bool tickets;                       // a stage takes its tiles from tickets (StageContract::tile_tickets)
  WeightLayout l1, l2;                // the layout each stage reads (where s1 / s2: plain values, not optionals,
                                      // which g++ 12 reads as maybe-uninitialized once inlined)
  Reduce out;
  // The backward reads the plain weights; a stage the copy its layout names
  // (weight_buffer: a mapped stage the plain one, through a tensor map).
  bool reads(bool stage, WeightLayout read, WeightLayout l) const {
    return bwd ? l == WeightLayout::plain : stage && weight_buffer(1, read) == weight_buffer(1, l);
  }
  std::uint64_t w1_bytes(WeightLayout l) const { return reads(s1, l1, l) ? E * 2 * I * H * wes : 0; }
  std::uint64_t w2_bytes(WeightLayout l) const { return reads(s2, l2, l) ? E * H * I * wes : 0; }
  std::uint64_t scale_bytes(Buf b) const { return std::uint64_t(scale_shape(p, b).count()) * 4; }
  // atomic: fp32 sums per token; partials: a row per (token, slot), fp32 or 16-bit;
  // the _y modes: the arrival counters first (templates/ft/moe_args.hpp, direct_y_words).
  // The one-launch layer: its head, then (with stage 2) the per-slot rows.
  std::uint64_t y_acc_bytes() const {
    if (head) return (head + (s2 ? T * k * H : 0)) * 4;
    const Reduce sums = sums_of(out);
    return (sums == Reduce::atomic ? T : T * k) * H * (sums == Reduce::partials16 ? 2 : 4) +
           (writes_y(out) ? std::uint64_t(direct_y_words((long long)T, (long long)H)) * 4 : 0);
  }
  std::uint64_t activation_scale_bytes() const { return std::uint64_t(activation_scale_count(p.scales, (long long)T, (long long)H)) * 4; }
};

// Whether a stage of the recipe schedules its tiles by tickets.
bool takes_tickets(const LayerRecipe& r) {
  return std::any_of(r.stages.begin(), r.stages.end(), [](const Variant& v) { return v.contract().tile_tickets; });
}

// The words of y_acc's head of a one-launch program (templates/ft/moe_args.hpp).
std::uint64_t one_launch_head(const LayerProgram& prog, const Problem& p) {
  return std::uint64_t(onelaunch_head_words(prog.tokens, p.hidden, prog.max_padded_rows / prog.align_block));
}

}  // namespace

namespace program_parts {

// Buffer sizes: every row's size rule on this program.
void size_buffers(LayerProgram& prog, const LayerRecipe& r) {
  const Problem& p = r.problem;
  const Variant* s1 = r.stage(StageRole::stage1);
  const Variant* s2 = r.stage(StageRole::stage2);
  const std::uint64_t T = std::uint64_t(prog.tokens), k = std::uint64_t(p.topk);
  // The wide align keeps its count table after the rows (templates/ft/moe_args.hpp).
  const bool wide = prog.find("align_count") != nullptr;
  const BufferSizing z{p,
                       T,
                       std::uint64_t(p.experts),
                       std::uint64_t(p.hidden),
                       std::uint64_t(p.inter),
                       k,
                       std::uint64_t(p.element_bytes()),
                       std::uint64_t(prog.max_padded_rows),
                       std::uint64_t(prog.max_padded_rows / prog.align_block),
                       wide ? std::uint64_t(align_table_words(int(T * k), p.experts)) : 0,
                       s1 != nullptr,
                       s2 != nullptr,
                       p.fp8() && (s1 || s2),
                       !r.stages.empty() && whole_layer(r) ? one_launch_head(prog, p) : 0,
                       s1 && needs_quantise_inter(*s1),
                       !r.grad.empty(),
                       takes_tickets(r),
                       s1 ? s1->contract().weights : WeightLayout::plain,
                       s2 ? s2->contract().weights : WeightLayout::plain,
                       s2 ? s2->contract().output : Reduce::atomic};
  auto& b = prog.bytes;
#define FT_BUFFER(name, member, pointee, place, meaning, size) b[std::size_t(Buf::name)] = (size);
#include "layer/buffers.def"
#undef FT_BUFFER
}

}  // namespace program_parts

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
  return stage1.dtype == DType::e4m3 && !fp8::quantise_on_store(stage1) && !fp8::static_inter(stage1);
}

const Variant* LayerRecipe::stage(StageRole role) const {
  for (const Variant& v : stages)
    if (v.role == role) return &v;
  return nullptr;
}

Variant* LayerRecipe::stage(StageRole role) {
  for (Variant& v : stages)
    if (v.role == role) return &v;
  return nullptr;
}

std::vector<Variant> stage_list(const std::optional<Variant>& stage1, const std::optional<Variant>& stage2) {
  std::vector<Variant> out;
  if (stage1) out.push_back(*stage1);
  if (stage2) out.push_back(*stage2);
  return out;
}

bool launches(const LayerProgram& p, const Variant& stage) { return launches(p, stage.name()); }

bool launches(const LayerProgram& p, std::string_view symbol) {
  return std::any_of(p.steps.begin(), p.steps.end(), [&](const Step& s) { return s.op == Step::Op::launch && s.symbol == symbol; });
}

Result<int> align_block_of(const LayerRecipe& r) {
  int block = 1;
  std::string tiles;
  for (const Variant& v : r.stages) {
    block = std::lcm(block, v.contract().rows_per_tile);
    tiles += fmt::format("{}{}", tiles.empty() ? "" : " and ", v.contract().rows_per_tile);
  }
  if (block > kMaxAlignBlock)
    return fail(Errc::invalid_input,
                fmt::format("layer program: stage tiles of {} rows need expert blocks of {} rows (their least common "
                            "multiple), more than {}",
                            tiles, block, kMaxAlignBlock));
  return block;
}

Status pair_fits(const Target& t, const Problem& p, const Variant& stage1, const Variant& stage2) {
  const LayerRecipe r{&t, p, {stage1, stage2}};
  FT_CHECK(validate(r));
  if (auto block = align_block_of(r); !block) return std::unexpected(block.error());
  return {};
}

namespace {

// The one-launch family's program: clear y_acc's head (the ticket and the
// arrival counters), then one launch -- the layer in the moe2 unit
// (kFlagOneLaunchLayer, step "stage2"), or a stage alone in its own unit.
// Refused where the launch's LDS (the route tables grow with T) exceeds the target's.
Status build_one_launch(LayerProgram& prog, const LayerRecipe& r, MoeArgs args) {
  const Variant* s1 = r.stage(StageRole::stage1);
  const Variant* s2 = r.stage(StageRole::stage2);
  const Variant& v = s2 ? *s2 : *s1;
  Step clear;
  clear.op = Step::Op::memset_u32;
  clear.name = "clear_y_acc";
  clear.buffer = Buf::y_acc;
  clear.count = one_launch_head(prog, r.problem);
  prog.steps.push_back(std::move(clear));
  if (s1 && s2) args.flags |= kFlagOneLaunchLayer;
  const LaunchShape shape = stage_launch(v, r.problem, prog.tokens, prog.align_block);
  if (shape.lds_bytes > r.target->lds_bytes)
    return bad(fmt::format("{} at T={}: LDS use {} bytes (its GEMMs and route tables) exceeds {}", v.name(), prog.tokens,
                           shape.lds_bytes, r.target->lds_bytes));
  Step s = launch_step(s2 ? "stage2" : "stage1", s2 ? Role::stage2 : Role::stage1, v.name(), shape, args);
  s.w1 = weight_buffer(1, v.contract().weights);
  s.w2 = weight_buffer(2, v.contract().weights);
  s.weight_map = weight_map_of(v, r.problem, s2 ? 2 : 1);
  prog.steps.push_back(std::move(s));
  size_buffers(prog, r);
  return {};
}

}  // namespace

Result<LayerProgram> build_program(const LayerRecipe& r, int tokens) {
  FT_CHECK(validate(r));
  const Problem& p = r.problem;
  LayerProgram prog = FT_TRY(start_program(p, tokens, FT_TRY(align_block_of(r))));
  const MoeArgs args = base_args(p, tokens, prog.align_block, prog.max_padded_rows);
  if (whole_layer(r)) {
    FT_CHECK(build_one_launch(prog, r, args));
    return prog;
  }
  const Target& t = *r.target;

  const Variant* s1 = r.stage(StageRole::stage1);
  const Variant* s2 = r.stage(StageRole::stage2);
  const AlignForm form = r.wide_align ? align_form(p, tokens) : AlignForm::one_block;
  const Reduce out = s2 ? s2->contract().output : Reduce::atomic;
  const std::uint64_t clear_words = s2 ? y_acc_clear_words(out, p, tokens) : 0;
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
  if (p.fp8() && s1)
    prog.steps.push_back(launch_step("quantise_x", Role::quantise_x, quantise_x_entry(t), quantise_launch(tokens), args));
  // Stages scheduled by tickets start from zero on every run of the layer.
  if (takes_tickets(r)) {
    Step clear;
    clear.op = Step::Op::memset_u32;
    clear.name = "clear_tile_tickets";
    clear.buffer = Buf::tile_tickets;
    clear.count = 2;
    prog.steps.push_back(std::move(clear));
  }
  MoeArgs align_args = args;
  if (align_clears) align_args.flags |= kFlagAlignClearsCounters | (sums_of(out) == Reduce::atomic ? kFlagAlignClearsSums : 0);
  push_align(prog, t, p, align_args, form);
  if (s1) {
    Step s = launch_step("stage1", Role::stage1, s1->name(), stage_launch(*s1, p, tokens, prog.align_block), args);
    s.w1 = weight_buffer(1, s1->contract().weights);
    s.weight_map = weight_map_of(*s1, p, 1);
    prog.steps.push_back(std::move(s));
    if (needs_quantise_inter(*s1)) {
      MoeArgs q = args;  // row scales where stage 2 reads them (a stage-1 program alone: groups)
      if (s2 && fp8::inter_row_scales(*s2)) q.flags |= kFlagInterRowScales;
      prog.steps.push_back(launch_step("quantise_inter", Role::quantise_inter, quantise_inter_entry(t),
                                       quantise_launch((long long)tokens * p.topk), q));
    }
  }
  if (s2) {
    Step s = launch_step("stage2", Role::stage2, s2->name(), stage_launch(*s2, p, tokens, prog.align_block), args);
    s.w2 = weight_buffer(2, s2->contract().weights);
    s.weight_map = weight_map_of(*s2, p, 2);
    prog.steps.push_back(std::move(s));
    if (!writes_y(out))  // the _y modes: stage 2 wrote Y
      prog.steps.push_back(launch_step("reduce", reduce_role(out), reduce_entry(t, out, p.dtype), reduce_launch(p, tokens), args));
  }
  size_buffers(prog, r);
  return prog;
}

Result<LayerProgram> build_align_program(const Target& t, const Problem& p, int tokens, int align_block, AlignForm form) {
  if (align_block < 1 || align_block > kMaxAlignBlock)
    return bad(fmt::format("row block {} outside 1..{}", align_block, kMaxAlignBlock));
  LayerProgram prog = FT_TRY(start_program(p, tokens, align_block));
  push_align(prog, t, p, base_args(p, tokens, align_block, prog.max_padded_rows), form);
  size_buffers(prog, LayerRecipe{&t, p, {}});
  return prog;
}

}  // namespace ft
