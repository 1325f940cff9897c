#include "tuner/layer/layer_bench.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "tuner/workload/half.hpp"

namespace ft {
namespace {

constexpr std::uint32_t kNaN16x2 = 0xffffffffu;  // two 16-bit NaNs (bf16 and f16 alike)
constexpr std::uint32_t kNaN32 = 0xffffffffu;    // an fp32 NaN

Dim3 grid_of(const LaunchShape& s) { return Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}; }

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos)), hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

}  // namespace

Timing summarize(std::vector<double> us) {
  Timing t;
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  t.samples = int(us.size());
  t.min_us = us.front();
  t.median_us = percentile(us, 0.5);
  t.p10_us = percentile(us, 0.1);
  t.p90_us = percentile(us, 0.9);
  return t;
}

Result<std::unique_ptr<LayerBench>> LayerBench::create(Device& dev, const Problem& p, const Target& target,
                                                       std::span<const std::byte> support, int max_tokens) {
  std::unique_ptr<LayerBench> b(new LayerBench(dev, p, target));
  b->max_tokens_ = max_tokens;
  ModuleHandle m = FT_TRY(dev.load_module(support));
  b->modules_.push_back(m);
  b->align_ = FT_TRY(dev.function(m, align_entry(target)));
  b->reduce_atomic_ = FT_TRY(dev.function(m, reduce_entry(target, Reduction::atomic, p.dtype)));
  b->reduce_partials_ = FT_TRY(dev.function(m, reduce_entry(target, Reduction::partials, p.dtype)));
  b->shuffle_ = FT_TRY(dev.function(m, shuffle_entry(target)));
  b->reference1_ = FT_TRY(dev.function(m, reference_entry(target, KernelKind::moe1, p.dtype)));
  b->reference2_ = FT_TRY(dev.function(m, reference_entry(target, KernelKind::moe2, p.dtype)));
  b->fill_ = FT_TRY(dev.function(m, fill_entry(target)));

  const std::size_t T = std::size_t(max_tokens), E = p.experts, H = p.hidden, I = p.inter, k = p.topk, es = 2;
  // The largest row block gives the most padding: size for the largest tile_m
  // any space has; run_align refuses larger blocks.
  const std::size_t rows = std::size_t(max_padded_rows(p, max_tokens, kMaxAlignBlock));
  b->x_ = FT_TRY(DeviceBuffer::allocate(dev, T * H * es));
  b->ids_ = FT_TRY(DeviceBuffer::allocate(dev, T * k * 4));
  b->weights_ = FT_TRY(DeviceBuffer::allocate(dev, T * k * 4));
  b->w1_ = FT_TRY(DeviceBuffer::allocate(dev, E * 2 * I * H * es));
  b->w2_ = FT_TRY(DeviceBuffer::allocate(dev, E * H * I * es));
  b->inter_ = FT_TRY(DeviceBuffer::allocate(dev, T * k * I * es));
  b->y_acc_ = FT_TRY(DeviceBuffer::allocate(dev, T * k * H * 4));  // partials need k rows per token
  b->y_ = FT_TRY(DeviceBuffer::allocate(dev, T * H * es));
  b->sorted_ = FT_TRY(DeviceBuffer::allocate(dev, rows * 4));
  b->block_experts_ = FT_TRY(DeviceBuffer::allocate(dev, (rows / 16 + 1) * 4));
  b->padded_rows_ = FT_TRY(DeviceBuffer::allocate(dev, 16));
  for (int f = 0; f < 2; ++f) {
    b->inter_ref_[f] = FT_TRY(DeviceBuffer::allocate(dev, T * k * I * es));
    b->y_ref_[f] = FT_TRY(DeviceBuffer::allocate(dev, T * H * es));
  }
  // Twice the L2 (at least 64 MiB) so a rewrite evicts every line the last rep touched.
  const std::size_t l2 = std::max<std::size_t>(dev.info().l2_bytes, 32u << 20);
  b->flush_ = FT_TRY(DeviceBuffer::allocate(dev, 2 * l2));
  return b;
}

LayerBench::~LayerBench() {
  for (ModuleHandle m : modules_) (void)dev_.unload_module(m);
}

Result<FunctionHandle> LayerBench::load(std::span<const std::byte> code_object, const std::string& entry, int lds_bytes) {
  ModuleHandle m = FT_TRY(dev_.load_module(code_object));
  modules_.push_back(m);
  FunctionHandle f = FT_TRY(dev_.function(m, entry));
  if (lds_bytes > 0) FT_CHECK(dev_.set_dynamic_shared(f, lds_bytes));
  return f;
}

MoeArgsHost LayerBench::args(int align_block, int flags) const {
  MoeArgsHost a{};
  a.x = x_.ptr();
  a.topk_ids = ids_.ptr();
  a.topk_weights = weights_.ptr();
  a.w1 = w1_.ptr();
  a.w2 = w2_.ptr();
  a.inter = inter_.ptr();
  a.y_acc = y_acc_.ptr();
  a.y = y_.ptr();
  a.sorted_ids = sorted_.ptr();
  a.block_experts = block_experts_.ptr();
  a.padded_rows = padded_rows_.ptr();
  a.tokens = tokens_;
  a.hidden = problem_.hidden;
  a.inter_size = problem_.inter;
  a.experts = problem_.experts;
  a.topk = problem_.topk;
  a.align_block = align_block;
  a.max_padded_rows = int(max_padded_rows(problem_, tokens_, align_block));
  a.flags = flags;
  return a;
}

Status LayerBench::launch(FunctionHandle f, const LaunchShape& s, const void* a, std::size_t n, StreamHandle st) {
  if (s.grid_x <= 0 || s.grid_y <= 0 || s.grid_z <= 0) return {};  // nothing to do (e.g. zero rows)
  return dev_.launch(f, grid_of(s), Dim3{unsigned(s.block), 1, 1}, s.lds_bytes, st, a, n);
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
  auto fill = [&](DevicePtr dst, std::size_t count, std::uint64_t s, float scale) -> Status {
    FillArgsHost a{dst, count, s, scale, elem};
    const long long blocks = (long long)((count + 8 * 256 - 1) / (8 * 256));
    return dev_.launch(fill_, Dim3{unsigned(blocks), 1, 1}, Dim3{256, 1, 1}, 0, {}, &a, sizeof a);
  };
  // Scales keep every stage's outputs O(1): weights ~ N(0, 1/K).
  FT_CHECK(fill(x_.ptr(), std::size_t(tokens) * H, seed * 3 + 1, 1.0f));
  // A finite intermediate for timing stage 2 on its own.
  FT_CHECK(fill(inter_.ptr(), std::size_t(tokens) * problem_.topk * I, seed * 3 + 4, 1.0f));
  if (seed != seed_ || !reference_ready_[0]) {
    FT_CHECK(fill(w1_.ptr(), E * 2 * I * H, seed * 3 + 2, float(1.0 / std::sqrt(double(H)))));
    FT_CHECK(fill(w2_.ptr(), E * H * I, seed * 3 + 3, float(1.0 / std::sqrt(double(I)))));
    arranged_ready_ = {};
  }
  seed_ = seed;
  FT_CHECK(dev_.copy_to_device(ids_.ptr(), ids.data(), pairs * 4));
  FT_CHECK(dev_.copy_to_device(weights_.ptr(), weights.data(), pairs * 4));
  reference_ready_ = {false, false};
  return dev_.synchronize();
}

Status LayerBench::run_align(int align_block, StreamHandle s) {
  if (align_block < 1 || align_block > kMaxAlignBlock)
    return fail(Errc::invalid_input, fmt::format("row block {} outside 1..{}", align_block, kMaxAlignBlock));
  MoeArgsHost a = args(align_block, 0);
  return launch(align_, align_launch(problem_), &a, sizeof a, s);
}

Status LayerBench::ensure_arranged(WeightLayoutKind layout) {
  const int l = int(layout);
  if (layout == WeightLayoutKind::plain || arranged_ready_[l]) return {};
  const std::size_t H = problem_.hidden, I = problem_.inter, E = problem_.experts, es = 2;
  if (!w1_arranged_[l]) w1_arranged_[l] = FT_TRY(DeviceBuffer::allocate(dev_, E * 2 * I * H * es));
  if (!w2_arranged_[l]) w2_arranged_[l] = FT_TRY(DeviceBuffer::allocate(dev_, E * H * I * es));
  ShuffleArgsHost a1{w1_.ptr(), w1_arranged_[l].ptr(), int(E * 2 * I), int(H), l};
  FT_CHECK(launch(shuffle_, shuffle_launch(E * 2 * I, H), &a1, sizeof a1));
  ShuffleArgsHost a2{w2_.ptr(), w2_arranged_[l].ptr(), int(E * H), int(I), l};
  FT_CHECK(launch(shuffle_, shuffle_launch(E * H, I), &a2, sizeof a2));
  FT_CHECK(dev_.synchronize());
  arranged_ready_[l] = true;
  return {};
}

DevicePtr LayerBench::weights(int which, WeightLayoutKind layout) const {
  if (layout == WeightLayoutKind::plain) return which == 1 ? w1_.ptr() : w2_.ptr();
  return (which == 1 ? w1_arranged_ : w2_arranged_)[int(layout)].ptr();
}

Status LayerBench::ensure_reference(bool w1) {
  const int f = w1 ? 1 : 0;
  if (reference_ready_[f]) return {};
  MoeArgsHost a = args(16, w1 ? kFlagWeightInStage1 : 0);
  a.inter = inter_ref_[f].ptr();
  a.y = y_ref_[f].ptr();
  FT_CHECK(dev_.memset_u32(inter_ref_[f].ptr(), kNaN16x2, inter_ref_[f].bytes() / 4));
  FT_CHECK(dev_.memset_u32(y_ref_[f].ptr(), kNaN16x2, y_ref_[f].bytes() / 4));
  FT_CHECK(launch(reference1_, reference_launch(KernelKind::moe1, problem_, tokens_), &a, sizeof a));
  FT_CHECK(launch(reference2_, reference_launch(KernelKind::moe2, problem_, tokens_), &a, sizeof a));
  FT_CHECK(dev_.synchronize());
  reference_ready_[f] = true;
  return {};
}

Status LayerBench::run_stage(const Variant& v, FunctionHandle f, DevicePtr inter, StreamHandle s) {
  MoeArgsHost a = args(v.tile_m, 0);
  a.inter = inter;
  a.w1 = weights(1, v.layout);
  a.w2 = weights(2, v.layout);
  return launch(f, stage_launch(v, problem_, tokens_, v.tile_m), &a, sizeof a, s);
}

Status LayerBench::run_reduce(Reduction r, StreamHandle s) {
  MoeArgsHost a = args(16, 0);
  return launch(r == Reduction::atomic ? reduce_atomic_ : reduce_partials_, reduce_launch(problem_, tokens_), &a, sizeof a, s);
}

Status LayerBench::flush_l2(StreamHandle s) { return dev_.memset_u32(flush_.ptr(), 0x5a5a5a5au, flush_.bytes() / 4, s); }

Result<std::vector<std::uint16_t>> LayerBench::download(DevicePtr p, std::size_t count) {
  std::vector<std::uint16_t> out(count);
  FT_CHECK(dev_.copy_to_host(out.data(), p, count * 2));
  return out;
}

Result<Comparison> LayerBench::compare_with(DevicePtr out, DevicePtr reference, std::size_t count) {
  auto got = FT_TRY(download(out, count));
  auto ref_bits = FT_TRY(download(reference, count));
  std::vector<float> ref(count);
  for (std::size_t i = 0; i < count; ++i) ref[i] = half_to_f32(problem_.dtype, ref_bits[i]);
  return compare_output(got, ref, problem_.dtype);
}

Result<Comparison> LayerBench::verify_stage(const Variant& v, FunctionHandle f) {
  FT_CHECK(ensure_reference(v.weight_in_stage1));
  FT_CHECK(ensure_arranged(v.layout));
  FT_CHECK(run_align(v.tile_m));
  const std::size_t pairs = std::size_t(tokens_) * problem_.topk;
  const int ref = v.weight_in_stage1 ? 1 : 0;
  if (v.kind == KernelKind::moe1) {
    const std::size_t n = pairs * problem_.inter;
    FT_CHECK(dev_.memset_u32(inter_.ptr(), kNaN16x2, n / 2));
    FT_CHECK(run_stage(v, f, inter_.ptr()));
    FT_CHECK(dev_.synchronize());
    return compare_with(inter_.ptr(), inter_ref_[ref].ptr(), n);
  }
  const std::size_t n = std::size_t(tokens_) * problem_.hidden;
  const bool atomic = v.reduce == Reduction::atomic;
  FT_CHECK(dev_.memset_u32(y_acc_.ptr(), atomic ? 0u : kNaN32, (atomic ? n : pairs * problem_.hidden)));
  FT_CHECK(dev_.memset_u32(y_.ptr(), kNaN16x2, n / 2));
  FT_CHECK(run_stage(v, f, inter_ref_[ref].ptr()));
  FT_CHECK(run_reduce(v.reduce));
  FT_CHECK(dev_.synchronize());
  return compare_with(y_.ptr(), y_ref_[ref].ptr(), n);
}

Result<Comparison> LayerBench::verify_layer(const Variant& v1, FunctionHandle f1, const Variant& v2, FunctionHandle f2) {
  if (v1.weight_in_stage1 != v2.weight_in_stage1)
    return fail(Errc::invalid_input, "stage 1 and stage 2 disagree on where the routed weight is applied");
  FT_CHECK(ensure_reference(v1.weight_in_stage1));
  FT_CHECK(ensure_arranged(v1.layout));
  FT_CHECK(ensure_arranged(v2.layout));
  const std::size_t n = std::size_t(tokens_) * problem_.hidden;
  FT_CHECK(dev_.memset_u32(inter_.ptr(), kNaN16x2, std::size_t(tokens_) * problem_.topk * problem_.inter / 2));
  FT_CHECK(dev_.memset_u32(y_.ptr(), kNaN16x2, n / 2));
  FT_CHECK(dev_.memset_u32(y_acc_.ptr(), 0u, std::size_t(tokens_) * problem_.topk * problem_.hidden));
  FT_CHECK(run_align(v1.tile_m));
  FT_CHECK(run_stage(v1, f1, inter_.ptr()));
  if (v2.tile_m != v1.tile_m) FT_CHECK(run_align(v2.tile_m));
  FT_CHECK(run_stage(v2, f2, inter_.ptr()));
  FT_CHECK(run_reduce(v2.reduce));
  FT_CHECK(dev_.synchronize());
  return compare_with(y_.ptr(), y_ref_[v1.weight_in_stage1 ? 1 : 0].ptr(), n);
}

Result<Timing> LayerBench::time_stage(const Variant& v, FunctionHandle f, const TimingOptions& opt) {
  FT_CHECK(ensure_arranged(v.layout));
  FT_CHECK(run_align(v.tile_m));
  // Stage 1 writes inter_; stage 2 reads it (random values from set_inputs, or
  // an earlier stage-1 run: the work timed is the same either way).
  const DevicePtr inter = inter_.ptr();
  EventHandle start = FT_TRY(dev_.create_event()), stop = FT_TRY(dev_.create_event());
  std::vector<double> us;
  Status st;
  for (int i = 0; i < opt.warmup + opt.reps && st; ++i) {
    if (opt.flush_l2) st = flush_l2();
    if (st) st = dev_.record(start);
    if (st) st = run_stage(v, f, inter);
    if (st) st = dev_.record(stop);
    if (st) st = dev_.synchronize();
    if (!st) break;
    auto ms = dev_.elapsed_ms(start, stop);
    if (!ms) {
      st = std::unexpected(ms.error());
      break;
    }
    if (i >= opt.warmup) us.push_back(*ms * 1000.0);
  }
  (void)dev_.destroy_event(start);
  (void)dev_.destroy_event(stop);
  FT_CHECK(st);
  return summarize(std::move(us));
}

Result<LayerTiming> LayerBench::time_layer(const Variant& v1, FunctionHandle f1, const Variant& v2, FunctionHandle f2,
                                           const TimingOptions& opt) {
  FT_CHECK(ensure_arranged(v1.layout));
  FT_CHECK(ensure_arranged(v2.layout));
  const int align_block = std::max(v1.tile_m, v2.tile_m);  // a multiple of both (powers of two)
  const std::size_t acc_words = (v2.reduce == Reduction::atomic ? 1 : std::size_t(problem_.topk)) *
                                std::size_t(tokens_) * problem_.hidden;
  StreamHandle stream = FT_TRY(dev_.create_stream());
  std::array<EventHandle, 5> ev{};
  for (auto& e : ev) e = FT_TRY(dev_.create_event());
  auto enqueue_layer = [&](bool with_events) -> Status {
    auto mark = [&](int i) -> Status { return with_events ? dev_.record(ev[i], stream) : Status{}; };
    MoeArgsHost a = args(align_block, 0);
    MoeArgsHost a1 = a;  // each stage reads its weights in its own layout
    a1.w1 = weights(1, v1.layout);
    FT_CHECK(mark(0));
    FT_CHECK(launch(align_, align_launch(problem_), &a, sizeof a, stream));
    FT_CHECK(mark(1));
    FT_CHECK(launch(f1, stage_launch(v1, problem_, tokens_, align_block), &a1, sizeof a1, stream));
    FT_CHECK(mark(2));
    if (v2.reduce == Reduction::atomic) FT_CHECK(dev_.memset_u32(y_acc_.ptr(), 0u, acc_words, stream));
    MoeArgsHost a2 = a;
    a2.w2 = weights(2, v2.layout);
    FT_CHECK(launch(f2, stage_launch(v2, problem_, tokens_, align_block), &a2, sizeof a2, stream));
    FT_CHECK(mark(3));
    FT_CHECK(launch(v2.reduce == Reduction::atomic ? reduce_atomic_ : reduce_partials_, reduce_launch(problem_, tokens_),
                    &a, sizeof a, stream));
    return mark(4);
  };
  LayerTiming out;
  std::vector<double> total, align, s1, s2, red;
  Status st;
  GraphHandle graph{};
  if (opt.graph) {
    st = dev_.begin_capture(stream);
    if (st) st = enqueue_layer(false);
    if (st) {
      auto g = dev_.end_capture(stream);
      if (g) graph = *g;
      else st = std::unexpected(g.error());
    }
  }
  for (int i = 0; i < opt.warmup + opt.reps && st; ++i) {
    if (opt.flush_l2) st = flush_l2(stream);
    if (!st) break;
    if (opt.graph) {
      st = dev_.record(ev[0], stream);
      if (st) st = dev_.launch_graph(graph, stream);
      if (st) st = dev_.record(ev[4], stream);
    } else {
      st = enqueue_layer(true);
    }
    if (st) st = dev_.synchronize(stream);
    if (!st) break;
    if (i < opt.warmup) continue;
    auto ms = [&](int a, int b) -> double {
      auto r = dev_.elapsed_ms(ev[a], ev[b]);
      return r ? *r * 1000.0 : -1.0;
    };
    total.push_back(ms(0, 4));
    if (!opt.graph) {
      align.push_back(ms(0, 1));
      s1.push_back(ms(1, 2));
      s2.push_back(ms(2, 3));
      red.push_back(ms(3, 4));
    }
  }
  if (graph.p) (void)dev_.destroy_graph(graph);
  for (auto& e : ev) (void)dev_.destroy_event(e);
  (void)dev_.destroy_stream(stream);
  FT_CHECK(st);
  out.total = summarize(total);
  out.align = summarize(align);
  out.stage1 = summarize(s1);
  out.stage2 = summarize(s2);
  out.reduce = summarize(red);
  return out;
}

Status LayerBench::inject_fault() {
  FillArgsHost a{0x10, std::uint64_t(1) << 24, 1, 1.0f, 0};  // page zero: never mapped
  FT_CHECK(dev_.launch(fill_, Dim3{unsigned((a.count / 8 + 255) / 256), 1, 1}, Dim3{256, 1, 1}, 0, {}, &a, sizeof a));
  return dev_.synchronize();
}

Result<LayerBench::AlignOutput> LayerBench::run_align_only(int align_block) {
  AlignOutput out;
  FT_CHECK(dev_.memset_u32(padded_rows_.ptr(), 0xffffffffu, 1));
  FT_CHECK(run_align(align_block));
  FT_CHECK(dev_.synchronize());
  FT_CHECK(dev_.copy_to_host(&out.padded_rows, padded_rows_.ptr(), 4));
  const long long cap = max_padded_rows(problem_, tokens_, align_block);
  if (out.padded_rows < 0 || out.padded_rows > cap || out.padded_rows % align_block != 0)
    return fail(Errc::verify, fmt::format("align wrote padded_rows {} (capacity {}, block {})", out.padded_rows, cap, align_block));
  out.sorted_ids.resize(std::size_t(out.padded_rows));
  out.block_experts.resize(std::size_t(out.padded_rows / align_block));
  if (out.padded_rows > 0) {
    FT_CHECK(dev_.copy_to_host(out.sorted_ids.data(), sorted_.ptr(), out.sorted_ids.size() * 4));
    FT_CHECK(dev_.copy_to_host(out.block_experts.data(), block_experts_.ptr(), out.block_experts.size() * 4));
  }
  return out;
}

Result<std::vector<std::uint16_t>> LayerBench::reference_output(bool w1) {
  FT_CHECK(ensure_reference(w1));
  return download(y_ref_[w1 ? 1 : 0].ptr(), std::size_t(tokens_) * problem_.hidden);
}

Result<std::vector<std::uint16_t>> LayerBench::download_x() { return download(x_.ptr(), std::size_t(tokens_) * problem_.hidden); }
Result<std::vector<std::uint16_t>> LayerBench::download_w1() {
  return download(w1_.ptr(), std::size_t(problem_.experts) * 2 * problem_.inter * problem_.hidden);
}
Result<std::vector<std::uint16_t>> LayerBench::download_w2() {
  return download(w2_.ptr(), std::size_t(problem_.experts) * problem_.hidden * problem_.inter);
}

}  // namespace ft
