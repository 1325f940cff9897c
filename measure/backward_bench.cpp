#include "measure/backward_bench.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "layer/backward.hpp"
#include "layer/device_structs.hpp"
#include "layer/operation.hpp"
#include "measure/workload/backward_reference.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

constexpr std::uint32_t kPoison = 0xffffffffu;  // an fp32 NaN, two 16-bit NaNs

template <class T>
Result<DeviceBuffer> upload(Device& dev, const std::vector<T>& v, std::size_t bytes) {
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(dev, std::max<std::size_t>({16, bytes, v.size() * sizeof(T)})));
  if (!v.empty()) FT_CHECK(dev.copy_to_device(b.ptr(), v.data(), v.size() * sizeof(T)));
  return b;
}

}  // namespace

RoutedCheck check_d_gate_up(std::span<const std::uint16_t> got, const std::vector<float>& ref,
                            std::span<const std::int32_t> topk_ids, const Problem& problem) {
  const std::size_t row = 2 * std::size_t(problem.inter);
  std::vector<std::uint16_t> routed;
  std::vector<float> routed_ref;
  RoutedCheck out;
  for (std::size_t q = 0; q < topk_ids.size(); ++q) {
    const bool is_routed = topk_ids[q] >= 0 && topk_ids[q] < problem.experts;
    for (std::size_t i = q * row; i < (q + 1) * row; ++i) {
      if (is_routed) {
        routed.push_back(got[i]);
        routed_ref.push_back(ref[i]);
      } else if (got[i] != 0xffffu) {
        ++out.unrouted_written;
      }
    }
  }
  out.routed = compare_output(routed, routed_ref, problem.dtype);
  return out;
}

const std::vector<float>& reference_gradient(Buf b, const MoeGradients<float>& ref) {
  switch (b) {
    case Buf::d_weights: return ref.dweights;
    case Buf::dx: return ref.dx;
    case Buf::dw1:
    case Buf::dw1_16: return ref.dw1;
    case Buf::dw2:
    case Buf::dw2_16: return ref.dw2;
    default: break;
  }
  return ref.d_gate_up;
}

// The host side of the current inputs; their reference once a verification needs it.
struct BackwardBench::State {
  Workload w;
  std::vector<std::uint16_t> dy;
  // The fp32 CPU backward and the saved tensors rounded from it: made by the
  // first verify() of these inputs (ensure_reference), never for timing (at
  // Mixtral's 4096 tokens it is ~6 TFLOP of CPU loops).
  bool referenced = false;
  std::vector<std::uint16_t> gate_up, inter;
  MoeGradients<float> ref;
  Tolerance dweights_tol;  // routed_weight_tolerance of ref.dweights
  // Timing's saved tensors without a reference: the support unit's
  // forward_saved on the device, once per inputs (at the program's sizes).
  DeviceBuffer saved_gate_up, saved_inter;
  FunctionHandle forward_saved;
};

bool BackwardCheck::passed() const {
  return unrouted_written == 0 && !buffers.empty() &&
         std::ranges::all_of(buffers, [](const auto& b) { return b.second.passed; });
}

const Comparison& BackwardCheck::worst() const {
  const auto* w = &buffers.front();
  for (const auto& b : buffers)
    if ((!b.second.passed && w->second.passed) || (b.second.passed == w->second.passed && b.second.rel_l2 > w->second.rel_l2))
      w = &b;
  return w->second;
}

std::string BackwardCheck::summary() const {
  if (buffers.empty()) return "no buffer checked";
  const Comparison& c = worst();
  auto it = std::ranges::find_if(buffers, [&](const auto& b) { return &b.second == &c; });
  std::string s = fmt::format("{}: {}", to_string(it->first), c.summary());
  if (unrouted_written) s += fmt::format("; {} d_gate_up element(s) of unrouted pairs written", unrouted_written);
  return s;
}

BackwardBench::BackwardBench(Device& dev, const Problem& p, const Target& t)
    : ProgramBench(op::moe_backward(), dev, p, t), state_(std::make_unique<State>()) {}

BackwardBench::~BackwardBench() = default;

int BackwardBench::tokens() const { return state_->w.tokens; }
bool BackwardBench::has_reference() const { return state_->referenced; }

Result<std::unique_ptr<BackwardBench>> BackwardBench::create(Device& dev, const Problem& p, const Target& target,
                                                             std::span<const std::byte> support) {
  if (p.fp8()) return fail(Errc::invalid_input, "the backward has no fp8 kernels; give a bf16 or f16 problem");
  std::unique_ptr<BackwardBench> b(new BackwardBench(dev, p, target));
  ModuleHandle m = FT_TRY(b->load_support(support));
  if (auto f = dev.function(m, support_entry(Support::forward_saved, target, p.dtype))) b->state_->forward_saved = *f;  // timing's saved tensors (absent: refused there)
  b->flush_ = FT_TRY(L2Flush::create(dev));
  return b;
}

Status BackwardBench::set_inputs(int tokens, std::uint64_t seed, int empty_experts) {
  State& s = *state_;
  WorkloadOptions o;
  o.seed = seed;
  o.empty_experts = empty_experts;
  s.w = FT_TRY(make_workload(problem_, tokens, o));
  s.dy.clear();
  for (std::size_t i = 0; i < std::size_t(tokens) * std::size_t(problem_.hidden); ++i)
    s.dy.push_back(f32_to_half(problem_.dtype, random_normal(seed ^ 0x6479u, i)));  // "dy"
  s.referenced = false;
  s.ref = {};
  s.gate_up.clear();
  s.inter.clear();
  s.saved_gate_up = {};
  s.saved_inter = {};
  return {};
}

void BackwardBench::ensure_reference() {
  State& s = *state_;
  if (s.referenced) return;
  const DType d = problem_.dtype;
  std::vector<float> dy(s.dy.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = half_to_f32(d, s.dy[i]);
  const MoeInputs<float> in = decoded_inputs(s.w);
  s.ref = moe_backward(in, std::span<const float>(dy));
  s.dweights_tol = routed_weight_tolerance(d, s.ref.dweights, routed_weight_terms(in, dy, s.ref.inter));
  for (float v : s.ref.gate_up) s.gate_up.push_back(f32_to_half(d, v));
  for (float v : s.ref.inter) s.inter.push_back(f32_to_half(d, v));
  s.referenced = true;
}

namespace {

// A program's buffers on the device: inputs uploaded, the rest poisoned.
struct Bound {
  std::map<Buf, DeviceBuffer> held;
  BufferTable table{};
};

// The program of a recipe at the current T, its functions and its buffers.
struct Prepared {
  LayerProgram prog;
  std::vector<FunctionHandle> fns;
  Bound bound;
};

// Without a reference (timing): the saved tensors by forward_saved from the
// uploaded X, routing and W1, into s's buffers once per inputs; the
// program's buffers point at them (no step writes them).
Status saved_on_device(Device& dev, const Problem& p, BackwardBench::State& s, const LayerProgram& prog,
                       const BufferTable& inputs) {
  if (s.saved_gate_up.ptr()) return {};
  if (!s.forward_saved.p)
    return fail(Errc::not_found, "the support unit has no forward_saved kernel to make the saved tensors for timing");
  s.saved_gate_up = FT_TRY(DeviceBuffer::allocate(dev, std::max<std::size_t>(16, std::size_t(prog.bytes[std::size_t(Buf::saved_gate_up)]))));
  s.saved_inter = FT_TRY(DeviceBuffer::allocate(dev, std::max<std::size_t>(16, std::size_t(prog.bytes[std::size_t(Buf::saved_inter)]))));
  SavedArgs a{device_pointer<const u16>(at(inputs, Buf::x)), device_pointer<const i32>(at(inputs, Buf::topk_ids)),
              device_pointer<const u16>(at(inputs, Buf::w1)), device_pointer<u16>(s.saved_gate_up.ptr()),
              device_pointer<u16>(s.saved_inter.ptr()), s.w.tokens, p.hidden, p.inter, p.experts, p.topk, 0};
  const LaunchShape l = reference_launch(StageRole::stage1, p, s.w.tokens);
  FT_CHECK(dev.launch(s.forward_saved, Dim3{unsigned(l.grid_x), unsigned(l.grid_y), unsigned(l.grid_z)},
                      Dim3{unsigned(l.block), 1, 1}, l.lds_bytes, {}, &a, sizeof a));
  return dev.synchronize();
}

// d_gate_up as the input of a program without dgrad2: the reference's, or
// (timing) seeded normal values of the same order.
std::vector<std::uint16_t> d_gate_up_input(const Problem& p, const BackwardBench::State& s) {
  std::vector<std::uint16_t> out;
  if (s.referenced) {
    for (float v : s.ref.d_gate_up) out.push_back(f32_to_half(p.dtype, v));
    return out;
  }
  const std::size_t n = std::size_t(s.w.tokens) * std::size_t(p.topk) * 2 * std::size_t(p.inter);
  for (std::size_t i = 0; i < n; ++i) out.push_back(f32_to_half(p.dtype, 0.01f * random_normal(s.w.seed ^ 0x6467u, i)));
  return out;
}

// Whether a run leaves buffer b unbound: the form of the weight gradients not
// asked for (dw1_16, dw2_16 for fp32; dw1, dw2 for 16 bits: the kernel then
// writes only c16, the program's check_buffers accepting either).
bool unbound(Buf b, WeightGrads g) {
  return g == WeightGrads::f32 ? op::stands_in(b) : op::written_instead(b).has_value();
}

Result<Prepared> prepare_run(Device& dev, const Problem& p, const LayerRecipe& r, const RoleKernels& k,
                             BackwardBench::State& s, WeightGrads grads) {
  if (s.w.tokens == 0) return fail(Errc::internal, "the backward bench has no inputs yet (set_inputs)");
  const Workload& w = s.w;
  Prepared out;
  out.prog = FT_TRY(build_backward_program(r, w.tokens));
  out.fns = FT_TRY(bind(out.prog, k));
  FT_CHECK(prepare(dev, out.prog, out.fns));
  // d_gate_up is an input of a program without dgrad2 (dgrad1 or wgrad1 alone).
  const bool has_dgrad2 = std::ranges::any_of(r.grad, [](const GradStage& g) { return g.role == Role::dgrad2; });
  std::vector<std::uint16_t> d_gate_up;
  if (!has_dgrad2) d_gate_up = d_gate_up_input(p, s);
  for (std::size_t i = 0; i < kBufCount; ++i) {
    const std::size_t bytes = std::size_t(out.prog.bytes[i]);
    if (!bytes) continue;
    const Buf b = Buf(i);
    if (!s.referenced && (b == Buf::saved_gate_up || b == Buf::saved_inter)) continue;  // after the inputs, below
    if (unbound(b, grads)) continue;
    DeviceBuffer buf;
    switch (b) {
      case Buf::x: buf = FT_TRY(upload(dev, w.x, bytes)); break;
      case Buf::topk_ids: buf = FT_TRY(upload(dev, w.topk_ids, bytes)); break;
      case Buf::topk_weights: buf = FT_TRY(upload(dev, w.topk_weights, bytes)); break;
      case Buf::w1: buf = FT_TRY(upload(dev, w.w1, bytes)); break;
      case Buf::w2: buf = FT_TRY(upload(dev, w.w2, bytes)); break;
      case Buf::dy: buf = FT_TRY(upload(dev, s.dy, bytes)); break;
      case Buf::saved_gate_up: buf = FT_TRY(upload(dev, s.gate_up, bytes)); break;
      case Buf::saved_inter: buf = FT_TRY(upload(dev, s.inter, bytes)); break;
      default: {
        if (b == Buf::d_gate_up && !has_dgrad2) {
          buf = FT_TRY(upload(dev, d_gate_up, bytes));
          break;
        }
        buf = FT_TRY(DeviceBuffer::allocate(dev, bytes));
        const bool rows = b == Buf::sorted_ids || b == Buf::block_experts;
        FT_CHECK(dev.memset_u32(buf.ptr(), rows ? 0u : kPoison, bytes / 4));
      }
    }
    out.bound.table[i] = buf.ptr();
    out.bound.held.emplace(b, std::move(buf));
  }
  if (!s.referenced) {
    FT_CHECK(saved_on_device(dev, p, s, out.prog, out.bound.table));
    out.bound.table[std::size_t(Buf::saved_gate_up)] = s.saved_gate_up.ptr();
    out.bound.table[std::size_t(Buf::saved_inter)] = s.saved_inter.ptr();
  }
  FT_CHECK(check_buffers(out.prog, out.bound.table));
  return out;
}

}  // namespace

Result<BackwardCheck> BackwardBench::check(const LoadedProgram& p) {
  FT_CHECK(check_recipe(p.recipe));
  if (state_->w.tokens) ensure_reference();
  const State& s = *state_;
  const LayerRecipe& r = p.recipe;
  Prepared run = FT_TRY(prepare_run(dev_, problem_, r, with_support(p.kernels), *state_, weight_grads_));
  FT_CHECK(execute(dev_, run.prog, run.fns, run.bound.table, {}));
  FT_CHECK(dev_.synchronize());

  BackwardCheck check;
  const DType d = problem_.dtype;
  for (const GradStage& g : r.grad)
    for (Buf b : op::moe_backward().grad_role(g.role)->writes()) {
      if (unbound(b, weight_grads_)) continue;  // the other form of dW1, dW2 (prepare_run)
      const DevicePtr p = at(run.bound.table, b);
      if (op::stands_in(b)) {  // dw1_16, dw2_16: the 16-bit type, every element against the fp32 reference
        const std::vector<float>& ref = reference_gradient(b, s.ref);
        std::vector<std::uint16_t> got(ref.size());
        FT_CHECK(dev_.copy_to_host(got.data(), p, got.size() * 2));
        check.buffers.emplace_back(b, compare_output(got, ref, d));
        continue;
      }
      if (b != Buf::d_gate_up) {
        std::vector<float> v(reference_gradient(b, s.ref).size());
        FT_CHECK(dev_.copy_to_host(v.data(), p, v.size() * 4));
        const Tolerance tol = b == Buf::d_weights ? s.dweights_tol : tolerance_for(d);
        check.buffers.emplace_back(b, compare_values(v, reference_gradient(b, s.ref), tol));
        continue;
      }
      std::vector<std::uint16_t> got(s.ref.d_gate_up.size());
      FT_CHECK(dev_.copy_to_host(got.data(), p, got.size() * 2));
      const RoutedCheck rc = check_d_gate_up(got, s.ref.d_gate_up, s.w.topk_ids, problem_);
      check.buffers.emplace_back(b, rc.routed);
      check.unrouted_written += rc.unrouted_written;
    }
  return check;
}

Result<ProgramCheck> BackwardBench::verify(const LoadedProgram& p) {
  const BackwardCheck c = FT_TRY(check(p));
  const Comparison worst = c.buffers.empty() ? Comparison{} : c.worst();
  return ProgramCheck{c.passed(), worst.rel_l2, worst.max_abs, c.summary()};
}

namespace {

// The parts of a timed backward program: "support" (the align and the
// clears, each repetition's sum) first, then each GEMM role's step by its
// role's name, in the program's order.
std::vector<std::pair<std::string, Timing>> step_parts(const std::vector<Step>& steps,
                                                        const std::vector<std::vector<double>>& samples) {
  const std::size_t reps = samples.empty() ? 0 : samples.front().size();
  std::vector<double> support(reps, 0.0);
  std::vector<std::pair<std::string, Timing>> roles;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].op == Step::Op::launch && is_backward(steps[i].role)) {
      roles.emplace_back(std::string(to_string(steps[i].role)), summarize(samples[i]));
      continue;
    }
    for (std::size_t r = 0; r < reps; ++r) support[r] += samples[i][r];
  }
  roles.insert(roles.begin(), {"support", summarize(std::move(support))});
  return roles;
}

}  // namespace

Result<ProgramTiming> BackwardBench::time(const LoadedProgram& p, const TimingOptions& opt) {
  if (opt.graph) return fail(Errc::invalid_input, "the moe_backward program is timed by direct launches, not as a graph");
  FT_CHECK(check_recipe(p.recipe));
  Prepared run = FT_TRY(prepare_run(dev_, problem_, p.recipe, with_support(p.kernels), *state_, weight_grads_));
  const std::vector<Step>& steps = run.prog.steps;
  const MarkedTiming t = FT_TRY(time_marked_runs(dev_, opt, &flush_, steps.size() + 1, [&](std::span<const EventHandle> marks) {
    return execute(dev_, run.prog, run.fns, run.bound.table, {}, {.marks = marks});
  }));
  return ProgramTiming{t.total, step_parts(steps, t.intervals)};
}

}  // namespace ft
