#include "layer/operation.hpp"

#include <array>

#include "generator/emitter.hpp"
#include "layer/backward.hpp"

namespace ft {
namespace {

#define FT_SUPPORT_ROLE_step(name) Role::name
#define FT_SUPPORT_ROLE_check(name) std::nullopt
constexpr std::array<SupportInfo, kSupportCount> kSupports{{
#define FT_SUPPORT(name, use, presence, entry, meaning) {#name, FT_SUPPORT_ROLE_##use(name), SupportPresence::presence, meaning},
#include "layer/support_kernels.def"
#undef FT_SUPPORT
}};
#undef FT_SUPPORT_ROLE_step
#undef FT_SUPPORT_ROLE_check

}  // namespace

const SupportInfo& support_info(Support s) { return kSupports[std::size_t(s)]; }
std::string_view to_string(Support s) { return support_info(s).name; }

std::optional<Support> parse_support(std::string_view name) {
  for (std::size_t i = 0; i < kSupportCount; ++i)
    if (kSupports[i].name == name) return Support(i);
  return std::nullopt;
}

std::string support_entry(Support s, const Target& t, DType d) {
  switch (s) {
#define FT_SUPPORT(name, use, presence, entry, meaning) \
  case Support::name: return entry;
#include "layer/support_kernels.def"
#undef FT_SUPPORT
  }
  return {};
}

std::optional<Support> support_of(Role r) {
  for (std::size_t i = 0; i < kSupportCount; ++i)
    if (kSupports[i].role == r) return Support(i);
  return std::nullopt;
}

namespace op {
namespace {

constexpr std::array<Stage, 2> kForwardStages{{
    {StageRole::stage1, "stage1", Role::stage1, Support::reference1,
     "gate and up GEMM over each expert's rows, the activation, the intermediate [T*k, I]"},
    {StageRole::stage2, "stage2", Role::stage2, Support::reference2,
     "down GEMM of the intermediate over each expert's rows, into Y's sums or per-slot partials"},
}};

// The forward's buffers: every row but the backward's, dy .. dw2 and the 16-bit
// weight gradients appended later (layer/buffers.def: the forward's rows appended
// between them follow).
constexpr bool backward_row(std::size_t i) {
  return (i >= std::size_t(Buf::dy) && i <= std::size_t(Buf::dw2)) || i == std::size_t(Buf::dw1_16) || i == std::size_t(Buf::dw2_16);
}
constexpr std::size_t kForwardBufCount = kBufCount - (std::size_t(Buf::dw2) - std::size_t(Buf::dy) + 1) - 2;
constexpr std::array<Buf, kForwardBufCount> kForwardBuffers = [] {
  std::array<Buf, kForwardBufCount> b{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (!backward_row(i)) b[n++] = Buf(i);
  return b;
}();

// Every row but the backward's forward_saved (the last).
constexpr std::size_t kForwardSupportCount = std::size_t(Support::forward_saved);
constexpr std::array<Support, kForwardSupportCount> kForwardSupport = [] {
  std::array<Support, kForwardSupportCount> s{};
  for (std::size_t i = 0; i < kForwardSupportCount; ++i) s[i] = Support(i);
  return s;
}();

const Operation kMoeForward{
    "moe_forward",
    "the routed-expert MoE layer's forward pass: align, stage 1, stage 2, reduce (fp8: the quantise steps)",
    kForwardStages,
    {},
    {},
    kForwardBuffers,
    kForwardSupport,
    &build_program,
};

// The backward's roles (docs/TRAINING.md, "Buffers of each backward kernel"):
// each pointer of a role's argument struct and the buffer it is bound to.
constexpr std::array<Binding, 6> kDgrad2Operands{{{Operand::a, Buf::dy},
                                                  {Operand::w, Buf::w2},
                                                  {Operand::scales, Buf::topk_weights},  // dH = w_p dY W2_e
                                                  {Operand::gate_up, Buf::saved_gate_up},
                                                  {Operand::d_gate_up, Buf::d_gate_up},
                                                  {Operand::d_weights, Buf::d_weights}}};
constexpr std::array<Binding, 3> kDgrad1Operands{{{Operand::a, Buf::d_gate_up}, {Operand::w, Buf::w1}, {Operand::dx, Buf::dx}}};
constexpr std::array<Binding, 5> kWgrad2Operands{{{Operand::a, Buf::dy},
                                                  {Operand::b, Buf::saved_inter},
                                                  {Operand::scales, Buf::topk_weights},  // the routed rows of dY, w_p dY_t
                                                  {Operand::c, Buf::dw2},
                                                  {Operand::c16, Buf::dw2_16}}};
constexpr std::array<Binding, 4> kWgrad1Operands{
    {{Operand::a, Buf::d_gate_up}, {Operand::b, Buf::x}, {Operand::c, Buf::dw1}, {Operand::c16, Buf::dw1_16}}};

constexpr std::array<GradRole, 4> kBackwardRoles{{
    {Role::dgrad2, BackwardOp::dgrad_swiglu, Extent::hidden, Extent::inter, kDgrad2Operands, true, false, Buf::d_weights,
     "stage-2 backward: (w dY) W2_e over each expert's rows, the SwiGLU backward into [dgate; dup], d(topk_weights)"},
    {Role::dgrad1, BackwardOp::dgrad_scatter, Extent::two_inter, Extent::hidden, kDgrad1Operands, false, false, Buf::dx,
     "stage-1 backward: [dgate; dup] W1_e scatter-added over the k slots into dX"},
    {Role::wgrad2, BackwardOp::wgrad, Extent::hidden, Extent::inter, kWgrad2Operands, true, false, std::nullopt,
     "dW2_e = (w dY)_e^T h_e, K-grouped over each expert's rows"},
    {Role::wgrad1, BackwardOp::wgrad, Extent::two_inter, Extent::hidden, kWgrad1Operands, false, true, std::nullopt,
     "dW1_e = [dgate; dup]_e^T X_e, K-grouped over each expert's rows"},
}};

// What a backward program may touch: X, the routing, the plain weights, the
// align's rows and the backward's own rows.
constexpr std::array<Buf, 19> kBackwardBuffers{
    Buf::x,         Buf::topk_ids,      Buf::topk_weights, Buf::w1,          Buf::w2,        Buf::sorted_ids,
    Buf::block_experts, Buf::padded_rows, Buf::bad_ids,    Buf::dy,          Buf::saved_gate_up, Buf::saved_inter,
    Buf::d_gate_up, Buf::d_weights,     Buf::dx,           Buf::dw1,         Buf::dw2,       Buf::dw1_16,
    Buf::dw2_16};
// It rebuilds the forward's sorted rows with the support unit's align.
// Its callers recompute the forward's saved tensors with forward_saved where their forward kept none.
constexpr std::array<Support, 4> kBackwardSupport{Support::align, Support::align_count, Support::align_scatter,
                                                  Support::forward_saved};

const Operation kMoeBackward{
    "moe_backward",
    "the MoE layer's backward pass: align, dgrad2, dgrad1, wgrad2, wgrad1 (dX, dW1, dW2, d(topk_weights) from dY)",
    {},
    kBackwardRoles,
    "moe_backward (measure/workload/backward_reference.hpp)",
    kBackwardBuffers,
    kBackwardSupport,
    &build_backward_program,
};

constexpr std::array<const Operation*, 2> kOperations{&kMoeForward, &kMoeBackward};

}  // namespace

const Stage* Operation::stage(StageRole role) const {
  for (const Stage& s : stages)
    if (s.role == role) return &s;
  return nullptr;
}

const Stage* Operation::find_stage(std::string_view stage_name) const {
  for (const Stage& s : stages)
    if (s.name == stage_name) return &s;
  return nullptr;
}

const GradRole* Operation::grad_role(Role launch) const {
  for (const GradRole& g : grad)
    if (g.launch == launch) return &g;
  return nullptr;
}

std::string_view to_string(Operand o) {
  switch (o) {
    case Operand::a: return "a";
    case Operand::b: return "b";
    case Operand::w: return "w";
    case Operand::scales: return "scales";
    case Operand::gate_up: return "gate_up";
    case Operand::d_gate_up: return "d_gate_up";
    case Operand::d_weights: return "d_weights";
    case Operand::dx: return "dx";
    case Operand::c: return "c";
    case Operand::c16: break;
  }
  return "c16";
}

bool is_output(Operand o) { return o >= Operand::d_gate_up; }

bool takes(BackwardOp gemm, Operand o) {
  const bool wgrad_operand = o == Operand::a || o == Operand::b || o == Operand::scales || o == Operand::c || o == Operand::c16;
  const bool dgrad_operand = o != Operand::b && o != Operand::c && o != Operand::c16;
  return gemm == BackwardOp::wgrad ? wgrad_operand : dgrad_operand;
}

std::vector<Buf> GradRole::reads() const {
  std::vector<Buf> out;
  for (const Binding& b : operands)
    if (!is_output(b.operand)) out.push_back(b.buffer);
  out.insert(out.end(), {Buf::sorted_ids, Buf::block_experts, Buf::padded_rows});
  return out;
}

std::vector<Buf> GradRole::writes() const {
  std::vector<Buf> out;
  for (const Binding& b : operands)
    if (is_output(b.operand)) out.push_back(b.buffer);
  return out;
}

std::optional<Buf> written_instead(Buf b) {
  for (const GradRole& g : kBackwardRoles) {
    const auto bound = [&](Operand o) -> std::optional<Buf> {
      for (const Binding& x : g.operands)
        if (x.operand == o) return x.buffer;
      return std::nullopt;
    };
    if (bound(Operand::c) == b) return bound(Operand::c16);
  }
  return std::nullopt;
}

bool stands_in(Buf b) {
  for (const GradRole& g : kBackwardRoles)
    for (const Binding& x : g.operands)
      if (x.operand == Operand::c16 && x.buffer == b) return true;
  return false;
}

int extent(Extent e, int hidden, int inter) {
  switch (e) {
    case Extent::hidden: return hidden;
    case Extent::inter: return inter;
    case Extent::two_inter: break;
  }
  return 2 * inter;
}

std::vector<RoleKernel> role_kernels(const LayerRecipe& r) {
  std::vector<RoleKernel> out;
  for (const Variant& v : r.stages) out.push_back({kMoeForward.stage(v.role)->launch, v.name(), v.lds_limit()});
  for (const GradStage& g : r.grad) out.push_back({g.role, g.kernel.name(), g.kernel.lds_bytes()});
  return out;
}

const Operation& operation_of(const LayerRecipe& r) { return r.grad.empty() ? kMoeForward : kMoeBackward; }

std::span<const Operation* const> operations() { return kOperations; }
const Operation& moe_forward() { return kMoeForward; }
const Operation& moe_backward() { return kMoeBackward; }

const Operation* find(std::string_view name) {
  for (const Operation* o : kOperations)
    if (o->name == name) return o;
  return nullptr;
}

}  // namespace op
}  // namespace ft
