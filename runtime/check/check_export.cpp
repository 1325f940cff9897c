#include "runtime/check/check_export.hpp"
#include "runtime/check/layer_check.hpp"
#include "runtime/check/backward_check.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flytune_runtime.h"
#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "layer/operation.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "compile/emu_compile.hpp"
#include "emulate/emu_device.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/workload.hpp"

namespace ft::check {
namespace {

// ft_plan_launch captured on a stream of the runtime's device, then replayed;
// the bad-id count read back afterwards.
int launch_in_graph(ft_runtime* rt, const ft_plan* plan, ft_layer_buffers& b, void* bad_word, std::int32_t& bad_ids) {
  Device& dev = rt::runtime_of(rt)->device();
  auto stream = dev.create_stream();
  if (!stream) return FT_ERR_DEVICE;
  b.bad_ids = static_cast<std::int32_t*>(bad_word);
  int st = dev.begin_capture(*stream) ? FT_OK : FT_ERR_DEVICE;
  if (st == FT_OK) st = ft_plan_launch(plan, &b, stream->p);
  auto graph = dev.end_capture(*stream);
  if (st == FT_OK && graph) st = dev.launch_graph(*graph, *stream) && dev.synchronize(*stream) ? FT_OK : FT_ERR_DEVICE;
  else if (st == FT_OK) st = FT_ERR_DEVICE;
  if (graph) (void)dev.destroy_graph(*graph);
  (void)dev.destroy_stream(*stream);
  if (st == FT_OK) st = ft_runtime_download(rt, &bad_ids, bad_word, 4);
  return st;
}

}  // namespace

CheckRow check_forward(PlannedRow& planned, ProblemWeights& weights_of, const RowStart& start) {
  CheckRow& row = planned.row;
  ft_runtime* rt = planned.rt;
  const ft_plan* plan = start.plan;
  const int tokens = row.tokens;
  const std::uint64_t seed = start.seed;
  const Routed& routed = start.routed;
  auto failed = [&](const std::string& what) { return planned.failed(what); };
  const std::size_t workspace_bytes = ft_plan_workspace_bytes(plan);
  const std::size_t T = std::size_t(tokens), H = std::size_t(start.shape.hidden), k = std::size_t(start.shape.topk), es = 2;
  Allocations mem(rt);
  ft_layer_buffers b{};
  void* x = mem.get(T * H * es);
  void* ids = mem.get(T * k * 4);
  void* weights = mem.get(T * k * 4);
  void* y = mem.get(T * H * es);
  void* y_ref = mem.get(T * H * es);
  // One workspace, carved by the runtime (ft_layer_buffers::workspace), as the
  // Python package and new C callers pass it.
  b.workspace = mem.get(workspace_bytes);
  b.workspace_bytes = workspace_bytes;
  if (!x || !ids || !weights || !y || !y_ref || !b.workspace) return failed("alloc");
  b.x = x;
  b.w1 = weights_of.plain(1);
  b.w2 = weights_of.plain(2);
  b.topk_ids = static_cast<const std::int32_t*>(ids);
  b.topk_weights = static_cast<const float*>(weights);
  b.y = y;
  weights_of.bind_scales(b);
  // fp8 problems' X: 128-value groups of differing magnitudes, so a layer
  // reading another group's activation scale fails.
  const Problem& problem = rt::plan_of(plan)->problem->problem;
  const int x_kind = problem.dtype == DType::f16 ? FT_FILL_F16 : FT_FILL_BF16;  // fp8 layers take bf16 X
  if (ft_runtime_fill_random_as(rt, x, T * H, seed * 3 + 1, tensor_scale(problem, TensorStream::x), x_kind,
                                magnitude_group(problem, TensorStream::x)) != FT_OK)
    return failed("fill");
  if (ft_runtime_upload(rt, ids, routed.ids.data(), routed.ids.size() * 4) != FT_OK ||
      ft_runtime_upload(rt, weights, routed.weights.data(), routed.weights.size() * 4) != FT_OK)
    return failed("upload");
  // Each stage's weights in the layout its kernel reads (a server does this once, at load time).
  for (int stage : {1, 2}) {
    const int layout = ft_plan_needs_shuffled(plan, stage) ? FT_WEIGHT_LAYOUT_SHUFFLED
                       : ft_plan_needs_tiled(plan, stage)  ? FT_WEIGHT_LAYOUT_TILED
                                                            : FT_WEIGHT_LAYOUT_PLAIN;
    const void* copy = weights_of.arranged(stage, layout);
    if (!copy) return failed(fmt::format("arrange w{}", stage));
    if (layout == FT_WEIGHT_LAYOUT_SHUFFLED) (stage == 1 ? b.w1_shuffled : b.w2_shuffled) = copy;
    if (layout == FT_WEIGHT_LAYOUT_TILED) (stage == 1 ? b.w1_tiled : b.w2_tiled) = copy;
  }
  // The reference first: it overwrites `inter`, which the layer then rewrites.
  // Above kFullReference tokens it covers a sample of tokens (the first, the
  // last, the rest spread evenly): its plain loops re-read each expert's
  // weights per token, hours at T = 16384 for DeepSeek-V3. Every output
  // element is still checked for NaN (unwritten) below.
  const std::vector<int> sampled = sample_tokens(tokens);
  const std::size_t S = sampled.size();
  if (std::string e = calibrate_into(rt, plan, mem, b, routed, sampled); !e.empty()) {
    row.summary = e;
    return row;
  }
  if (std::string e = reference_into(rt, plan, mem, b, routed, sampled, y_ref); !e.empty()) {
    row.summary = e;
    return row;
  }
  // fp8: the bf16 layer on the same weights, for the sanity bound.
  void* y_sane = problem.fp8() ? mem.get(S * H * es) : nullptr;
  if (problem.fp8() && !y_sane) return failed("alloc");
  if (y_sane)
    if (std::string e = reference_into(rt, plan, mem, b, routed, sampled, y_sane, true); !e.empty()) {
      row.summary = e;
      return row;
    }
  if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("reference sync");
  // Poison the output and every workspace buffer: the layer must write what it reads.
  if (!poison(rt, y, T * H * es) || !poison(rt, b.workspace, workspace_bytes)) return failed("poison");
  std::int32_t bad_ids = -1;
  if (start.graph) {
    void* word = mem.get(4);
    if (!word || launch_in_graph(rt, plan, b, word, bad_ids) != FT_OK) return failed("launch in a graph");
    if (bad_ids != 0) return failed(fmt::format("the layer counted {} routing ids outside [-1, experts)", bad_ids));
  } else if (ft_plan_launch_checked(plan, &b, nullptr, &bad_ids) != FT_OK) {
    return failed("launch");
  }
  std::vector<std::uint16_t> all(T * H), ref_bits(S * H), sane_bits(y_sane ? S * H : 0);
  if (ft_runtime_download(rt, all.data(), y, all.size() * 2) != FT_OK ||
      ft_runtime_download(rt, ref_bits.data(), y_ref, ref_bits.size() * 2) != FT_OK ||
      (y_sane && ft_runtime_download(rt, sane_bits.data(), y_sane, sane_bits.size() * 2) != FT_OK))
    return failed("download");
  judge(row, all, ref_bits, sampled, H, problem.dtype, sane_bits);
  return row;
}

namespace {

// The rows' questions of a plan (the C API's answers), operation by operation.
int forward_bucket(const ft_plan* plan) { return ft_plan_bucket(plan); }
std::string always_checked(const ft_problem_shape&, int) { return ""; }
bool has_backward(const ft_plan* plan) { return ft_plan_has_backward(plan) != 0; }
int backward_bucket(const ft_plan* plan) { return ft_plan_backward_bucket(plan); }

// One row per operation, in op::operations() order (tests/unit/runtime/check/layer_check_test.cpp).
const OperationCheck kOperationChecks[] = {
    {op::moe_forward, "forward", nullptr, forward_bucket, always_checked, check_forward},
    {op::moe_backward, "backward", has_backward, backward_bucket, backward_unchecked, check_backward},
};

}  // namespace

std::span<const OperationCheck> operation_checks() { return kOperationChecks; }

const OperationCheck* check_of(const op::Operation& operation) {
  for (const OperationCheck& c : kOperationChecks)
    if (&c.operation() == &operation) return &c;
  return nullptr;
}

CheckRow check_row(const op::Operation& operation, ft_runtime* rt, ProblemWeights& weights, const std::string& key, int tokens,
                   const std::string& routing, std::uint64_t seed, bool graph) {
  const OperationCheck* check = check_of(operation);
  if (!check) return CheckRow{key, 0, tokens, routing, false, 0, fmt::format("check-export has no rows for {}", operation.name)};
  PlannedRow planned(rt, CheckRow{key, 0, tokens, routing, false, 0, "", std::string(check->pass)});
  if (!planned.plan) return planned.row;
  CheckRow& row = planned.row;
  if (check->planned && !check->planned(planned.plan)) {
    row.summary = fmt::format("the plan has no {}", check->pass);
    return row;
  }
  row.bucket = check->bucket(planned.plan);
  ft_problem_shape shape{};
  ft_plan_shape(planned.plan, &shape);
  auto routed = routing_for(routing, shape, tokens, seed);
  if (!routed) {
    row.summary = routed.error().describe();
    return row;
  }
  return check->body(planned, weights, RowStart{planned.plan, shape, *routed, seed, graph});
}

namespace {

// Each code object of the manifest rebuilt for the CPU emulator: the support
// units from their target and dtype, the stage units from their variants, the
// backward's from its configurations.
Result<std::map<std::string, std::vector<std::byte>>> emulated_objects(const rt::Manifest& m) {
  std::map<std::string, KernelSource> units;
  for (const rt::SupportUnit& u : m.supports) units.emplace(u.code_object, emit_support(*m.target_info, u.dtype));
  for (const rt::ProblemEntry& p : m.problems)
    for (const rt::Bucket& b : p.buckets)
      for (const Variant& v : b.recipe.stages)
        if (launches(b.program, v)) units.emplace(b.code_objects.at(v.name()), emit_variant(v));
  for (const rt::ProblemEntry& p : m.problems)
    for (const rt::Bucket& b : p.backward)
      for (const GradStage& g : b.recipe.grad) units.emplace(b.code_objects.at(g.kernel.name()), FT_TRY(emit_backward(g.kernel)));
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& [file, unit] : units) {
    emu::EmuLibrary lib = FT_TRY(emu::compile_emulated(unit, *m.target_info));
    out.emplace(file, std::move(lib.binary));
  }
  return out;
}

Result<ft_runtime*> open_emulated(const std::string& dir, std::string& device, bool& own_objects) {
  const rt::Manifest m = FT_TRY(rt::read_manifest(dir));
  device = fmt::format("CPU emulator ({})", m.target_info->name);
  own_objects = m.format == "so";
  return open_on_emulator(dir);
}

Result<ft_runtime*> open_gpu(const std::string& dir, const std::string& selector, std::string& device) {
  char err[1024] = {0};
  ft_runtime* rt = nullptr;
  const int st = ft_runtime_open_on(dir.c_str(), selector.c_str(), &rt, err, sizeof err);
  if (st == FT_ERR_DEVICE || st == FT_ERR_TARGET)
    return fail(Errc::no_device, std::string(err) + "; without a GPU of this target, check the launch rules with --emulate", dir);
  if (st != FT_OK) return fail(Errc::invalid_input, err, dir);
  device = rt::runtime_of(rt)->device().info().name;
  return rt;
}

}  // namespace

Result<ft_runtime*> open_on_emulator(const std::string& dir, const DeviceWrap& wrap) {
  const rt::Manifest m = FT_TRY(rt::read_manifest(dir));
  const Target* target = m.target_info;
  auto opener = [&]() -> Result<std::unique_ptr<Device>> {
    std::unique_ptr<Device> d = FT_TRY(emu::EmuDevice::create(*target));
    return wrap ? wrap(std::move(d)) : std::move(d);
  };
  // An export of a search on the emulator ships host libraries: run those
  // (the artifact itself); a GPU export's kernels are rebuilt for the emulator.
  const bool own_objects = m.format == "so";
  auto runtime = FT_TRY(rt::Runtime::open(dir, opener, own_objects ? rt::Runtime::ObjectSource{} : emulated_objects));
  return rt::adopt_runtime(std::move(runtime));
}

int CheckReport::failures() const {
  return int(std::count_if(rows.begin(), rows.end(), [](const CheckRow& r) { return !r.passed; }));
}

std::string CheckReport::table() const {
  std::size_t width = 7;
  for (const CheckRow& r : rows) width = std::max(width, r.problem.size());
  std::string out = fmt::format("{:<{}}  {:<8}  {:>6}  {:>6}  {:<9}  {:<4}  {}\n", "problem", width, "pass", "bucket", "T", "routing",
                                "", "result");
  for (const CheckRow& r : rows)
    out += fmt::format("{:<{}}  {:<8}  {:>6}  {:>6}  {:<9}  {:<4}  {}\n", r.problem, width, r.pass, r.bucket, r.tokens, r.routing,
                       r.passed ? "ok" : "FAIL", r.summary);
  return out;
}

std::vector<int> check_tokens(const std::vector<int>& buckets) {
  std::set<int> t;
  int previous = 0;
  for (int b : buckets) {
    t.insert(b);
    if (b > 2) t.insert((b - 1) % 2 == 1 ? b - 1 : b - 2);         // odd, just below the bucket
    if (b - previous > 4) t.insert(((previous + b) / 2) | 1);      // odd, between two buckets
    previous = b;
  }
  if (!buckets.empty()) t.insert((buckets.back() + std::max(1, buckets.back() / 4)) | 1);  // above the largest
  return {t.begin(), t.end()};
}

Result<CheckReport> check_export(const CheckOptions& o) {
  for (const std::string& r : o.routings)
    if (r != "uniform" && r != "hot" && r != "zipf" && r != "one-empty" && r != "masked")
      return fail(Errc::usage, "unknown routing '" + r + "' (uniform, hot, zipf, one-empty, masked)");
  CheckReport report;
  RuntimeHandle h;
  h.rt = o.emulate ? FT_TRY(open_emulated(o.dir, report.device, report.own_objects)) : FT_TRY(open_gpu(o.dir, o.device, report.device));
  report.target = ft_runtime_target(h.rt);
  bool found = !o.problem;
  for (int p = 0; p < ft_runtime_problem_count(h.rt); ++p) {
    const std::string key = ft_runtime_problem_key(h.rt, p);
    if (o.problem && key != *o.problem) continue;
    found = true;
    std::vector<int> buckets;
    for (int b = 0; b < ft_runtime_bucket_count(h.rt, p); ++b) buckets.push_back(ft_runtime_bucket_tokens(h.rt, p, b));
    const std::vector<int> tokens = o.tokens.empty() ? check_tokens(buckets) : o.tokens;
    ft_plan* first = nullptr;
    if (ft_runtime_select(h.rt, key.c_str(), 1, &first) != FT_OK)
      return fail(Errc::internal, ft_runtime_last_error(h.rt), key);
    const Problem problem = rt::plan_of(first)->problem->problem;
    ft_plan_free(first);
    ProblemWeights weights(h.rt, problem, o.seed);
    if (!weights.error().empty()) return fail(Errc::device, weights.error(), key);
    for (int t : tokens) {
      // The operations the plan at T has, each with why its rows are not checked (empty: they are).
      std::vector<std::pair<const OperationCheck*, std::string>> due;
      ft_plan* plan = nullptr;
      const bool selected = ft_runtime_select(h.rt, key.c_str(), t, &plan) == FT_OK;
      ft_problem_shape shape{};
      if (selected) {
        if (ft_plan_coverage(plan) != FT_COVERAGE_TUNED)
          report.coverage_notes.push_back(key + ": " + ft_plan_coverage_note(plan));
        ft_plan_shape(plan, &shape);
      }
      for (const OperationCheck& c : operation_checks())
        if (!c.planned || (selected && c.planned(plan))) due.emplace_back(&c, selected ? c.unchecked(shape, t) : "");
      if (selected) ft_plan_free(plan);
      for (const auto& [check, unchecked] : due) {
        if (!unchecked.empty()) {
          report.coverage_notes.push_back(key + ": " + unchecked);
          continue;
        }
        for (const std::string& routing : o.routings)
          report.rows.push_back(check_row(check->operation(), h.rt, weights, key, t, routing, o.seed + std::uint64_t(t), o.graph));
      }
    }
  }
  if (!found) return fail(Errc::not_found, "the export has no problem '" + *o.problem + "'", o.dir);
  return report;
}

}  // namespace ft::check
