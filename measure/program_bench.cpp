#include "measure/program_bench.hpp"

#include <fmt/format.h>

#include "measure/backward_bench.hpp"
#include "measure/layer_bench.hpp"

namespace ft {

ProgramCheck program_check(const Comparison& c, int row_length) {
  return {c.passed, c.rel_l2, c.max_abs, c.summary(std::size_t(row_length))};
}

ProgramBench::ProgramBench(const op::Operation& o, Device& dev, const Problem& p, const Target& t)
    : operation_(o), dev_(dev), problem_(p), target_(t) {}

ProgramBench::~ProgramBench() {
  for (ModuleHandle m : modules_) (void)dev_.unload_module(m);
}

Result<FunctionHandle> ProgramBench::load(std::span<const std::byte> code_object, const std::string& entry, int lds_bytes) {
  ModuleHandle m = FT_TRY(dev_.load_module(code_object));
  modules_.push_back(m);
  FunctionHandle f = FT_TRY(dev_.function(m, entry));
  if (lds_bytes > 0) FT_CHECK(dev_.set_dynamic_shared(f, lds_bytes));
  return f;
}

Result<ModuleHandle> ProgramBench::load_support(std::span<const std::byte> support) {
  ModuleHandle m = FT_TRY(dev_.load_module(support));
  modules_.push_back(m);
  if (auto f = dev_.function(m, support_entry(Support::fill, target_, problem_.dtype))) fill_ = *f;
  for (Support s : operation_.support) {
    const SupportInfo& info = support_info(s);
    if (!info.role || (info.presence == SupportPresence::fp8 && !problem_.fp8())) continue;
    support_.of(*info.role) = FT_TRY(dev_.function(m, support_entry(s, target_, problem_.dtype)));
  }
  return m;
}

RoleKernels ProgramBench::with_support(const RoleKernels& roles) const {
  RoleKernels k = support_;
  for (std::size_t i = 0; i < kRoleCount; ++i)
    if (roles.by_role[i].p) k.by_role[i] = roles.by_role[i];
  return k;
}

Status ProgramBench::check_recipe(const LayerRecipe& r) const {
  if (r.target != &target_ || r.problem.key() != problem_.key())
    return fail(Errc::invalid_input, "the recipe is of another target or problem than the bench");
  return {};
}

Status ProgramBench::inject_fault() {
  if (!fill_.p) return fail(Errc::not_found, "the support unit has no fill kernel to fault with");
  FillArgs a{device_pointer<u16>(0x10), std::uint64_t(1) << 24, 1, 1.0f, 0};  // page zero: never mapped
  const LaunchShape s = fill_launch(a.count);
  FT_CHECK(dev_.launch(fill_, Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}, Dim3{unsigned(s.block), 1, 1},
                       s.lds_bytes, {}, &a, sizeof a));
  return dev_.synchronize();
}

namespace {

// The bench table: one row per operation of the registry that has a bench.
struct BenchRow {
  const op::Operation& (*operation)();
  Result<std::unique_ptr<ProgramBench>> (*open)(Device& dev, const Problem& p, const Target& t,
                                                std::span<const std::byte> support, int max_tokens);
};

template <class Bench>
Result<std::unique_ptr<ProgramBench>> as_program_bench(Result<std::unique_ptr<Bench>> b) {
  if (!b) return std::unexpected(b.error());
  return std::unique_ptr<ProgramBench>(std::move(*b));
}

const BenchRow kBenches[] = {
    {&op::moe_forward,
     [](Device& d, const Problem& p, const Target& t, std::span<const std::byte> s, int max_tokens) {
       return as_program_bench(LayerBench::create(d, p, t, s, max_tokens));
     }},
    {&op::moe_backward,
     [](Device& d, const Problem& p, const Target& t, std::span<const std::byte> s, int) {
       return as_program_bench(BackwardBench::create(d, p, t, s));  // sized per program run
     }},
};

}  // namespace

Result<std::unique_ptr<ProgramBench>> open_program_bench(const op::Operation& o, Device& dev, const Problem& problem,
                                                         const Target& target, std::span<const std::byte> support,
                                                         int max_tokens) {
  for (const BenchRow& row : kBenches)
    if (&row.operation() == &o) return row.open(dev, problem, target, support, max_tokens);
  return fail(Errc::invalid_input, fmt::format("the operation {} has no bench", o.name));
}

}  // namespace ft
