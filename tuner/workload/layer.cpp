#include "tuner/workload/layer.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "generator/launch.hpp"
#include "tuner/workload/kernel_args.hpp"
#include "tuner/workload/shuffle.hpp"

namespace ft {

namespace {

Result<DeviceBuffer> upload_bytes(Device& d, const void* data, std::size_t bytes) {
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(d, bytes));
  FT_CHECK(d.copy_to_device(b.ptr(), data, bytes));
  FT_CHECK(d.synchronize());
  return b;
}

}  // namespace

Result<DeviceWorkload> DeviceWorkload::upload(Device& device, const Workload& w) {
  DeviceWorkload dw;
  dw.device_ = &device;
  dw.workload_ = &w;
  const std::size_t T = std::size_t(w.tokens), H = std::size_t(w.problem.hidden), I = std::size_t(w.problem.inter),
                    k = std::size_t(w.problem.topk);
  dw.x = FT_TRY(upload_bytes(device, w.x.data(), w.x.size() * 2));
  dw.topk_ids = FT_TRY(upload_bytes(device, w.topk_ids.data(), w.topk_ids.size() * 4));
  dw.topk_weights = FT_TRY(upload_bytes(device, w.topk_weights.data(), w.topk_weights.size() * 4));
  dw.w1_[0] = FT_TRY(upload_bytes(device, w.w1.data(), w.w1.size() * 2));
  dw.w2_[0] = FT_TRY(upload_bytes(device, w.w2.data(), w.w2.size() * 2));
  dw.inter = FT_TRY(DeviceBuffer::allocate(device, T * k * I * 2));
  dw.y_acc = FT_TRY(DeviceBuffer::allocate(device, T * k * H * 4));  // large enough for both reductions
  dw.y = FT_TRY(DeviceBuffer::allocate(device, T * H * 2));
  dw.padded_rows = FT_TRY(DeviceBuffer::allocate(device, 4));
  return dw;
}

Result<DevicePtr> DeviceWorkload::weights(int which, WeightLayoutKind layout) {
  if (which != 1 && which != 2) return fail(Errc::internal, fmt::format("weights({}): W1 or W2 only", which));
  DeviceBuffer& slot = (which == 1 ? w1_ : w2_)[int(layout)];
  if (layout != WeightLayoutKind::plain && !slot.ptr()) {
    const Problem& p = workload_->problem;
    const long long rows = which == 1 ? (long long)p.experts * 2 * p.inter : (long long)p.experts * p.hidden;
    const long long cols = which == 1 ? p.hidden : p.inter;
    const auto arranged = FT_TRY(arrange_weights_host(which == 1 ? workload_->w1 : workload_->w2, rows, cols, layout));
    slot = FT_TRY(upload_bytes(*device_, arranged.data(), arranged.size() * 2));
  }
  return slot.ptr();
}

int LayerPlan::effective_align_block() const { return align_block > 0 ? align_block : std::max(stage1.tile_m, stage2.tile_m); }

Status LayerPlan::validate(const Problem& p) const {
  auto bad = [](std::string what) { return fail(Errc::invalid_input, "layer plan: " + what); };
  if (!stage1.target || !stage2.target || !stage1.atom || !stage2.atom) return bad("a stage has no target or atom");
  if (stage1.kind != KernelKind::moe1 || stage2.kind != KernelKind::moe2) return bad("needs a stage-1 and a stage-2 variant");
  if (stage1.dtype != p.dtype || stage2.dtype != p.dtype) return bad("the variants' dtype differs from the problem's");
  if (stage1.weight_in_stage1 != stage2.weight_in_stage1)
    return bad("stage 1 and stage 2 disagree on where the routed weight is applied");
  const int ab = effective_align_block();
  if (ab % stage1.tile_m != 0 || ab % stage2.tile_m != 0)
    return bad(fmt::format("align block {} is not a multiple of both tile_m ({}, {})", ab, stage1.tile_m, stage2.tile_m));
  if (p.inter % stage1.tile_n != 0 || p.hidden % stage1.tile_k != 0)
    return bad(fmt::format("stage 1 tiles n{} k{} do not divide I={} H={}", stage1.tile_n, stage1.tile_k, p.inter, p.hidden));
  if (p.hidden % stage2.tile_n != 0 || p.inter % (stage2.tile_k * stage2.split_k) != 0)
    return bad(fmt::format("stage 2 tiles n{} k{} x split {} do not divide H={} I={}", stage2.tile_n, stage2.tile_k,
                           stage2.split_k, p.hidden, p.inter));
  return {};
}

namespace {

Status launch_shape(Device& d, FunctionHandle f, const LaunchShape& s, const MoeArgsHost& args, StreamHandle stream) {
  if (s.lds_bytes > 0) FT_CHECK(d.set_dynamic_shared(f, s.lds_bytes));
  return d.launch(f, Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}, Dim3{unsigned(s.block), 1, 1},
                  s.lds_bytes, stream, &args, sizeof args);
}

MoeArgsHost base_args(DeviceWorkload& dw, int align_block, long long max_rows, DevicePtr sorted, DevicePtr blocks) {
  const Problem& p = dw.workload().problem;
  MoeArgsHost a;
  a.x = dw.x.ptr();
  a.topk_ids = dw.topk_ids.ptr();
  a.topk_weights = dw.topk_weights.ptr();
  a.inter = dw.inter.ptr();
  a.y_acc = dw.y_acc.ptr();
  a.y = dw.y.ptr();
  a.sorted_ids = sorted;
  a.block_experts = blocks;
  a.padded_rows = dw.padded_rows.ptr();
  a.tokens = dw.workload().tokens;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.align_block = align_block;
  a.max_padded_rows = int(max_rows);
  return a;
}

}  // namespace

Result<LayerResult> run_layer(DeviceWorkload& dw, const LayerKernels& kernels, const LayerPlan& plan,
                              const LayerRunOptions& options) {
  Device& d = dw.device();
  const Workload& w = dw.workload();
  const Problem& p = w.problem;
  FT_CHECK(plan.validate(p));
  const int ab = plan.effective_align_block();
  const long long rows = max_padded_rows(p, w.tokens, ab);
  const std::size_t T = std::size_t(w.tokens), H = std::size_t(p.hidden), I = std::size_t(p.inter), k = std::size_t(p.topk);
  DeviceBuffer sorted = FT_TRY(DeviceBuffer::allocate(d, std::size_t(rows) * 4));
  DeviceBuffer blocks = FT_TRY(DeviceBuffer::allocate(d, std::size_t(rows / ab) * 4));
  MoeArgsHost args = base_args(dw, ab, rows, sorted.ptr(), blocks.ptr());
  args.w1 = FT_TRY(dw.weights(1, plan.stage1.layout));
  args.w2 = FT_TRY(dw.weights(2, plan.stage2.layout));
  const StreamHandle s = options.stream;

  // Poison what the kernels must write (NaN in both 16-bit types and in fp32),
  // so an element no kernel wrote fails the comparison.
  FT_CHECK(d.memset_u32(dw.y.ptr(), 0xffffffffu, T * H / 2, s));
  FT_CHECK(d.memset_u32(dw.inter.ptr(), 0xffffffffu, T * k * I / 2, s));
  FT_CHECK(d.memset_u32(sorted.ptr(), 0, std::size_t(rows), s));
  FT_CHECK(d.memset_u32(blocks.ptr(), 0, std::size_t(rows / ab), s));
  if (plan.stage2.reduce == Reduction::atomic) FT_CHECK(d.memset_u32(dw.y_acc.ptr(), 0, T * H, s));
  else FT_CHECK(d.memset_u32(dw.y_acc.ptr(), 0xffffffffu, T * k * H, s));

  FT_CHECK(launch_shape(d, kernels.align, align_launch(p), args, s));
  FT_CHECK(launch_shape(d, kernels.stage1, stage_launch(plan.stage1, p, w.tokens, ab), args, s));
  FT_CHECK(launch_shape(d, kernels.stage2, stage_launch(plan.stage2, p, w.tokens, ab), args, s));
  FT_CHECK(launch_shape(d, kernels.reduce, reduce_launch(p, w.tokens), args, s));

  LayerResult r;
  r.y.resize(T * H);
  FT_CHECK(d.copy_to_host(r.y.data(), dw.y.ptr(), T * H * 2, s));
  FT_CHECK(d.copy_to_host(&r.padded_rows, dw.padded_rows.ptr(), 4, s));
  if (options.read_intermediates) {
    r.inter.resize(T * k * I);
    r.sorted_ids.resize(std::size_t(rows));
    r.block_experts.resize(std::size_t(rows / ab));
    FT_CHECK(d.copy_to_host(r.inter.data(), dw.inter.ptr(), r.inter.size() * 2, s));
    FT_CHECK(d.copy_to_host(r.sorted_ids.data(), sorted.ptr(), r.sorted_ids.size() * 4, s));
    FT_CHECK(d.copy_to_host(r.block_experts.data(), blocks.ptr(), r.block_experts.size() * 4, s));
  }
  FT_CHECK(d.synchronize(s));
  return r;
}

Result<Comparison> verify_layer(DeviceWorkload& dw, const LayerKernels& kernels, const LayerPlan& plan,
                                const ReferenceOutput& reference) {
  const LayerResult r = FT_TRY(run_layer(dw, kernels, plan));
  return compare_output(r.y, reference.y, dw.workload().problem.dtype);
}

Result<AlignResult> run_align(DeviceWorkload& dw, FunctionHandle align, int align_block) {
  Device& d = dw.device();
  const Problem& p = dw.workload().problem;
  const long long rows = max_padded_rows(p, dw.workload().tokens, align_block);
  DeviceBuffer sorted = FT_TRY(DeviceBuffer::allocate(d, std::size_t(rows) * 4));
  DeviceBuffer blocks = FT_TRY(DeviceBuffer::allocate(d, std::size_t(rows / align_block) * 4));
  // Poison: -1 in sorted_ids / block_experts shows any row the kernel did not write.
  FT_CHECK(d.memset_u32(sorted.ptr(), 0xffffffffu, std::size_t(rows)));
  FT_CHECK(d.memset_u32(blocks.ptr(), 0xffffffffu, std::size_t(rows / align_block)));
  FT_CHECK(d.memset_u32(dw.padded_rows.ptr(), 0xffffffffu, 1));
  const MoeArgsHost args = base_args(dw, align_block, rows, sorted.ptr(), blocks.ptr());
  FT_CHECK(launch_shape(d, align, align_launch(p), args, {}));
  AlignResult r;
  FT_CHECK(d.copy_to_host(&r.padded_rows, dw.padded_rows.ptr(), 4));
  if (r.padded_rows < 0 || r.padded_rows > rows || r.padded_rows % align_block != 0)
    return fail(Errc::verify, fmt::format("align wrote padded_rows = {} (capacity {}, align block {})", r.padded_rows, rows,
                                          align_block));
  r.sorted_ids.resize(std::size_t(r.padded_rows));
  r.block_experts.resize(std::size_t(r.padded_rows / align_block));
  FT_CHECK(d.copy_to_host(r.sorted_ids.data(), sorted.ptr(), r.sorted_ids.size() * 4));
  FT_CHECK(d.copy_to_host(r.block_experts.data(), blocks.ptr(), r.block_experts.size() * 4));
  FT_CHECK(d.synchronize());
  return r;
}

Result<std::vector<std::uint16_t>> run_shuffle(Device& d, FunctionHandle shuffle, std::span<const std::uint16_t> src,
                                               long long rows, long long cols, WeightLayoutKind layout) {
  if (rows % 16 != 0 || cols % 8 != 0 || (long long)src.size() != rows * cols)
    return fail(Errc::invalid_input, fmt::format("weight shuffle of [{}, {}] with {} elements", rows, cols, src.size()));
  DeviceBuffer in = FT_TRY(upload_bytes(d, src.data(), src.size() * 2));
  DeviceBuffer out = FT_TRY(DeviceBuffer::allocate(d, src.size() * 2));
  FT_CHECK(d.memset_u32(out.ptr(), 0xffffffffu, src.size() / 2));
  ShuffleArgsHost args{in.ptr(), out.ptr(), int(rows), int(cols), int(layout)};
  const LaunchShape s = shuffle_launch(rows, cols);
  FT_CHECK(d.launch(shuffle, Dim3{unsigned(s.grid_x), 1, 1}, Dim3{unsigned(s.block), 1, 1}, 0, {}, &args, sizeof args));
  std::vector<std::uint16_t> r(src.size());
  FT_CHECK(d.copy_to_host(r.data(), out.ptr(), r.size() * 2));
  FT_CHECK(d.synchronize());
  return r;
}

}  // namespace ft
