#include "layer/operation.hpp"

#include <array>

#include "generator/emitter.hpp"

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

constexpr std::array<Buf, kBufCount> kForwardBuffers = [] {
  std::array<Buf, kBufCount> b{};
  for (std::size_t i = 0; i < kBufCount; ++i) b[i] = Buf(i);
  return b;
}();

constexpr std::array<Support, kSupportCount> kForwardSupport = [] {
  std::array<Support, kSupportCount> s{};
  for (std::size_t i = 0; i < kSupportCount; ++i) s[i] = Support(i);
  return s;
}();

const Operation kMoeForward{
    "moe_forward",
    "the routed-expert MoE layer's forward pass: align, stage 1, stage 2, reduce (fp8: the quantise steps)",
    kForwardStages,
    kForwardBuffers,
    kForwardSupport,
    &build_program,
};

constexpr std::array<const Operation*, 1> kOperations{&kMoeForward};

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

std::span<const Operation* const> operations() { return kOperations; }
const Operation& moe_forward() { return kMoeForward; }

const Operation* find(std::string_view name) {
  for (const Operation* o : kOperations)
    if (o->name == name) return o;
  return nullptr;
}

}  // namespace op
}  // namespace ft
