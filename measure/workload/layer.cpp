#include "measure/workload/layer.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "measure/workload/shuffle.hpp"

namespace ft {

namespace {

Result<DeviceBuffer> upload_bytes(Device& d, const void* data, std::size_t bytes) {
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(d, bytes));
  FT_CHECK(d.copy_to_device(b.ptr(), data, bytes));
  FT_CHECK(d.synchronize());
  return b;
}

// The 32-bit poison of e4m3 codes in a format: four NaN codes.
std::uint32_t nan_codes(Elem format) { return format == Elem::e4m3fnuz ? 0x80808080u : 0xffffffffu; }

// An fp8 workload's weights (codes in the plain slots), scales and workspace.
Status upload_fp8(Device& device, const Workload& w, DeviceWorkload& dw, DeviceBuffer (&w1)[3], DeviceBuffer (&w2)[3],
                  BufferTable& table) {
  const std::size_t T = std::size_t(w.tokens), H = std::size_t(w.problem.hidden), I = std::size_t(w.problem.inter),
                    k = std::size_t(w.problem.topk);
  w1[0] = FT_TRY(upload_bytes(device, w.w1q.data(), w.w1q.size()));
  w2[0] = FT_TRY(upload_bytes(device, w.w2q.data(), w.w2q.size()));
  dw.w1_scales = FT_TRY(upload_bytes(device, w.w1_scales.data(), w.w1_scales.size() * 4));
  dw.w2_scales = FT_TRY(upload_bytes(device, w.w2_scales.data(), w.w2_scales.size() * 4));
  if (!w.x_scale.empty()) dw.x_scale = FT_TRY(upload_bytes(device, w.x_scale.data(), w.x_scale.size() * 4));
  if (!w.inter_scale.empty()) dw.inter_scale = FT_TRY(upload_bytes(device, w.inter_scale.data(), w.inter_scale.size() * 4));
  dw.xq = FT_TRY(DeviceBuffer::allocate(device, T * H));
  dw.x_scales = FT_TRY(DeviceBuffer::allocate(device, T * H / kScaleGroup * 4 + 4));  // the largest mode's
  dw.inter_q = FT_TRY(DeviceBuffer::allocate(device, T * k * I));
  dw.inter_scales = FT_TRY(DeviceBuffer::allocate(device, T * k * I / kScaleGroup * 4));
  const std::pair<Buf, const DeviceBuffer*> entries[] = {
      {Buf::x_scale, &dw.x_scale}, {Buf::w1_scales, &dw.w1_scales}, {Buf::w2_scales, &dw.w2_scales},
      {Buf::xq, &dw.xq},           {Buf::x_scales, &dw.x_scales},   {Buf::inter_q, &dw.inter_q},
      {Buf::inter_scales, &dw.inter_scales}, {Buf::inter_scale, &dw.inter_scale}};
  for (const auto& [b, buffer] : entries) at(table, b) = buffer->ptr();
  return {};
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
  if (w.problem.fp8()) {
    FT_CHECK(upload_fp8(device, w, dw, dw.w1_, dw.w2_, dw.table_));
  } else {
    dw.w1_[0] = FT_TRY(upload_bytes(device, w.w1.data(), w.w1.size() * 2));
    dw.w2_[0] = FT_TRY(upload_bytes(device, w.w2.data(), w.w2.size() * 2));
  }
  dw.inter = FT_TRY(DeviceBuffer::allocate(device, T * k * I * 2));
  dw.y_acc = FT_TRY(DeviceBuffer::allocate(device, std::size_t(y_acc_capacity(w.problem, int(T)))));  // every reduction's
  dw.y = FT_TRY(DeviceBuffer::allocate(device, T * H * 2));
  dw.padded_rows = FT_TRY(DeviceBuffer::allocate(device, 4));
  const long long rows = max_padded_rows(w.problem, w.tokens, kMaxAlignBlock);
  dw.sorted_ids = FT_TRY(DeviceBuffer::allocate(device, std::size_t(sorted_ids_capacity(w.problem, w.tokens)) * 4));
  dw.block_experts = FT_TRY(DeviceBuffer::allocate(device, std::size_t(rows) * 4));
  dw.bad_ids = FT_TRY(DeviceBuffer::allocate(device, 4));
  dw.tile_tickets = FT_TRY(DeviceBuffer::allocate(device, 8));
  const std::pair<Buf, const DeviceBuffer*> entries[] = {
      {Buf::x, &dw.x},         {Buf::topk_ids, &dw.topk_ids},     {Buf::topk_weights, &dw.topk_weights},
      {Buf::w1, &dw.w1_[0]},   {Buf::w2, &dw.w2_[0]},             {Buf::inter, &dw.inter},
      {Buf::y_acc, &dw.y_acc}, {Buf::y, &dw.y},                   {Buf::sorted_ids, &dw.sorted_ids},
      {Buf::block_experts, &dw.block_experts}, {Buf::padded_rows, &dw.padded_rows}, {Buf::bad_ids, &dw.bad_ids},
      {Buf::tile_tickets, &dw.tile_tickets}};
  for (const auto& [b, buffer] : entries) at(dw.table_, b) = buffer->ptr();
  return dw;
}

Result<DevicePtr> DeviceWorkload::weights(int which, WeightLayout layout) {
  if (which != 1 && which != 2) return fail(Errc::internal, fmt::format("weights({}): W1 or W2 only", which));
  if (layout == WeightLayout::mapped) layout = WeightLayout::plain;  // read through a tensor map: the plain copy
  DeviceBuffer& slot = (which == 1 ? w1_ : w2_)[int(layout)];
  if (layout != WeightLayout::plain && !slot.ptr()) {
    const Problem& p = workload_->problem;
    const long long rows = which == 1 ? (long long)p.experts * 2 * p.inter : (long long)p.experts * p.hidden;
    const long long cols = which == 1 ? p.hidden : p.inter;
    std::vector<std::uint16_t> pairs;  // fp8: the codes as 16-bit byte pairs (weight_layout.hpp arranges them so)
    if (p.fp8()) {
      const auto& q = which == 1 ? workload_->w1q : workload_->w2q;
      pairs.resize(q.size() / 2);
      std::memcpy(pairs.data(), q.data(), q.size());
    }
    const auto arranged = FT_TRY(arrange_weights_host(p.fp8() ? pairs : which == 1 ? workload_->w1 : workload_->w2, rows,
                                                      p.fp8() ? cols / 2 : cols, layout));
    slot = FT_TRY(upload_bytes(*device_, arranged.data(), arranged.size() * 2));
    at(table_, weight_buffer(which, layout)) = slot.ptr();
  }
  return slot.ptr();
}

Result<LayerResult> run_layer(DeviceWorkload& dw, const RoleKernels& kernels, const LayerPlan& plan,
                              const LayerRunOptions& options) {
  Device& d = dw.device();
  const Workload& w = dw.workload();
  const Problem& p = w.problem;
  LayerProgram prog = FT_TRY(build_program(plan.recipe(p), w.tokens));
  if (options.edit_program) options.edit_program(prog);
  const auto fns = FT_TRY(bind(prog, kernels));
  FT_CHECK(prepare(d, prog, fns));
  (void)FT_TRY(dw.weights(1, plan.stage1.contract().weights));
  (void)FT_TRY(dw.weights(2, plan.stage2.contract().weights));
  const BufferTable& table = dw.table();
  FT_CHECK(check_buffers(prog, table));
  const std::size_t T = std::size_t(w.tokens), H = std::size_t(p.hidden), I = std::size_t(p.inter), k = std::size_t(p.topk);
  const std::size_t rows = std::size_t(prog.max_padded_rows), blocks = rows / std::size_t(prog.align_block);
  const StreamHandle s = options.stream;

  // Poison what the kernels must write (NaN in both 16-bit types and in fp32),
  // so an element no kernel wrote fails the comparison; the program clears
  // what it accumulates into.
  FT_CHECK(d.memset_u32(dw.y.ptr(), 0xffffffffu, T * H / 2, s));
  FT_CHECK(d.memset_u32(dw.inter.ptr(), 0xffffffffu, T * k * I / 2, s));
  FT_CHECK(d.memset_u32(dw.sorted_ids.ptr(), 0, rows, s));
  FT_CHECK(d.memset_u32(dw.block_experts.ptr(), 0, blocks, s));
  FT_CHECK(d.memset_u32(dw.y_acc.ptr(), 0xffffffffu, T * k * H, s));
  FT_CHECK(d.memset_u32(dw.bad_ids.ptr(), 0xffffffffu, 1, s));
  // Spent tickets: a dynamic stage finds no tile unless the program clears them.
  FT_CHECK(d.memset_u32(dw.tile_tickets.ptr(), 0x40000000u, 2, s));
  if (p.fp8()) {
    FT_CHECK(d.memset_u32(dw.xq.ptr(), nan_codes(w.fp8_format), T * H / 4, s));
    FT_CHECK(d.memset_u32(dw.x_scales.ptr(), 0xffffffffu, dw.x_scales.bytes() / 4, s));
    FT_CHECK(d.memset_u32(dw.inter_q.ptr(), nan_codes(w.fp8_format), T * k * I / 4, s));
    FT_CHECK(d.memset_u32(dw.inter_scales.ptr(), 0xffffffffu, T * k * I / kScaleGroup, s));
  }
  FT_CHECK(execute(d, prog, fns, table, s));

  LayerResult r;
  r.y.resize(T * H);
  FT_CHECK(d.copy_to_host(r.y.data(), dw.y.ptr(), T * H * 2, s));
  FT_CHECK(d.copy_to_host(&r.padded_rows, dw.padded_rows.ptr(), 4, s));
  FT_CHECK(d.copy_to_host(&r.bad_ids, dw.bad_ids.ptr(), 4, s));
  if (options.read_intermediates) {
    r.inter.resize(T * k * I);
    r.sorted_ids.resize(rows);
    r.block_experts.resize(blocks);
    FT_CHECK(d.copy_to_host(r.inter.data(), dw.inter.ptr(), r.inter.size() * 2, s));
    FT_CHECK(d.copy_to_host(r.sorted_ids.data(), dw.sorted_ids.ptr(), r.sorted_ids.size() * 4, s));
    FT_CHECK(d.copy_to_host(r.block_experts.data(), dw.block_experts.ptr(), r.block_experts.size() * 4, s));
    if (p.fp8()) {
      r.inter_q.resize(T * k * I);
      r.inter_scales.resize(T * k * I / kScaleGroup);
      FT_CHECK(d.copy_to_host(r.inter_q.data(), dw.inter_q.ptr(), r.inter_q.size(), s));
      FT_CHECK(d.copy_to_host(r.inter_scales.data(), dw.inter_scales.ptr(), r.inter_scales.size() * 4, s));
    }
  }
  FT_CHECK(d.synchronize(s));
  return r;
}

Result<Comparison> verify_layer(DeviceWorkload& dw, const RoleKernels& kernels, const LayerPlan& plan,
                                const ReferenceOutput& reference) {
  const LayerResult r = FT_TRY(run_layer(dw, kernels, plan));
  if (r.bad_ids != 0)
    return fail(Errc::verify, fmt::format("the align kernel counted {} routing ids outside [-1, {})", r.bad_ids,
                                          dw.workload().problem.experts));
  return compare_output(r.y, reference.y, dw.workload().problem.dtype);
}

Result<AlignResult> run_align(DeviceWorkload& dw, const Target& target, const RoleKernels& align, int align_block,
                              AlignForm form) {
  Device& d = dw.device();
  const Workload& w = dw.workload();
  const LayerProgram prog = FT_TRY(build_align_program(target, w.problem, w.tokens, align_block, form));
  const auto fns = FT_TRY(bind(prog, align));
  FT_CHECK(prepare(d, prog, fns));
  const long long rows = prog.max_padded_rows;
  // Poison: -1 in sorted_ids / block_experts shows any row the kernel did not write.
  FT_CHECK(d.memset_u32(dw.sorted_ids.ptr(), 0xffffffffu, std::size_t(rows)));
  FT_CHECK(d.memset_u32(dw.block_experts.ptr(), 0xffffffffu, std::size_t(rows / align_block)));
  FT_CHECK(d.memset_u32(dw.padded_rows.ptr(), 0xffffffffu, 1));
  FT_CHECK(d.memset_u32(dw.bad_ids.ptr(), 0xffffffffu, 1));
  FT_CHECK(execute(d, prog, fns, dw.table(), {}));
  AlignResult r;
  FT_CHECK(d.copy_to_host(&r.padded_rows, dw.padded_rows.ptr(), 4));
  FT_CHECK(d.copy_to_host(&r.bad_ids, dw.bad_ids.ptr(), 4));
  if (r.padded_rows < 0 || r.padded_rows > rows || r.padded_rows % align_block != 0)
    return fail(Errc::verify, fmt::format("align wrote padded_rows = {} (capacity {}, align block {})", r.padded_rows, rows,
                                          align_block));
  r.sorted_ids.resize(std::size_t(r.padded_rows));
  r.block_experts.resize(std::size_t(r.padded_rows / align_block));
  FT_CHECK(d.copy_to_host(r.sorted_ids.data(), dw.sorted_ids.ptr(), r.sorted_ids.size() * 4));
  FT_CHECK(d.copy_to_host(r.block_experts.data(), dw.block_experts.ptr(), r.block_experts.size() * 4));
  FT_CHECK(d.synchronize());
  return r;
}

Result<std::vector<std::uint16_t>> run_shuffle(Device& d, FunctionHandle shuffle, std::span<const std::uint16_t> src,
                                               long long rows, long long cols, WeightLayout layout) {
  if (rows % 16 != 0 || cols % 8 != 0 || (long long)src.size() != rows * cols)
    return fail(Errc::invalid_input, fmt::format("weight shuffle of [{}, {}] with {} elements", rows, cols, src.size()));
  DeviceBuffer in = FT_TRY(upload_bytes(d, src.data(), src.size() * 2));
  DeviceBuffer out = FT_TRY(DeviceBuffer::allocate(d, src.size() * 2));
  FT_CHECK(d.memset_u32(out.ptr(), 0xffffffffu, src.size() / 2));
  ShuffleArgs args{device_pointer<const u16>(in.ptr()), device_pointer<u16>(out.ptr()), int(rows), int(cols), int(layout), 0};
  const LaunchShape s = shuffle_launch(rows, cols);
  FT_CHECK(d.launch(shuffle, Dim3{unsigned(s.grid_x), 1, 1}, Dim3{unsigned(s.block), 1, 1}, 0, {}, &args, sizeof args));
  std::vector<std::uint16_t> r(src.size());
  FT_CHECK(d.copy_to_host(r.data(), out.ptr(), r.size() * 2));
  FT_CHECK(d.synchronize());
  return r;
}

}  // namespace ft
