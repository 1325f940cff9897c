#include "measure/layer_bench.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "layer/operation.hpp"
#include "measure/workload/half.hpp"
#include "layer/inter_scales.hpp"

namespace ft {
namespace {

constexpr std::uint32_t kNaN16x2 = 0xffffffffu;  // two 16-bit NaNs (bf16 and f16 alike)
constexpr std::uint32_t kNaN32 = 0xffffffffu;    // an fp32 NaN

Dim3 grid_of(const LaunchShape& s) { return Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}; }

}  // namespace

LayerBench::LayerBench(Device& dev, const Problem& p, const Target& t) : ProgramBench(op::moe_forward(), dev, p, t) {}

Result<std::unique_ptr<LayerBench>> LayerBench::create(Device& dev, const Problem& p, const Target& target,
                                                       std::span<const std::byte> support, int max_tokens) {
  std::unique_ptr<LayerBench> b(new LayerBench(dev, p, target));
  b->max_tokens_ = max_tokens;
  ModuleHandle m = FT_TRY(b->load_support(support));
  // This flytune's unit holds every kernel of its dtype (layer/support_kernels.def).
  auto entry = [&](Support s) { return dev.function(m, support_entry(s, target, p.dtype)); };
  b->shuffle_ = FT_TRY(entry(Support::shuffle));
  b->reference1_ = FT_TRY(entry(Support::reference1));
  b->reference2_ = FT_TRY(entry(Support::reference2));
  if (!b->fill_.p) b->fill_ = FT_TRY(entry(Support::fill));  // refused without it

  const std::size_t T = std::size_t(max_tokens), E = p.experts, H = p.hidden, I = p.inter, k = p.topk, es = 2,
                    wes = std::size_t(p.element_bytes());  // weights: 1 byte for fp8 codes
  // The largest row block gives the most padding: size for the largest block
  // any program asks for (build_program refuses larger ones).
  const std::size_t rows = std::size_t(sorted_ids_capacity(p, max_tokens));
  const std::pair<Buf, std::size_t> sizes[] = {
      {Buf::x, T * H * es},          {Buf::topk_ids, T * k * 4},       {Buf::topk_weights, T * k * 4},
      {Buf::w1, E * 2 * I * H * wes}, {Buf::w2, E * H * I * wes},        {Buf::inter, T * k * I * es},
      {Buf::y_acc, std::size_t(y_acc_capacity(p, max_tokens))},  // partials need k rows per token
      {Buf::y, T * H * es},          {Buf::sorted_ids, rows * 4},      {Buf::block_experts, rows * 4},
      {Buf::padded_rows, 16},        {Buf::bad_ids, 16},               {Buf::tile_tickets, 16}};
  for (const auto& [buf, bytes] : sizes) {
    b->buffers_[std::size_t(buf)] = FT_TRY(DeviceBuffer::allocate(dev, bytes));
    at(b->table_, buf) = b->buffers_[std::size_t(buf)].ptr();
  }
  for (int f = 0; f < 2; ++f) b->inter_ref_[f] = FT_TRY(DeviceBuffer::allocate(dev, T * k * I * es));
  for (DeviceBuffer& y : b->y_ref_) y = FT_TRY(DeviceBuffer::allocate(dev, T * H * es));
  if (p.fp8()) FT_CHECK(b->create_fp8(m, T));
  b->flush_ = FT_TRY(L2Flush::create(dev));
  return b;
}

LayerBench::~LayerBench() = default;

Result<LayerProgram> LayerBench::program(const LayerRecipe& r) const {
  FT_CHECK(check_recipe(r));
  return build_program(r, tokens_);
}

LoadedProgram LayerBench::stage_alone(const Variant& v, FunctionHandle f) const {
  LoadedProgram p{LayerRecipe{&target_, problem_, {v}}, {}};
  if (const op::Stage* s = operation_.stage(v.role)) p.kernels.of(s->launch) = f;
  return p;
}

Result<std::pair<const Variant*, const Variant*>> LayerBench::layer_stages(const LayerRecipe& r) {
  const Variant *s1 = r.stage(StageRole::stage1), *s2 = r.stage(StageRole::stage2);
  if (!s1 || !s2 || r.stages.size() != 2)
    return fail(Errc::invalid_input, "a moe_forward layer is one stage1 and one stage2 variant");
  return std::pair{s1, s2};
}

Status LayerBench::run_support(FunctionHandle f, const LaunchShape& s, const void* a, std::size_t n, StreamHandle st) {
  if (s.grid_x <= 0 || s.grid_y <= 0 || s.grid_z <= 0) return {};  // nothing to do
  return dev_.launch(f, grid_of(s), Dim3{unsigned(s.block), 1, 1}, s.lds_bytes, st, a, n);
}

Status LayerBench::set_inputs(int tokens, std::uint64_t seed, int empty_experts) {
  WorkloadOptions wo;
  wo.seed = seed;
  wo.empty_experts = empty_experts;
  const Routed routed = FT_TRY(make_routing(problem_, tokens, wo));
  return set_inputs(tokens, wo.seed, routed.ids, routed.weights);
}

Status LayerBench::set_inputs(int tokens, std::uint64_t seed, std::span<const std::int32_t> ids,
                              std::span<const float> weights) {
  if (tokens < 1 || tokens > max_tokens_)
    return fail(Errc::invalid_input, fmt::format("token count {} outside 1..{}", tokens, max_tokens_));
  const std::size_t pairs = std::size_t(tokens) * problem_.topk;
  if (ids.size() != pairs || weights.size() != pairs)
    return fail(Errc::invalid_input, fmt::format("routing has {} ids and {} weights, expected {}", ids.size(), weights.size(), pairs));
  tokens_ = tokens;
  const std::size_t H = problem_.hidden, I = problem_.inter, E = problem_.experts;
  const int elem = problem_.dtype == DType::bf16 ? 0 : 1;
  auto fill = [&](Buf b, std::size_t count, std::uint64_t s, float scale) -> Status {
    FillArgs a{device_pointer<u16>(at(table_, b)), count, s, scale, elem};
    return run_support(fill_, fill_launch(count), &a, sizeof a);
  };
  // Scales keep every stage's outputs O(1): weights ~ N(0, 1/K).
  const bool fresh_weights = seed != seed_ || !reference_ready_[0];
  if (problem_.fp8()) {
    FT_CHECK(fill_fp8(std::size_t(tokens), seed, fresh_weights));
    if (fresh_weights) arranged_ready_ = {};
  } else {
    FT_CHECK(fill(Buf::x, std::size_t(tokens) * H, seed * 3 + 1, 1.0f));
    // A finite intermediate for timing stage 2 on its own.
    FT_CHECK(fill(Buf::inter, std::size_t(tokens) * problem_.topk * I, seed * 3 + 4, 1.0f));
  }
  if (!problem_.fp8() && fresh_weights) {
    FT_CHECK(fill(Buf::w1, E * 2 * I * H, seed * 3 + 2, float(1.0 / std::sqrt(double(H)))));
    FT_CHECK(fill(Buf::w2, E * H * I, seed * 3 + 3, float(1.0 / std::sqrt(double(I)))));
    arranged_ready_ = {};
  }
  seed_ = seed;
  FT_CHECK(dev_.copy_to_device(at(table_, Buf::topk_ids), ids.data(), pairs * 4));
  FT_CHECK(dev_.copy_to_device(at(table_, Buf::topk_weights), weights.data(), pairs * 4));
  reference_ready_ = {};
  if (problem_.fp8()) FT_CHECK(calibrate_fp8());
  return dev_.synchronize();
}

Status LayerBench::run_align(int align_block, StreamHandle s) {
  const LayerProgram p = FT_TRY(build_align_program(target_, problem_, tokens_, align_block));
  const auto fns = FT_TRY(bind(p, with_support({})));
  return execute(dev_, p, fns, table_, s);
}

Status LayerBench::ensure_arranged(WeightLayout layout) {
  const int l = int(layout);
  if (weight_buffer(1, layout) == Buf::w1 || arranged_ready_[l]) return {};  // plain, or mapped: no arranged copy
  const std::size_t H = problem_.hidden, I = problem_.inter, E = problem_.experts;
  const Buf b1 = weight_buffer(1, layout), b2 = weight_buffer(2, layout);
  for (Buf b : {b1, b2}) {
    if (!buffers_[std::size_t(b)]) {
      buffers_[std::size_t(b)] = FT_TRY(DeviceBuffer::allocate(dev_, buffers_[std::size_t(b == b1 ? Buf::w1 : Buf::w2)].bytes()));
      at(table_, b) = buffers_[std::size_t(b)].ptr();
    }
  }
  const int eb = problem_.element_bytes();
  for (auto [src, dst, rows, cols] : {std::tuple{Buf::w1, b1, E * 2 * I, H}, std::tuple{Buf::w2, b2, E * H, I}}) {
    const ArrangeLaunch a = FT_TRY(arrange_launch(at(table_, src), at(table_, dst), (long long)rows, (long long)cols, eb, layout));
    FT_CHECK(run_support(shuffle_, a.shape, &a.args, sizeof a.args));
  }
  FT_CHECK(dev_.synchronize());
  arranged_ready_[l] = true;
  return {};
}

Status LayerBench::ensure_reference(bool w1, bool row_scales) {
  const int f = w1 ? 1 : 0, slot = ref_slot(w1, row_scales && problem_.fp8());
  if (reference_ready_[slot]) return {};
  MoeArgs a = input_args();
  a.inter = device_pointer<u16>(inter_ref_[f].ptr());
  a.y = device_pointer<u16>(y_ref_[slot].ptr());
  a.flags = (w1 ? kFlagWeightInStage1 : 0) | (slot >= 2 ? kFlagInterRowScales : 0);
  FT_CHECK(dev_.memset_u32(inter_ref_[f].ptr(), kNaN16x2, inter_ref_[f].bytes() / 4));
  FT_CHECK(dev_.memset_u32(y_ref_[slot].ptr(), kNaN16x2, y_ref_[slot].bytes() / 4));
  if (problem_.fp8()) {
    FT_CHECK(reference_fp8(a, slot));
    reference_ready_[slot] = true;
    return {};
  }
  FT_CHECK(run_support(reference1_, reference_launch(StageRole::stage1, problem_, tokens_), &a, sizeof a));
  FT_CHECK(run_support(reference2_, reference_launch(StageRole::stage2, problem_, tokens_), &a, sizeof a));
  FT_CHECK(dev_.synchronize());
  reference_ready_[slot] = true;
  return {};
}

MoeArgs LayerBench::input_args() const {
  MoeArgs a{};
  a.x = device_pointer<const u16>(at(table_, Buf::x));
  a.topk_ids = device_pointer<const i32>(at(table_, Buf::topk_ids));
  a.topk_weights = device_pointer<const float>(at(table_, Buf::topk_weights));
  a.w1 = device_pointer<const u16>(at(table_, Buf::w1));
  a.w2 = device_pointer<const u16>(at(table_, Buf::w2));
  a.tokens = tokens_;
  a.hidden = problem_.hidden;
  a.inter_size = problem_.inter;
  a.experts = problem_.experts;
  a.topk = problem_.topk;
  return a;
}

Status LayerBench::run_checked(const LayerProgram& p, std::span<const FunctionHandle> fns, const BufferTable& table) {
  FT_CHECK(dev_.memset_u32(at(table, Buf::bad_ids), 0xffffffffu, 1));
  // Spent tickets: a dynamic stage finds no tile unless the program clears them.
  if (p.bytes[std::size_t(Buf::tile_tickets)]) FT_CHECK(dev_.memset_u32(at(table, Buf::tile_tickets), 0x40000000u, 2));
  FT_CHECK(execute(dev_, p, fns, table, {}));
  FT_CHECK(dev_.synchronize());
  std::int32_t bad = -1;
  FT_CHECK(dev_.copy_to_host(&bad, at(table, Buf::bad_ids), 4));
  if (bad != 0)
    return fail(Errc::verify, fmt::format("the align kernel counted {} routing ids outside [-1, {})", bad, problem_.experts));
  return {};
}

Status LayerBench::flush_l2(StreamHandle s) { return flush_(dev_, s); }

Result<std::vector<std::uint16_t>> LayerBench::download(DevicePtr p, std::size_t count) {
  std::vector<std::uint16_t> out(count);
  FT_CHECK(dev_.copy_to_host(out.data(), p, count * 2));
  return out;
}

Result<Comparison> LayerBench::compare_with(DevicePtr out, DevicePtr reference, std::size_t count,
                                            std::optional<Tolerance> tolerance) {
  auto got = FT_TRY(download(out, count));
  auto ref_bits = FT_TRY(download(reference, count));
  std::vector<float> ref(count);
  for (std::size_t i = 0; i < count; ++i) ref[i] = half_to_f32(problem_.dtype, ref_bits[i]);
  return compare_output(got, ref, problem_.dtype, tolerance ? *tolerance : tolerance_for(problem_.dtype));
}

Result<Comparison> LayerBench::verify_stage(const Variant& v, FunctionHandle f) {
  const bool rows = fp8::inter_row_scales(v);  // stage 2 on row scales reads the row-quantised reference
  FT_CHECK(ensure_reference(v.contract().weight_in_stage1, rows));
  FT_CHECK(ensure_arranged(v.contract().weights));
  const bool first = v.role == StageRole::stage1;
  const LoadedProgram alone = stage_alone(v, f);
  const LayerProgram prog = FT_TRY(program(alone.recipe));
  const auto fns = FT_TRY(bind(prog, with_support(alone.kernels)));
  const std::size_t pairs = std::size_t(tokens_) * problem_.topk;
  const int ref = v.contract().weight_in_stage1 ? 1 : 0;
  if (first) {
    const std::size_t n = pairs * problem_.inter;
    FT_CHECK(dev_.memset_u32(at(table_, Buf::inter), kNaN16x2, n / 2));
    if (problem_.fp8()) {  // what stage 2 reads: the e4m3 intermediate and its scales
      FT_CHECK(poison_fp8(table_));
      FT_CHECK(run_checked(prog, fns, table_));
      return compare_inter_fp8(table_, ref);
    }
    FT_CHECK(run_checked(prog, fns, table_));
    return compare_with(at(table_, Buf::inter), inter_ref_[ref].ptr(), n);
  }
  // Stage 2 reads the reference intermediate: it is checked alone.
  BufferTable table = table_;
  at(table, Buf::inter) = inter_ref_[ref].ptr();
  const int slot = ref_slot(ref == 1, rows);
  if (problem_.fp8()) {
    at(table, Buf::inter_q) = inter_ref_q_[slot].ptr();
    at(table, Buf::inter_scales) = inter_ref_scales_[slot].ptr();
  }
  const std::size_t n = std::size_t(tokens_) * problem_.hidden;
  FT_CHECK(dev_.memset_u32(at(table, Buf::y_acc), kNaN32, pairs * problem_.hidden));  // the program clears what it sums into
  FT_CHECK(dev_.memset_u32(at(table, Buf::y), kNaN16x2, n / 2));
  FT_CHECK(run_checked(prog, fns, table));
  return compare_with(at(table, Buf::y), y_ref_[slot].ptr(), n);
}

Result<Comparison> LayerBench::verify_layer(const LoadedProgram& p) {
  const auto [v1, v2] = FT_TRY(layer_stages(p.recipe));
  const LayerProgram prog = FT_TRY(program(p.recipe));
  const auto fns = FT_TRY(bind(prog, with_support(p.kernels)));
  const bool rows = fp8::inter_row_scales(*v2);
  FT_CHECK(ensure_reference(v1->contract().weight_in_stage1, rows));
  for (const Variant& v : p.recipe.stages) FT_CHECK(ensure_arranged(v.contract().weights));
  const std::size_t n = std::size_t(tokens_) * problem_.hidden, pairs = std::size_t(tokens_) * problem_.topk;
  FT_CHECK(dev_.memset_u32(at(table_, Buf::inter), kNaN16x2, pairs * problem_.inter / 2));
  FT_CHECK(dev_.memset_u32(at(table_, Buf::y), kNaN16x2, n / 2));
  FT_CHECK(dev_.memset_u32(at(table_, Buf::y_acc), kNaN32, pairs * problem_.hidden));
  if (problem_.fp8()) FT_CHECK(poison_fp8(table_));
  FT_CHECK(run_checked(prog, fns, table_));
  const int f = ref_slot(v1->contract().weight_in_stage1, rows);
  const Comparison c = FT_TRY(compare_with(at(table_, Buf::y), y_ref_[f].ptr(), n));
  if (!problem_.fp8()) return c;
  // fp8: also within the sanity bound of the bf16 layer on the same weights.
  return with_sanity(c, FT_TRY(compare_with(at(table_, Buf::y), y_bf16_layer_[f].ptr(), n, fp8_sanity_tolerance())),
                     std::size_t(problem_.hidden));
}

Result<Timing> LayerBench::time_stage(const Variant& v, FunctionHandle f, const TimingOptions& opt) {
  FT_CHECK(ensure_arranged(v.contract().weights));
  const bool first = v.role == StageRole::stage1;
  const LoadedProgram alone = stage_alone(v, f);
  const LayerProgram prog = FT_TRY(program(alone.recipe));
  const auto fns = FT_TRY(bind(prog, with_support(alone.kernels)));
  // The steps before the stage (align, clearing) once; then the stage alone,
  // with the memsets directly before it (a one-launch stage's clear of the
  // ticket and counters it consumes). Stage 2 reads inter_ (random values
  // from set_inputs, or an earlier stage-1 run: the work timed is the same
  // either way).
  const std::size_t stage = prog.index_of(first ? "stage1" : "stage2");
  std::size_t from = stage;
  while (from > 0 && prog.steps[from - 1].op == Step::Op::memset_u32) --from;
  FT_CHECK(execute(dev_, prog, fns, table_, {}, {.first = 0, .last = from}));
  // The program's resets before that (its memsets: y_acc's clear, the tile
  // tickets' clear) run again before every repetition, outside the timed
  // steps: a stage of dynamic tile walks takes its tiles by those tickets, and
  // each repetition after the first would otherwise find them spent and time
  // a stage that computes nothing.
  std::vector<std::size_t> resets;
  for (std::size_t i = 0; i < from; ++i)
    if (prog.steps[i].op == Step::Op::memset_u32) resets.push_back(i);
  std::vector<EventHandle> ev(stage + 2 - from);
  for (EventHandle& e : ev) e = FT_TRY(dev_.create_event());
  std::vector<double> us;
  Status st;
  for (int i = 0; i < opt.warmup + opt.reps && st; ++i) {
    for (std::size_t r : resets)  // before the flush: the stage starts on a flushed L2
      if (st) st = execute(dev_, prog, fns, table_, {}, {.first = r, .last = r + 1});
    if (st && opt.flush_l2) st = flush_l2();
    if (st) st = execute(dev_, prog, fns, table_, {}, {.first = from, .last = stage + 1, .marks = ev});
    if (st) st = dev_.synchronize();
    if (!st) break;
    auto sample = sample_us(dev_, ev.front(), ev.back());
    if (!sample) {
      st = std::unexpected(sample.error());
      break;
    }
    if (i >= opt.warmup) us.push_back(*sample);
  }
  for (EventHandle e : ev) (void)dev_.destroy_event(e);
  FT_CHECK(st);
  return summarize(std::move(us));
}

Result<ProgramTiming> LayerBench::time_layer(const LoadedProgram& p, const TimingOptions& opt) {
  FT_CHECK(layer_stages(p.recipe));
  const LayerProgram prog = FT_TRY(program(p.recipe));
  const auto fns = FT_TRY(bind(prog, with_support(p.kernels)));
  for (const Variant& v : p.recipe.stages) FT_CHECK(ensure_arranged(v.contract().weights));
  StreamHandle stream = FT_TRY(dev_.create_stream());
  Status st;
  GraphHandle graph{};
  if (opt.graph) {
    st = dev_.begin_capture(stream);
    if (st) st = execute(dev_, prog, fns, table_, stream);
    if (st) {
      auto g = dev_.end_capture(stream);
      if (g) graph = *g;
      else st = std::unexpected(g.error());
    }
  }
  // Direct launches: an event between every step (the parts); a graph replay: its two ends only.
  auto replay = [&](std::span<const EventHandle> ev) -> Status {
    if (!opt.graph) return execute(dev_, prog, fns, table_, stream, {.marks = ev});
    FT_CHECK(dev_.record(ev.front(), stream));
    FT_CHECK(dev_.launch_graph(graph, stream));
    return dev_.record(ev.back(), stream);
  };
  Result<MarkedTiming> t = st ? time_marked_runs(dev_, opt, &flush_, opt.graph ? 2 : prog.steps.size() + 1, replay, stream)
                              : Result<MarkedTiming>(std::unexpected(st.error()));
  if (graph.p) (void)dev_.destroy_graph(graph);
  (void)dev_.destroy_stream(stream);
  if (!t) return std::unexpected(t.error());
  // Per-step samples by step name.
  std::map<std::string, std::vector<double>> per_step;
  if (!opt.graph)
    for (std::size_t s = 0; s < prog.steps.size(); ++s) {
      std::vector<double>& into = per_step[prog.steps[s].name];
      into.insert(into.end(), t->intervals[s].begin(), t->intervals[s].end());
    }
  ProgramTiming out;
  out.total = t->total;
  // The y_acc clear counts with the align step(s) (all prepare the stages).
  std::vector<double> align;
  for (const char* name : {"align", "align_count", "align_scatter", "clear_y_acc"}) {
    const auto it = per_step.find(name);
    if (it == per_step.end()) continue;
    if (align.empty()) align.assign(it->second.size(), 0.0);
    for (std::size_t i = 0; i < align.size() && i < it->second.size(); ++i) align[i] += it->second[i];
  }
  out.parts.emplace_back("align", summarize(align));
  for (const char* name : {"stage1", "stage2", "reduce"}) out.parts.emplace_back(name, summarize(per_step[name]));
  return out;
}

Result<ProgramCheck> LayerBench::verify(const LoadedProgram& p) {
  if (p.recipe.stages.size() != 1) return program_check(FT_TRY(verify_layer(p)), problem_.hidden);
  const Variant& v = p.recipe.stages.front();
  const op::Stage* s = operation_.stage(v.role);
  const Comparison c = FT_TRY(verify_stage(v, s ? p.kernels.of(s->launch) : FunctionHandle{}));
  return program_check(c, v.role == StageRole::stage1 ? problem_.inter : problem_.hidden);
}

Result<ProgramTiming> LayerBench::time(const LoadedProgram& p, const TimingOptions& opt) {
  if (p.recipe.stages.size() != 1) return time_layer(p, opt);
  const Variant& v = p.recipe.stages.front();
  const op::Stage* s = operation_.stage(v.role);
  return ProgramTiming{FT_TRY(time_stage(v, s ? p.kernels.of(s->launch) : FunctionHandle{}, opt)), {}};
}

Result<LayerBench::AlignOutput> LayerBench::run_align_only(int align_block) {
  AlignOutput out;
  FT_CHECK(dev_.memset_u32(at(table_, Buf::padded_rows), 0xffffffffu, 1));
  FT_CHECK(run_align(align_block));
  FT_CHECK(dev_.synchronize());
  FT_CHECK(dev_.copy_to_host(&out.padded_rows, at(table_, Buf::padded_rows), 4));
  const long long cap = max_padded_rows(problem_, tokens_, align_block);
  if (out.padded_rows < 0 || out.padded_rows > cap || out.padded_rows % align_block != 0)
    return fail(Errc::verify, fmt::format("align wrote padded_rows {} (capacity {}, block {})", out.padded_rows, cap, align_block));
  out.sorted_ids.resize(std::size_t(out.padded_rows));
  out.block_experts.resize(std::size_t(out.padded_rows / align_block));
  if (out.padded_rows > 0) {
    FT_CHECK(dev_.copy_to_host(out.sorted_ids.data(), at(table_, Buf::sorted_ids), out.sorted_ids.size() * 4));
    FT_CHECK(dev_.copy_to_host(out.block_experts.data(), at(table_, Buf::block_experts), out.block_experts.size() * 4));
  }
  return out;
}

Result<std::vector<std::uint16_t>> LayerBench::reference_output(bool w1) {
  FT_CHECK(ensure_reference(w1));
  return download(y_ref_[w1 ? 1 : 0].ptr(), std::size_t(tokens_) * problem_.hidden);
}

Status LayerBench::download_inputs(Workload& w) {
  w.x = FT_TRY(download(at(table_, Buf::x), std::size_t(tokens_) * problem_.hidden));
  if (problem_.fp8()) return download_fp8(w);
  w.w1 = FT_TRY(download(at(table_, Buf::w1), std::size_t(problem_.experts) * 2 * problem_.inter * problem_.hidden));
  w.w2 = FT_TRY(download(at(table_, Buf::w2), std::size_t(problem_.experts) * problem_.hidden * problem_.inter));
  return {};
}

}  // namespace ft
