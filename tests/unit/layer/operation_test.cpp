// The operation registry (layer/operation.hpp) and its tables
// (layer/buffers.def, layer/support_kernels.def): the forward layer is the
// first row with the roles, buffers and support kernels it had before the
// registry, and every table row is reachable by its name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "generator/emitter.hpp"
#include "layer/backward.hpp"
#include "layer/operation.hpp"
#include "manifest/manifest.hpp"

namespace ft {
namespace {

TEST(Operation, TheForwardLayerIsTheFirstRowWithBothStagesInOrder) {
  ASSERT_FALSE(op::operations().empty());
  const op::Operation& f = op::moe_forward();
  EXPECT_EQ(op::operations().front(), &f);
  EXPECT_EQ(op::find("moe_forward"), &f);
  EXPECT_EQ(op::find("moe_sideways"), nullptr);
  ASSERT_EQ(f.stages.size(), 2u);
  EXPECT_EQ(f.stages[0].role, StageRole::stage1);
  EXPECT_EQ(f.stages[1].role, StageRole::stage2);
  for (const op::Stage& s : f.stages) {
    EXPECT_EQ(s.name, fmt::format("stage{}", int(s.role) + 1)) << "the manifest's key of the role";
    EXPECT_EQ(f.stage(s.role), &s);
    EXPECT_EQ(f.find_stage(s.name), &s);
    EXPECT_EQ(to_string(s.launch), s.name) << "the step that runs it";
    EXPECT_FALSE(support_info(s.reference).role) << s.name << ": its reference is a check kernel, no layer step";
    EXPECT_FALSE(s.meaning.empty());
  }
  EXPECT_EQ(f.find_stage("stage3"), nullptr);
  EXPECT_TRUE(f.grad.empty());
  EXPECT_TRUE(f.host_reference.empty()) << "its references are the stages' support kernels";
  const std::size_t backward_rows = std::size_t(Buf::dw2) - std::size_t(Buf::dy) + 1 + 2;  // and dw1_16, dw2_16
  EXPECT_EQ(f.buffers.size(), kBufCount - backward_rows) << "every row but the backward's";
  for (Buf b : f.buffers) EXPECT_TRUE((b < Buf::dy || b > Buf::dw2) && !op::stands_in(b)) << to_string(b);
  EXPECT_NE(std::ranges::find(f.buffers, Buf::inter_scale), f.buffers.end()) << "a forward row appended after the backward's";
  EXPECT_EQ(f.support.size(), std::size_t(Support::forward_saved)) << "every row but the backward's forward_saved";
  EXPECT_EQ(f.build, &build_program);
}

// The backward is the second row: four roles filled by backward GEMM
// configurations, in the order a recipe holds them, each with the GEMM it runs,
// its sizes, its buffers (all of them the operation's) and the accumulator it
// adds into; the support unit's align; the CPU backward as its reference.
TEST(Operation, TheBackwardIsTheSecondRowWithItsFourRolesInOrder) {
  const op::Operation& b = op::moe_backward();
  ASSERT_EQ(op::operations().size(), 2u);
  EXPECT_EQ(op::operations()[1], &b);
  EXPECT_EQ(op::find("moe_backward"), &b);
  EXPECT_TRUE(b.stages.empty()) << "no stage family fills a backward role";
  EXPECT_EQ(b.stage(StageRole::stage1), nullptr);
  EXPECT_EQ(b.build, &build_backward_program);
  EXPECT_EQ(b.host_reference, "moe_backward (measure/workload/backward_reference.hpp)");
  EXPECT_FALSE(b.meaning.empty());
  struct Want {
    Role launch;
    BackwardOp gemm;
    int m, n;  // on H = 1024, I = 512
    std::optional<Buf> clears;
    std::set<Buf> writes;
  };
  const Want want[] = {
      {Role::dgrad2, BackwardOp::dgrad_swiglu, 1024, 512, Buf::d_weights, {Buf::d_gate_up, Buf::d_weights}},
      {Role::dgrad1, BackwardOp::dgrad_scatter, 1024, 1024, Buf::dx, {Buf::dx}},
      {Role::wgrad2, BackwardOp::wgrad, 1024, 512, std::nullopt, {Buf::dw2, Buf::dw2_16}},
      {Role::wgrad1, BackwardOp::wgrad, 1024, 1024, std::nullopt, {Buf::dw1, Buf::dw1_16}},
  };
  ASSERT_EQ(b.grad.size(), std::size(want));
  const std::set<Buf> listed(b.buffers.begin(), b.buffers.end());
  EXPECT_EQ(listed.size(), b.buffers.size()) << "each buffer once";
  for (std::size_t i = 0; i < b.grad.size(); ++i) {
    const op::GradRole& g = b.grad[i];
    SCOPED_TRACE(std::string(to_string(g.launch)));
    EXPECT_EQ(g.launch, want[i].launch);
    EXPECT_EQ(b.grad_role(g.launch), &g);
    EXPECT_TRUE(is_backward(g.launch));
    EXPECT_EQ(g.gemm, want[i].gemm);
    EXPECT_EQ(op::extent(g.m, 1024, 512), want[i].m);
    EXPECT_EQ(op::extent(g.n, 1024, 512), want[i].n);
    EXPECT_EQ(g.clears, want[i].clears);
    const std::vector<Buf> reads = g.reads(), writes = g.writes();
    EXPECT_EQ(std::set<Buf>(writes.begin(), writes.end()), want[i].writes);
    if (g.clears) {
      EXPECT_TRUE(std::set<Buf>(writes.begin(), writes.end()).contains(*g.clears));
    }
    for (const std::vector<Buf>& list : {reads, writes})
      for (Buf x : list) EXPECT_TRUE(listed.contains(x)) << to_string(x);
    for (Buf x : {Buf::sorted_ids, Buf::block_experts, Buf::padded_rows})
      EXPECT_NE(std::ranges::find(reads, x), reads.end()) << "every role reads the sorted rows: " << to_string(x);
    EXPECT_FALSE(support_of(g.launch)) << "its kernel is its configuration's, not the support unit's";
    EXPECT_FALSE(g.meaning.empty());
  }
  EXPECT_EQ(b.grad_role(Role::stage1), nullptr);
  EXPECT_FALSE(is_backward(Role::align));
  // X, the routing, the plain weights and the align's rows beside its own; no copy, scale or forward workspace.
  for (Buf x : listed) {
    const bool own = (x >= Buf::dy && x <= Buf::dw2) || x == Buf::dw1_16 || x == Buf::dw2_16;
    const bool forward_input = x == Buf::x || x == Buf::topk_ids || x == Buf::topk_weights || x == Buf::w1 || x == Buf::w2;
    const bool align = x == Buf::sorted_ids || x == Buf::block_experts || x == Buf::padded_rows || x == Buf::bad_ids;
    EXPECT_TRUE(own || forward_input || align) << to_string(x);
  }
  EXPECT_EQ(listed.size(), 9u + (std::size_t(Buf::dw2) - std::size_t(Buf::dy) + 1) + 2);  // and dw1_16, dw2_16
  // The 16-bit weight gradients stand in for the fp32 ones (a wgrad role's c16 for its c), nothing else does.
  for (std::size_t i = 0; i < kBufCount; ++i) {
    const Buf x = Buf(i);
    const std::optional<Buf> instead = x == Buf::dw1 ? Buf::dw1_16 : x == Buf::dw2 ? std::optional(Buf::dw2_16) : std::nullopt;
    EXPECT_EQ(op::written_instead(x), instead) << to_string(x);
    EXPECT_EQ(op::stands_in(x), x == Buf::dw1_16 || x == Buf::dw2_16) << to_string(x);
  }
  EXPECT_EQ(buffer_info(Buf::dw1_16).place, BufPlace::optional);
  EXPECT_EQ(buffer_info(Buf::dw2_16).place, BufPlace::optional);
  const std::vector<Support> support(b.support.begin(), b.support.end());
  EXPECT_EQ(support, (std::vector<Support>{Support::align, Support::align_count, Support::align_scatter, Support::forward_saved}));
}

// Each backward row binds pointers its GEMM's argument struct has
// (op::takes), each once, to a buffer of the pointer's C type; the pointers
// it writes through are what it writes, the rest and the sorted rows what it
// reads; a dgrad has no B to read per token.
TEST(Operation, BackwardOperandsArePointersOfTheirGemmOnceOfTheirType) {
  const auto c_type = [](op::Operand o) {
    switch (o) {
      case op::Operand::scales:
      case op::Operand::d_weights:
      case op::Operand::dx:
      case op::Operand::c: return "float";
      default: return "u16";
    }
  };
  const std::set<std::string> outputs{"d_gate_up", "d_weights", "dx", "c", "c16"};
  for (const op::GradRole& g : op::moe_backward().grad) {
    SCOPED_TRACE(std::string(to_string(g.launch)));
    std::set<op::Operand> seen;
    std::vector<Buf> reads, writes;
    for (const op::Binding& b : g.operands) {
      SCOPED_TRACE(std::string(op::to_string(b.operand)));
      EXPECT_TRUE(op::takes(g.gemm, b.operand));
      EXPECT_TRUE(seen.insert(b.operand).second) << "bound twice";
      std::string pointee(buffer_info(b.buffer).pointee);
      if (pointee.starts_with("const ")) pointee.erase(0, 6);
      EXPECT_EQ(pointee, c_type(b.operand)) << to_string(b.buffer);
      EXPECT_EQ(op::is_output(b.operand), outputs.contains(std::string(op::to_string(b.operand))));
      (op::is_output(b.operand) ? writes : reads).push_back(b.buffer);
    }
    EXPECT_TRUE(seen.contains(op::Operand::a));
    EXPECT_TRUE(seen.contains(g.gemm == BackwardOp::wgrad ? op::Operand::b : op::Operand::w));
    reads.insert(reads.end(), {Buf::sorted_ids, Buf::block_experts, Buf::padded_rows});
    EXPECT_EQ(g.reads(), reads);
    EXPECT_EQ(g.writes(), writes);
    EXPECT_FALSE(writes.empty());
    if (g.gemm != BackwardOp::wgrad) {
      EXPECT_FALSE(g.b_per_token);
    }
  }
  // What each struct has: K-grouped A, B, A's scales, C (fp32 and 16-bit); dgrad the others.
  const std::set<op::Operand> wgrad{op::Operand::a, op::Operand::b, op::Operand::scales, op::Operand::c, op::Operand::c16};
  for (auto o : {op::Operand::a, op::Operand::b, op::Operand::w, op::Operand::scales, op::Operand::gate_up,
                 op::Operand::d_gate_up, op::Operand::d_weights, op::Operand::dx, op::Operand::c, op::Operand::c16}) {
    EXPECT_EQ(op::takes(BackwardOp::wgrad, o), wgrad.contains(o)) << op::to_string(o);
    const bool dgrad = !wgrad.contains(o) || o == op::Operand::a || o == op::Operand::scales;
    EXPECT_EQ(op::takes(BackwardOp::dgrad_swiglu, o), dgrad) << op::to_string(o);
    EXPECT_EQ(op::takes(BackwardOp::dgrad_scatter, o), dgrad) << op::to_string(o);
  }
}

// The table keeps the names, the order and the workspace the enum had (the
// manifest's buffer names and the runtime's carving depend on them).
TEST(Operation, BufferRowsKeepTheirNamesOrderAndWorkspace) {
  const std::vector<std::string> names{"x",          "topk_ids",      "topk_weights", "w1",      "w2",       "w1_shuffled",
                                       "w2_shuffled", "w1_tiled",     "w2_tiled",     "inter",   "y_acc",    "y",
                                       "sorted_ids", "block_experts", "padded_rows",  "bad_ids", "x_scale",  "w1_scales",
                                       "w2_scales",  "xq",            "x_scales",     "inter_q", "inter_scales",
                                       // the backward's rows, appended (layer/backward.hpp)
                                       "dy", "saved_gate_up", "saved_inter", "d_gate_up", "d_weights", "dx", "dw1", "dw2",
                                       // the static scale mode's input, appended after them
                                       "inter_scale",
                                       // the dynamic tile walks' tickets
                                       "tile_tickets",
                                       // the backward's 16-bit weight gradients
                                       "dw1_16", "dw2_16"};
  ASSERT_EQ(kBufCount, names.size());
  const std::set<std::string> workspace{"inter", "y_acc", "sorted_ids", "block_experts", "padded_rows",
                                        "xq",    "x_scales", "inter_q", "inter_scales", "d_gate_up", "tile_tickets"};
  for (std::size_t i = 0; i < kBufCount; ++i) {
    const BufferInfo& b = buffer_info(Buf(i));
    EXPECT_EQ(b.name, names[i]);
    EXPECT_EQ(is_workspace(Buf(i)), workspace.contains(names[i])) << names[i];
    EXPECT_FALSE(b.meaning.empty()) << names[i];
    EXPECT_FALSE(b.pointee.empty()) << names[i];
    // A copy is bound through its weights' member; every other row through its own.
    if (b.place == BufPlace::copy)
      EXPECT_TRUE(b.member == "w1" || b.member == "w2") << names[i];
    else
      EXPECT_EQ(b.member, b.name);
  }
  EXPECT_EQ(buffer_info(Buf::bad_ids).place, BufPlace::optional);
}

TEST(Operation, SupportRowsParseBackAndMatchTheLaunchRoles) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kSupportCount; ++i) {
    const Support s = Support(i);
    EXPECT_TRUE(names.insert(to_string(s)).second) << to_string(s);
    EXPECT_EQ(parse_support(to_string(s)), s);
    if (const auto role = support_info(s).role) {
      EXPECT_EQ(support_of(*role), s);
      EXPECT_EQ(to_string(*role), to_string(s));
    }
  }
  EXPECT_FALSE(parse_support("stage1"));
  EXPECT_FALSE(support_of(Role::stage1));
  EXPECT_FALSE(support_of(Role::stage2));
  for (Role r : {Role::align, Role::reduce_atomic, Role::reduce_partials, Role::reduce_partials16, Role::align_count,
                 Role::align_scatter, Role::quantise_x, Role::quantise_inter})
    EXPECT_TRUE(support_of(r)) << to_string(r);
}

// The support unit's entries come from the rows: present where the presence
// column says so, each the emitter's name.
TEST(Operation, SupportUnitsHoldTheRowsTheirPresenceAllows) {
  const Target& t = *find_target("sm_90a");
  const auto old16 = manifest::SupportUnit::of(t, DType::bf16, false, false, false);
  const auto bf16 = manifest::SupportUnit::of(t, DType::bf16, true, true, true);
  const auto fp8 = manifest::SupportUnit::of(t, DType::e4m3, true, true, true);
  EXPECT_EQ(bf16.symbol(Support::align), align_entry(t));
  EXPECT_EQ(bf16.symbol(Support::reference2), reference_entry(t, StageRole::stage2, DType::bf16));
  EXPECT_EQ(fp8.symbol(Support::quantise_inter), quantise_inter_entry(t));
  EXPECT_TRUE(old16.symbol(Support::reduce_partials16).empty());
  EXPECT_FALSE(old16.wide_align());
  EXPECT_TRUE(bf16.wide_align());
  EXPECT_TRUE(bf16.symbol(Support::quantise_x).empty());
  EXPECT_EQ(bf16.symbol(Support::forward_saved), saved_entry(t, DType::bf16));
  EXPECT_TRUE(old16.symbol(Support::forward_saved).empty());
  for (std::size_t i = 0; i < kSupportCount; ++i) {
    const SupportPresence presence = support_info(Support(i)).presence;
    if (presence == SupportPresence::always) { EXPECT_FALSE(old16.symbols[i].empty()) << to_string(Support(i)); }
    // An e4m3 unit holds every row but the backward's (16-bit only).
    EXPECT_EQ(fp8.symbols[i].empty(), presence == SupportPresence::saved) << to_string(Support(i));
  }
}

}  // namespace
}  // namespace ft
