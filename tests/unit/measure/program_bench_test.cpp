// The benches' support kernels (measure/program_bench.hpp): loading the
// support unit puts every kernel of the operation's support rows
// (layer/support_kernels.def) that a step launches into the bench's role
// table, by the row's role and entry -- the fp8 rows for an e4m3 problem
// only -- and a program binds its own role kernels over them.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "measure/program_bench.hpp"
#include "tests/unit/export/fake_device.hpp"

namespace ft {
namespace {

// A FakeDevice whose units lack one entry.
class LackingDevice : public test::FakeDevice {
 public:
  LackingDevice(std::string arch, std::string lacks) : FakeDevice(std::move(arch)), lacks_(std::move(lacks)) {}
  Result<FunctionHandle> function(ModuleHandle m, const std::string& name) override {
    if (name == lacks_) return fail(Errc::not_found, "no " + name);
    return FakeDevice::function(m, name);
  }

 private:
  std::string lacks_;
};

// ProgramBench's support loading, reached through a bench that measures nothing.
class SupportOnly final : public ProgramBench {
 public:
  SupportOnly(const op::Operation& o, Device& d, const Problem& p, const Target& t) : ProgramBench(o, d, p, t) {}
  Status set_inputs(int, std::uint64_t, int) override { return fail(Errc::internal, "not measured"); }
  Result<ProgramCheck> verify(const LoadedProgram&) override { return fail(Errc::internal, "not measured"); }
  Result<ProgramTiming> time(const LoadedProgram&, const TimingOptions&) override { return fail(Errc::internal, "not measured"); }
  using ProgramBench::load_support;
  using ProgramBench::support_;
  using ProgramBench::with_support;
};

Problem problem(DType d) {
  Problem p;
  p.name = "t";
  p.experts = 8, p.hidden = 512, p.inter = 256, p.topk = 2, p.dtype = d;
  return p;
}

struct Row {
  const char* label;
  const op::Operation& (*operation)();
  const char* target;
  DType dtype;
  std::map<Role, Support> expected;  // every filled slot and the support row it holds
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r{
      {"forward_bf16_gfx942", op::moe_forward, "gfx942", DType::bf16,
       {{Role::align, Support::align}, {Role::reduce_atomic, Support::reduce_atomic},
        {Role::reduce_partials, Support::reduce_partials}, {Role::reduce_partials16, Support::reduce_partials16},
        {Role::align_count, Support::align_count}, {Role::align_scatter, Support::align_scatter}}},
      {"forward_e4m3_sm90a", op::moe_forward, "sm_90a", DType::e4m3,
       {{Role::align, Support::align}, {Role::reduce_atomic, Support::reduce_atomic},
        {Role::reduce_partials, Support::reduce_partials}, {Role::reduce_partials16, Support::reduce_partials16},
        {Role::align_count, Support::align_count}, {Role::align_scatter, Support::align_scatter},
        {Role::quantise_x, Support::quantise_x}, {Role::quantise_inter, Support::quantise_inter}}},
      {"backward_f16_sm90a", op::moe_backward, "sm_90a", DType::f16,
       {{Role::align, Support::align}, {Role::align_count, Support::align_count},
        {Role::align_scatter, Support::align_scatter}}},
  };
  return r;
}

class BenchSupport : public ::testing::TestWithParam<Row> {};

TEST_P(BenchSupport, EveryStepSupportKernelSitsInItsRolesSlot) {
  const Row& row = GetParam();
  const Target& t = *find_target(row.target);
  const Problem p = problem(row.dtype);
  test::FakeDevice dev(row.target);
  SupportOnly bench(row.operation(), dev, p, t);
  ASSERT_TRUE(bench.load_support(std::vector<std::byte>(16)));
  for (std::size_t i = 0; i < kRoleCount; ++i) {
    const Role r = Role(i);
    const FunctionHandle f = bench.support_.of(r);
    const auto want = row.expected.find(r);
    if (want == row.expected.end()) {
      EXPECT_EQ(f.p, nullptr) << to_string(r) << " should hold no support kernel";
      continue;
    }
    ASSERT_NE(f.p, nullptr) << to_string(r);
    EXPECT_EQ(dev.symbols.at(reinterpret_cast<std::size_t>(f.p) - 1), support_entry(want->second, t, p.dtype))
        << to_string(r);
  }
}

// A program's role kernels go over the support table; its empty slots keep
// the support kernels; and the support table itself is unchanged.
TEST_P(BenchSupport, AProgramsKernelsGoOverTheSupportKernels) {
  const Row& row = GetParam();
  test::FakeDevice dev(row.target);
  SupportOnly bench(row.operation(), dev, problem(row.dtype), *find_target(row.target));
  ASSERT_TRUE(bench.load_support(std::vector<std::byte>(16)));
  RoleKernels program;
  const FunctionHandle mine{reinterpret_cast<void*>(std::size_t(1) << 20)};
  program.of(Role::align) = mine;
  program.of(Role::stage1) = mine;
  const RoleKernels k = bench.with_support(program);
  EXPECT_EQ(k.of(Role::align).p, mine.p);
  EXPECT_EQ(k.of(Role::stage1).p, mine.p);
  EXPECT_NE(bench.support_.of(Role::align).p, mine.p);
  for (std::size_t i = 0; i < kRoleCount; ++i) {
    if (Role(i) == Role::align || Role(i) == Role::stage1) continue;
    EXPECT_EQ(k.by_role[i].p, bench.support_.by_role[i].p) << to_string(Role(i));
  }
}

// A unit without one of the step kernels the bench needs is refused, naming it.
TEST_P(BenchSupport, AUnitLackingAStepKernelIsRefused) {
  const Row& row = GetParam();
  const Target& t = *find_target(row.target);
  const Problem p = problem(row.dtype);
  for (const auto& [role, support] : row.expected) {
    LackingDevice dev(row.target, support_entry(support, t, p.dtype));
    SupportOnly bench(row.operation(), dev, p, t);
    auto m = bench.load_support(std::vector<std::byte>(16));
    ASSERT_FALSE(m) << to_string(role);
    EXPECT_EQ(m.error().code, Errc::not_found);
    EXPECT_NE(m.error().message.find(support_entry(support, t, p.dtype)), std::string::npos) << m.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, BenchSupport, ::testing::ValuesIn(rows()),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace ft
