// The backward's layer program (layer/backward.hpp): the steps, grids and
// buffer sizes of op::moe_backward for a few (problem, T) rows -- a T that is
// not a multiple of the row block, T = 1, a size that takes the wide align,
// recipes of some roles only -- run through layer/execute on a recording
// Device, so each launch's argument struct (the bytes a GPU gets) is checked
// field by field against the buffers of its role; and every recipe the
// backward refuses, each with its line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "generator/atoms.hpp"
#include "generator/emitter.hpp"
#include "layer/backward.hpp"
#include "layer/execute.hpp"
#include "layer/operation.hpp"
#include "tests/unit/export/fake_device.hpp"

namespace ft {
namespace {

// A backward GEMM configuration in one role.
struct Cfg {
  Role role;
  int tile_m, tile_n, tile_k, warps_m, warps_n, stages;
};

struct Shape {
  int grid_x, grid_y, grid_z, block, lds;
};

struct Row {
  const char* label;
  const char* target;
  const char* atom;
  int experts, hidden, inter, topk, tokens;
  std::vector<Cfg> roles;
  int align_block;
  long long rows;  // max_padded_rows
  std::vector<std::string> steps;
  std::vector<std::uint64_t> clears;  // the clear steps' words, in order
  std::vector<Shape> shapes;          // the roles' launches, in order
  std::set<std::string> buffers;      // what the program sizes
};

BackwardOp gemm_of(Role r) { return r == Role::dgrad2 ? BackwardOp::dgrad_swiglu : r == Role::dgrad1 ? BackwardOp::dgrad_scatter : BackwardOp::wgrad; }

Problem problem_of(const Row& row) {
  Problem p;
  p.name = row.label;
  p.experts = row.experts;
  p.hidden = row.hidden;
  p.inter = row.inter;
  p.topk = row.topk;
  p.dtype = find_atom(row.atom)->dtype;
  return p;
}

LayerRecipe recipe_of(const Row& row) {
  const Target* t = find_target(row.target);
  LayerRecipe r{t, problem_of(row), {}};
  for (const Cfg& c : row.roles)
    r.grad.push_back({c.role, BackwardVariant{t, find_atom(row.atom), c.tile_m, c.tile_n, c.tile_k, c.warps_m, c.warps_n, c.stages,
                                              gemm_of(c.role)}});
  return r;
}

const std::set<std::string> kAll{"x",          "topk_ids",      "topk_weights", "w1",      "w2",        "sorted_ids",
                                 "block_experts", "padded_rows", "bad_ids",      "dy",      "saved_gate_up", "saved_inter",
                                 "d_gate_up",  "d_weights",     "dx",           "dw1",     "dw2", "dw1_16", "dw2_16"};
const std::vector<Cfg> kGfx942Roles{{Role::dgrad2, 32, 64, 32, 2, 2, 2},
                                    {Role::dgrad1, 64, 64, 32, 2, 2, 2},
                                    {Role::wgrad2, 64, 64, 32, 2, 2, 1},
                                    {Role::wgrad1, 64, 128, 32, 2, 2, 2}};
const std::vector<Cfg> kSm90Roles{{Role::dgrad2, 32, 64, 32, 2, 2, 2},
                                  {Role::dgrad1, 16, 32, 16, 1, 2, 1},
                                  {Role::wgrad2, 32, 32, 16, 2, 2, 2},
                                  {Role::wgrad1, 64, 64, 32, 2, 2, 2}};
const std::vector<std::string> kAllSteps{"clear_d_weights", "clear_dx", "align", "dgrad2", "dgrad1", "wgrad2", "wgrad1"};

// E=8, H=1024, I=512 (gfx942, 256 threads) and E=4, H=I=64 (sm_90a, warps of 32).
// Row block lcm(16, dgrad tile_m); rows = pairs + min(E, pairs) (block - 1), in whole blocks.
const Row kRows[] = {
    {"gfx942_T333", "gfx942", "mfma_f32_16x16x16_bf16", 8, 1024, 512, 2, 333, kGfx942Roles, 64, 1216, kAllSteps,
     {666, 333 * 1024},
     {{38, 8, 1, 256, 15360}, {19, 16, 1, 256, 20480}, {16, 8, 8, 256, 10240}, {16, 8, 8, 256, 30720}}, kAll},
    {"gfx942_T1", "gfx942", "mfma_f32_16x16x16_bf16", 8, 1024, 512, 2, 1, kGfx942Roles, 64, 128, kAllSteps,
     {2, 1024},
     {{4, 8, 1, 256, 15360}, {2, 16, 1, 256, 20480}, {16, 8, 8, 256, 10240}, {16, 8, 8, 256, 30720}}, kAll},
    // 18000 pairs: the wide align's two launches.
    {"gfx942_T9000", "gfx942", "mfma_f32_16x16x16_bf16", 8, 1024, 512, 2, 9000, kGfx942Roles, 64, 18560,
     {"clear_d_weights", "clear_dx", "align_count", "align_scatter", "dgrad2", "dgrad1", "wgrad2", "wgrad1"},
     {18000, 9000 * 1024},
     {{580, 8, 1, 256, 15360}, {290, 16, 1, 256, 20480}, {16, 8, 8, 256, 10240}, {16, 8, 8, 256, 30720}}, kAll},
    {"sm90a_T7", "sm_90a", "mma_m16n8k16_f32_bf16", 4, 64, 64, 2, 7, kSm90Roles, 32, 160, kAllSteps,
     {14, 7 * 64},
     {{5, 1, 1, 128, 15360}, {10, 2, 1, 64, 2304}, {2, 2, 4, 128, 6144}, {2, 1, 4, 128, 20480}}, kAll},
    // Some roles only (the search times one at a time): the row block and the buffers follow them.
    {"sm90a_T1_dgrad2_wgrad2", "sm_90a", "mma_m16n8k16_f32_bf16", 4, 64, 64, 2, 1, {kSm90Roles[0], kSm90Roles[2]}, 32, 64,
     {"clear_d_weights", "align", "dgrad2", "wgrad2"},
     {2},
     {{2, 1, 1, 128, 15360}, {2, 2, 4, 128, 6144}},
     {"topk_ids", "topk_weights", "w2", "sorted_ids", "block_experts", "padded_rows", "bad_ids", "dy", "saved_gate_up",
      "saved_inter", "d_gate_up", "d_weights", "dw2", "dw2_16"}},
    {"gfx942_T33_wgrad1", "gfx942", "mfma_f32_16x16x16_bf16", 8, 1024, 512, 2, 33, {kGfx942Roles[3]}, 16, 192,
     {"align", "wgrad1"},
     {},
     {{16, 8, 8, 256, 30720}},
     {"x", "topk_ids", "sorted_ids", "block_experts", "padded_rows", "bad_ids", "d_gate_up", "dw1", "dw1_16"}},
};

// Distinct fake addresses per buffer, and back.
constexpr DevicePtr kBase = 0x1000000, kStride = 0x100000;
BufferTable fake_table() {
  BufferTable t{};
  for (std::size_t i = 0; i < kBufCount; ++i) t[i] = kBase + kStride * i;
  return t;
}
std::string buffer_at(const void* p) {
  if (!p) return "null";
  const auto a = reinterpret_cast<DevicePtr>(p);
  return std::string(to_string(Buf((a - kBase) / kStride)));
}

// The pointer fields of a launch's argument by name, and its scalars.
struct Decoded {
  std::map<std::string, std::string> pointers;
  std::map<std::string, int> scalars;
};

Decoded decode(Role role, const std::vector<std::byte>& raw) {
  Decoded d;
  if (role == Role::wgrad2 || role == Role::wgrad1) {
    EXPECT_EQ(raw.size(), sizeof(KGroupedArgs));
    KGroupedArgs k{};
    std::memcpy(&k, raw.data(), sizeof k);
    d.pointers = {{"a", buffer_at(k.a)}, {"b", buffer_at(k.b)}, {"a_scales", buffer_at(k.a_scales)}, {"c", buffer_at(k.c)},
                  {"c16", buffer_at(k.c16)}, {"sorted_ids", buffer_at(k.sorted_ids)}, {"block_experts", buffer_at(k.block_experts)},
                  {"padded_rows", buffer_at(k.padded_rows)}};
    d.scalars = {{"pairs", k.pairs}, {"topk", k.topk}, {"m", k.m}, {"n", k.n}, {"experts", k.experts},
                 {"align_block", k.align_block}, {"a_per_token", k.a_per_token}, {"b_per_token", k.b_per_token}};
    return d;
  }
  EXPECT_EQ(raw.size(), sizeof(DgradArgs));
  DgradArgs g{};
  std::memcpy(&g, raw.data(), sizeof g);
  d.pointers = {{"a", buffer_at(g.a)}, {"w", buffer_at(g.w)}, {"row_scales", buffer_at(g.row_scales)},
                {"gate_up", buffer_at(g.gate_up)}, {"d_gate_up", buffer_at(g.d_gate_up)}, {"d_weights", buffer_at(g.d_weights)},
                {"dx", buffer_at(g.dx)}, {"sorted_ids", buffer_at(g.sorted_ids)}, {"block_experts", buffer_at(g.block_experts)},
                {"padded_rows", buffer_at(g.padded_rows)}};
  d.scalars = {{"pairs", g.pairs}, {"topk", g.topk}, {"k", g.k}, {"n", g.n}, {"experts", g.experts},
               {"align_block", g.align_block}, {"a_per_token", g.a_per_token}, {"reserved", g.reserved}};
  return d;
}

// The argument struct's member an operand of a role's row fills.
std::string field_of(BackwardOp gemm, op::Operand o) {
  if (o == op::Operand::scales) return gemm == BackwardOp::wgrad ? "a_scales" : "row_scales";
  return std::string(op::to_string(o));
}

// What each role's kernel must be given (docs/TRAINING.md, "Buffers of each backward kernel").
std::map<std::string, std::string> expected_pointers(Role r) {
  const std::map<std::string, std::string> rows{{"sorted_ids", "sorted_ids"}, {"block_experts", "block_experts"},
                                                {"padded_rows", "padded_rows"}};
  std::map<std::string, std::string> e;
  switch (r) {
    case Role::dgrad2:
      e = {{"a", "dy"}, {"w", "w2"}, {"row_scales", "topk_weights"}, {"gate_up", "saved_gate_up"}, {"d_gate_up", "d_gate_up"},
           {"d_weights", "d_weights"}, {"dx", "null"}};
      break;
    case Role::dgrad1:
      e = {{"a", "d_gate_up"}, {"w", "w1"}, {"row_scales", "null"}, {"gate_up", "null"}, {"d_gate_up", "null"},
           {"d_weights", "null"}, {"dx", "dx"}};
      break;
    case Role::wgrad2: e = {{"a", "dy"}, {"b", "saved_inter"}, {"a_scales", "topk_weights"}, {"c", "dw2"}, {"c16", "dw2_16"}}; break;
    default: e = {{"a", "d_gate_up"}, {"b", "x"}, {"a_scales", "null"}, {"c", "dw1"}, {"c16", "dw1_16"}}; break;
  }
  e.insert(rows.begin(), rows.end());
  return e;
}

std::map<std::string, int> expected_scalars(Role r, const Problem& p, int tokens, int align_block) {
  const int H = p.hidden, I = p.inter;
  std::map<std::string, int> e{{"pairs", tokens * p.topk}, {"topk", p.topk}, {"experts", p.experts}, {"align_block", align_block}};
  switch (r) {
    case Role::dgrad2: e.insert({{"k", H}, {"n", I}, {"a_per_token", 1}, {"reserved", 0}}); break;
    case Role::dgrad1: e.insert({{"k", 2 * I}, {"n", H}, {"a_per_token", 0}, {"reserved", 0}}); break;
    case Role::wgrad2: e.insert({{"m", H}, {"n", I}, {"a_per_token", 1}, {"b_per_token", 0}}); break;
    default: e.insert({{"m", 2 * I}, {"n", H}, {"a_per_token", 0}, {"b_per_token", 1}}); break;
  }
  return e;
}

class BackwardProgram : public testing::TestWithParam<Row> {};

TEST_P(BackwardProgram, StepsShapesAndBuffersOfEachRole) {
  const Row& row = GetParam();
  const LayerRecipe r = recipe_of(row);
  auto prog = build_backward_program(r, row.tokens);
  ASSERT_TRUE(prog) << prog.error().describe();
  EXPECT_EQ(prog->tokens, row.tokens);
  EXPECT_EQ(prog->align_block, row.align_block);
  EXPECT_EQ(prog->max_padded_rows, row.rows);
  std::vector<std::string> names;
  for (const Step& s : prog->steps) names.push_back(s.name);
  ASSERT_EQ(names, row.steps);
  std::set<std::string> sized;
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (prog->bytes[i]) sized.insert(std::string(to_string(Buf(i))));
  EXPECT_EQ(sized, row.buffers);

  // Run it through the executor the GPU path takes, on a Device that records.
  test::FakeDevice dev(row.target);
  RoleKernels k;
  const ModuleHandle m{reinterpret_cast<void*>(1)};
  k.of(Role::align) = *dev.function(m, align_entry(*r.target));
  k.of(Role::align_count) = *dev.function(m, align_count_entry(*r.target));
  k.of(Role::align_scatter) = *dev.function(m, align_scatter_entry(*r.target));
  for (const GradStage& g : r.grad) {
    k.of(g.role) = *dev.function(m, g.kernel.name());
  }
  auto fns = bind(*prog, k);
  ASSERT_TRUE(fns) << fns.error().describe();
  const BufferTable table = fake_table();
  ASSERT_TRUE(check_buffers(*prog, table));
  ASSERT_TRUE(execute(dev, *prog, *fns, table, StreamHandle{}));

  // The clears: each role's accumulator, whole, before the align.
  std::vector<std::string> memsets;
  std::size_t c = 0;
  for (const Step& s : prog->steps) {
    if (s.op != Step::Op::memset_u32) continue;
    ASSERT_LT(c, row.clears.size());
    EXPECT_EQ(s.count, row.clears[c]) << s.name;
    EXPECT_EQ(s.count * 4, prog->bytes[std::size_t(s.buffer)]) << s.name;
    EXPECT_EQ(s.name, "clear_" + std::string(to_string(s.buffer)));
    memsets.push_back(fmt::format("memset {} 0 x{}", at(table, s.buffer), row.clears[c++]));
  }
  EXPECT_EQ(c, row.clears.size());
  ASSERT_GE(dev.events.size(), memsets.size());
  EXPECT_EQ(std::vector<std::string>(dev.events.begin(), dev.events.begin() + std::ptrdiff_t(memsets.size())), memsets);

  // The launches: align first, then each role with its grid and its argument struct.
  const std::size_t aligns = prog->find("align") ? 1 : 2;
  ASSERT_EQ(dev.launches.size(), aligns + r.grad.size());
  for (std::size_t i = 0; i < r.grad.size(); ++i) {
    const GradStage& g = r.grad[i];
    const test::FakeDevice::Launch& l = dev.launches[aligns + i];
    const Shape& want = row.shapes[i];
    SCOPED_TRACE(std::string(to_string(g.role)));
    EXPECT_EQ(l.symbol, g.kernel.name());
    EXPECT_EQ(prog->find(to_string(g.role))->role, g.role);
    EXPECT_EQ((std::vector<unsigned>{l.grid.x, l.grid.y, l.grid.z}),
              (std::vector<unsigned>{unsigned(want.grid_x), unsigned(want.grid_y), unsigned(want.grid_z)}));
    EXPECT_EQ(l.block.x, unsigned(want.block));
    EXPECT_EQ(l.shared, want.lds);
    const Decoded d = decode(g.role, l.raw_args);
    EXPECT_EQ(d.pointers, expected_pointers(g.role));
    EXPECT_EQ(d.scalars, expected_scalars(g.role, r.problem, row.tokens, row.align_block));
    // Each pointer is the buffer the operation's row binds it to (the align's
    // rows aside, every pointer it binds none to is null), and its reads and
    // writes are exactly the buffers the kernel is given.
    const op::GradRole& role = *op::moe_backward().grad_role(g.role);
    std::map<std::string, std::string> bound{{"sorted_ids", "sorted_ids"}, {"block_experts", "block_experts"},
                                             {"padded_rows", "padded_rows"}};
    for (const auto& [field, buf] : d.pointers) bound.emplace(field, "null");
    for (const op::Binding& b : role.operands)
      bound[field_of(role.gemm, b.operand)] = std::string(to_string(b.buffer));
    EXPECT_EQ(d.pointers, bound);
    EXPECT_EQ(d.scalars.at("a_per_token"), role.a_per_token ? 1 : 0);
    if (role.gemm == BackwardOp::wgrad) {
      EXPECT_EQ(d.scalars.at("b_per_token"), role.b_per_token ? 1 : 0);
    }
    std::set<std::string> named, given;
    for (const std::vector<Buf>& list : {role.reads(), role.writes()})
      for (Buf b : list) named.insert(std::string(to_string(b)));
    for (const auto& [field, buf] : d.pointers)
      if (buf != "null") given.insert(buf);
    EXPECT_EQ(given, named);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, BackwardProgram, testing::ValuesIn(kRows),
                         [](const testing::TestParamInfo<Row>& i) { return std::string(i.param.label); });

TEST(BackwardProgram, BuffersHoldTheirTensors) {
  const Row& row = kRows[0];
  auto prog = build_backward_program(recipe_of(row), row.tokens);
  ASSERT_TRUE(prog) << prog.error().describe();
  const std::uint64_t T = 333, E = 8, H = 1024, I = 512, k = 2;
  const std::map<Buf, std::uint64_t> want{
      {Buf::x, T * H * 2},           {Buf::topk_weights, T * k * 4},        {Buf::w1, E * 2 * I * H * 2},
      {Buf::w2, E * H * I * 2},      {Buf::sorted_ids, 1216 * 4},           {Buf::block_experts, 1216 / 64 * 4},
      {Buf::dy, T * H * 2},          {Buf::saved_gate_up, T * k * 2 * I * 2}, {Buf::saved_inter, T * k * I * 2},
      {Buf::d_gate_up, T * k * 2 * I * 2}, {Buf::d_weights, T * k * 4},     {Buf::dx, T * H * 4},
      {Buf::dw1, E * 2 * I * H * 4}, {Buf::dw2, E * H * I * 4}, {Buf::dw1_16, E * 2 * I * H * 2}, {Buf::dw2_16, E * H * I * 2}};
  for (const auto& [b, bytes] : want) EXPECT_EQ(prog->bytes[std::size_t(b)], bytes) << to_string(b);
  // Its workspace is the sorted rows and d_gate_up, carved as the runtime carves a forward's.
  const WorkspacePlacement w = workspace_placement(*prog);
  EXPECT_EQ(w.total, 1216 * 4 + 256 + 256 + T * k * 2 * I * 2);  // sorted_ids, block_experts and padded_rows rounded to 256
}

// dw1_16 (dw2_16) stands in for dw1 (dw2): a launch given the 16-bit one needs
// no fp32 one, and one given neither is refused by the fp32 name.
TEST(BackwardProgram, SixteenBitWeightGradientsStandInForTheFp32Ones) {
  const Row& row = kRows[0];
  auto prog = build_backward_program(recipe_of(row), row.tokens);
  ASSERT_TRUE(prog) << prog.error().describe();
  BufferTable t = fake_table();
  at(t, Buf::dw1) = 0;
  at(t, Buf::dw2) = 0;
  EXPECT_TRUE(check_buffers(*prog, t));
  at(t, Buf::dw2_16) = 0;
  const Status s = check_buffers(*prog, t);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "null layer buffers: dw2");
  at(t, Buf::dw2) = fake_table()[std::size_t(Buf::dw2)];
  at(t, Buf::dw1_16) = 0;
  const Status s1 = check_buffers(*prog, t);
  ASSERT_FALSE(s1);
  EXPECT_EQ(s1.error().message, "null layer buffers: dw1");
}

// A recipe the backward refuses, with its line.
struct Refusal {
  const char* label;
  void (*edit)(LayerRecipe&);
  int tokens;
  const char* line;
};

const Refusal kRefusals[] = {
    {"no_grad_stage", [](LayerRecipe& r) { r.grad.clear(); }, 7, "layer program: no backward stage"},
    {"no_target", [](LayerRecipe& r) { r.target = nullptr; }, 7, "layer program: no target"},
    {"forward_stage",
     [](LayerRecipe& r) { r.stages.push_back(Variant::of(*r.target, StageRole::stage1, *find_atom("mfma_f32_16x16x16_bf16"))); }, 7,
     "layer program: a backward recipe holds backward stages only (LayerRecipe::grad), not forward stage variants"},
    {"fp8_problem", [](LayerRecipe& r) { r.problem.dtype = DType::e4m3, r.problem.scales = Scales::per_tensor; }, 7,
     "layer program: the backward runs 16-bit layers; gfx942_T333 is e4m3"},
    {"dgrad_tile_k_does_not_divide_K", [](LayerRecipe& r) { r.grad[0].kernel.tile_k = 48; }, 7,
     "layer program: ft_gfx942_dgrad2_bf16_m32n64k48_w2x2_mfma16x16x16_s2: tile_k 48 does not divide the reduction K = 1024"},
    {"wgrad_tile_n_does_not_divide_n", [](LayerRecipe& r) { r.grad[3].kernel.tile_n = 96; }, 7,
     "layer program: ft_gfx942_kgrouped_bf16_m64n96k32_w2x2_mfma16x16x16_s2: tile_n 96 does not divide n = 1024"},
    {"illegal_configuration", [](LayerRecipe& r) { r.grad[1].kernel.stages = 3; }, 7,
     "layer program: ft_gfx942_dgrad1_bf16_m64n64k32_w2x2_mfma16x16x16_s3: stages 3 is not 1 (single) or 2 (ping-pong)"},
    {"gemm_of_another_role", [](LayerRecipe& r) { r.grad[0].kernel.op = BackwardOp::wgrad; }, 7,
     "layer program: ft_gfx942_kgrouped_bf16_m32n64k32_w2x2_mfma16x16x16_s2 runs kgrouped, the role dgrad2 takes dgrad2"},
    {"not_a_backward_role", [](LayerRecipe& r) { r.grad[0].role = Role::stage1; }, 7, "layer program: stage1 is not a backward role"},
    {"out_of_order", [](LayerRecipe& r) { std::swap(r.grad[1], r.grad[2]); }, 7,
     "layer program: dgrad1 after wgrad2: the stages are out of the operation's order"},
    {"twice", [](LayerRecipe& r) { r.grad[1] = r.grad[0]; }, 7, "layer program: dgrad2 appears twice"},
    {"another_target", [](LayerRecipe& r) { r.grad[2].kernel.target = find_target("gfx950"); }, 7,
     "layer program: ft_gfx950_kgrouped_bf16_m64n64k32_w2x2_mfma16x16x16_s1 is for gfx950, the layer for gfx942"},
    {"another_dtype", [](LayerRecipe& r) { r.grad[2].kernel.atom = find_atom("mfma_f32_16x16x16_f16"); }, 7,
     "layer program: ft_gfx942_kgrouped_f16_m64n64k32_w2x2_mfma16x16x16_s1 is f16, the problem bf16"},
    {"row_block_too_large", [](LayerRecipe& r) { r.grad[0].kernel.tile_m = 96, r.grad[1].kernel.tile_m = 128; }, 7,
     "layer program: the dgrad tiles need expert blocks of 384 rows, more than 256"},
    {"no_tokens", [](LayerRecipe&) {}, 0, "layer program: token count 0 outside 1..16777216"},
};

class BackwardRefusal : public testing::TestWithParam<Refusal> {};

TEST_P(BackwardRefusal, SaysWhy) {
  LayerRecipe r = recipe_of(kRows[0]);
  GetParam().edit(r);
  auto prog = build_backward_program(r, GetParam().tokens);
  ASSERT_FALSE(prog);
  EXPECT_EQ(prog.error().code, Errc::invalid_input);
  EXPECT_EQ(prog.error().message, GetParam().line);
}

INSTANTIATE_TEST_SUITE_P(Recipes, BackwardRefusal, testing::ValuesIn(kRefusals),
                         [](const testing::TestParamInfo<Refusal>& i) { return std::string(i.param.label); });

// The forward's program refuses backward stages, and the backward's registry row builds through its own.
TEST(BackwardProgram, TheForwardRefusesABackwardRecipe) {
  LayerRecipe r = recipe_of(kRows[0]);
  r.stages.push_back(Variant::of(*r.target, StageRole::stage1, *find_atom("mfma_f32_16x16x16_bf16")));
  auto fwd = build_program(r, 7);
  ASSERT_FALSE(fwd);
  EXPECT_EQ(fwd.error().message, "layer program: a forward recipe holds no backward stages (LayerRecipe::grad; op::moe_backward builds those)");
  r.stages.clear();
  auto bwd = op::moe_backward().build(r, 7);
  ASSERT_TRUE(bwd) << bwd.error().describe();
  EXPECT_EQ(bwd->steps.size(), kAllSteps.size());
}

// What the export ships and the runtime loads of a backward recipe: one kernel
// per role, in the registry's order, named and sized by its configuration, each
// run by a step of the program.
TEST(BackwardProgram, RoleKernelsAreTheConfigurationsTheProgramLaunches) {
  const LayerRecipe r = recipe_of(kRows[0]);
  EXPECT_EQ(&op::operation_of(r), &op::moe_backward());
  const std::vector<op::RoleKernel> kernels = op::role_kernels(r);
  ASSERT_EQ(kernels.size(), op::moe_backward().grad.size());
  auto prog = op::moe_backward().build(r, 333);
  ASSERT_TRUE(prog) << prog.error().describe();
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(std::string(to_string(kernels[i].launch)));
    EXPECT_EQ(kernels[i].launch, op::moe_backward().grad[i].launch);
    EXPECT_EQ(kernels[i].symbol, r.grad[i].kernel.name());
    EXPECT_EQ(kernels[i].lds_bytes, r.grad[i].kernel.lds_bytes());
    EXPECT_TRUE(launches(*prog, kernels[i].symbol));
    EXPECT_EQ(prog->find(to_string(kernels[i].launch))->symbol, kernels[i].symbol);
  }
  EXPECT_FALSE(launches(*prog, "ft_no_such_kernel"));
}

}  // namespace
}  // namespace ft
