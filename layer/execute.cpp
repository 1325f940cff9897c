#include "layer/execute.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "layer/backward.hpp"
#include "layer/operation.hpp"

namespace ft {
namespace {

// The buffer a launch step reads for a row of the table: a weights row is
// the copy the step names (Step::w1 / w2); a copy row is bound through its
// weights row.
Buf step_buffer(const Step& s, Buf b) { return b == Buf::w1 ? s.w1 : b == Buf::w2 ? s.w2 : b; }

// The pointer fields of a launch step's argument, from the table: each row
// of layer/buffers.def into its member (the backward's rows: StepArgs').
StepArgs bound_args(const Step& s, const BufferTable& t) {
  StepArgs a{};
  static_cast<MoeArgs&>(a) = s.args;
#define FT_BUFFER(name, member, pointee, place, meaning, size) \
  if (BufPlace::place != BufPlace::copy) a.member = device_pointer<pointee>(at(t, step_buffer(s, Buf::name)));
#include "layer/buffers.def"
#undef FT_BUFFER
  return a;
}

// What to tell a caller who passed no copy of the weights in a layout.
std::string missing_hint(Buf b) {
  switch (b) {
    case Buf::w1_shuffled:
    case Buf::w2_shuffled:
      return fmt::format("{} (a stage reads pre-shuffled weights: arrange them once with the shuffled layout)", to_string(b));
    case Buf::w1_tiled:
    case Buf::w2_tiled:
      return fmt::format("{} (a stage reads tiled weights: arrange them once with the tiled layout)", to_string(b));
    case Buf::x_scale: return "x_scale (an fp8 layer with per-tensor or static scales: the static activation scale, [1] fp32)";
    case Buf::inter_scale: return "inter_scale (an fp8 layer with static scales: the static intermediate scale, [1] fp32)";
    case Buf::w1_scales:
    case Buf::w2_scales: return fmt::format("{} (an fp8 layer's weight scales)", to_string(b));
    default: return std::string(to_string(b));
  }
}

}  // namespace

Result<std::vector<FunctionHandle>> bind(const LayerProgram& p, const RoleKernels& k) {
  std::vector<FunctionHandle> out(p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    if (s.op != Step::Op::launch) continue;
    out[i] = k.of(s.role);
    if (!out[i].p) return fail(Errc::internal, fmt::format("layer program: no {} kernel was loaded for step {}", to_string(s.role), s.name));
  }
  return out;
}

Status prepare(Device& d, const LayerProgram& p, std::span<const FunctionHandle> functions) {
  for (std::size_t i = 0; i < p.steps.size() && i < functions.size(); ++i)
    if (p.steps[i].op == Step::Op::launch && p.steps[i].shape.lds_bytes > 0)
      FT_CHECK(d.set_dynamic_shared(functions[i], p.steps[i].shape.lds_bytes));
  return {};
}

Status check_buffers(const LayerProgram& p, const BufferTable& buffers) {
  std::string missing;
  for (std::size_t i = 0; i < kBufCount; ++i) {
    const Buf b = Buf(i);
    if (buffer_info(b).place == BufPlace::optional || !p.bytes[i] || buffers[i]) continue;
    if (const auto instead = op::written_instead(b); instead && buffers[std::size_t(*instead)]) continue;  // dw1_16 for dw1
    missing += (missing.empty() ? "" : ", ") + missing_hint(b);
  }
  if (!missing.empty()) return fail(Errc::usage, "null layer buffers: " + missing);
  return {};
}

Status execute(Device& d, const LayerProgram& p, std::span<const FunctionHandle> functions, const BufferTable& buffers,
               StreamHandle stream, const ExecuteOptions& o) {
  if (functions.size() != p.steps.size())
    return fail(Errc::internal, fmt::format("layer program: {} functions bound for {} steps", functions.size(), p.steps.size()));
  const std::size_t last = std::min(o.last, p.steps.size());
  if (!o.marks.empty() && o.marks.size() != last - std::min(o.first, last) + 1)
    return fail(Errc::internal, "layer program: one mark per step run plus one");
  std::size_t mark = 0;
  for (std::size_t i = o.first; i < last; ++i) {
    if (!o.marks.empty()) FT_CHECK(d.record(o.marks[mark++], stream));
    const Step& s = p.steps[i];
    if (s.op == Step::Op::memset_u32) {
      FT_CHECK(d.memset_u32(at(buffers, s.buffer), s.value, s.count, stream));
      continue;
    }
    const LaunchShape& g = s.shape;
    if (g.grid_x <= 0 || g.grid_y <= 0 || g.grid_z <= 0) continue;
    const StepArgs a = bound_args(s, buffers);
    const MoeArgs& moe = a;  // a forward kernel's argument
    const BackwardKernelArgs grad = is_backward(s.role) ? backward_kernel_args(s.role, a) : BackwardKernelArgs{};
    const void* bytes = is_backward(s.role) ? grad.data() : &moe;
    std::size_t size = is_backward(s.role) ? grad.size() : sizeof moe;
    MappedMoeArgs mapped{};
    if (s.weight_map) {  // the stage's weights through a tensor map, encoded for this launch's address
      TensorMapSpec spec = *s.weight_map;
      spec.base = at(buffers, s.role == Role::stage2 ? s.w2 : s.w1);
      const Status st = d.encode_tensor_map(spec, std::span<std::byte, kTensorMapBytes>(
                                                      reinterpret_cast<std::byte*>(mapped.weights.bytes), kTensorMapBytes));
      if (!st) return std::unexpected(with_context(st.error(), fmt::format("step {} ({}): the weights' tensor map", s.name, s.symbol)));
      mapped.moe = moe;
      bytes = &mapped, size = sizeof mapped;
    }
    const Status st = d.launch(functions[i], Dim3{unsigned(g.grid_x), unsigned(g.grid_y), unsigned(g.grid_z)},
                               Dim3{unsigned(g.block), 1, 1}, g.lds_bytes, stream, bytes, size);
    if (!st) return std::unexpected(with_context(st.error(), fmt::format("step {} ({})", s.name, s.symbol)));
  }
  if (!o.marks.empty()) FT_CHECK(d.record(o.marks[mark], stream));
  return {};
}

}  // namespace ft
