#include "search/verify_space.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "device/runtimes.hpp"
#include "compile/emu_compile.hpp"
#include "emulate/emu_device.hpp"
#include "measure/layer_bench.hpp"
#include "search/compile_space.hpp"
#include "search/progress.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

struct Built {
  Variant variant;
  std::vector<std::byte> binary;
};

struct BuiltSpace {
  std::vector<std::byte> support;
  std::vector<Built> variants;
  std::size_t skipped = 0;
  std::vector<VerifyRow> failures;  // variants that did not compile
};

bool wanted(const VerifyConfig& cfg, const Variant& v) {
  return cfg.variants.empty() || std::find(cfg.variants.begin(), cfg.variants.end(), v.name()) != cfg.variants.end();
}

Result<BuiltSpace> build_for_gpu(const VerifyConfig& cfg, const Target& target) {
  CompileSpaceOptions opt;
  opt.space = cfg.space;
  opt.progress = cfg.progress;
  CompiledSpace cs = FT_TRY(compile_space(target, cfg.problem, opt));
  if (!cs.support) return std::unexpected(with_context(cs.support.error(), "support kernels"));
  BuiltSpace out;
  out.support = cs.support->binary;
  for (auto& cv : cs.variants) {
    if (!wanted(cfg, cv.variant)) continue;
    if (!cv.object) {
      out.failures.push_back({cv.variant.name(), 0, false, 0, 0, "compile error: " + cv.object.error().message});
    } else if (!cv.pruned_because.empty()) {
      ++out.skipped;
    } else {
      out.variants.push_back({cv.variant, cv.object->binary});
    }
  }
  return out;
}

// The same sources through the host compiler, several at a time.
Result<BuiltSpace> build_for_emulator(const VerifyConfig& cfg, const Target& target) {
  Space space = enumerate_space(target, cfg.problem, cfg.space);
  std::vector<KernelSource> sources{emit_support(target, cfg.problem.dtype)};
  std::vector<Variant> variants;
  for (const Variant& v : space.legal)
    if (wanted(cfg, v)) {
      variants.push_back(v);
      sources.push_back(emit_variant(v));
    }
  std::vector<Result<emu::EmuLibrary>> libs(sources.size(), fail(Errc::internal, "not built"));
  std::atomic<std::size_t> next{0};
  Progress bar(fmt::format("compile {} (emulation)", target.name), sources.size(), cfg.progress);
  {
    std::vector<std::jthread> pool;
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned t = 0; t < n; ++t)
      pool.emplace_back([&] {
        for (std::size_t i; (i = next++) < sources.size();) {
          libs[i] = emu::compile_emulated(sources[i], target);
          bar.advance(sources[i].name);
        }
      });
  }
  bar.finish();
  if (!libs[0]) return std::unexpected(with_context(libs[0].error(), "support kernels"));
  BuiltSpace out;
  out.support = libs[0]->binary;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    if (!libs[i + 1]) out.failures.push_back({variants[i].name(), 0, false, 0, 0, "compile error: " + libs[i + 1].error().message});
    else out.variants.push_back({variants[i], libs[i + 1]->binary});
  }
  return out;
}

// The align kernel's output against the CPU: the same padded row count and
// expert blocks, and each expert's run holding exactly its pairs (any order)
// followed by padding.
VerifyRow check_align(const LayerBench::AlignOutput& got, const AlignReference& ref, int tokens, int pairs) {
  VerifyRow row{"align", tokens, false, 0, 0, {}};
  if (got.padded_rows != ref.padded_rows) {
    row.detail = fmt::format("padded rows {} (expected {})", got.padded_rows, ref.padded_rows);
    return row;
  }
  if (got.block_experts != ref.block_experts) {
    row.detail = "block experts differ";
    return row;
  }
  for (std::size_t e = 0; e + 1 < ref.expert_offset.size(); ++e) {
    const int begin = ref.expert_offset[e], end = ref.expert_offset[e + 1];
    std::vector<int> ids(got.sorted_ids.begin() + begin, got.sorted_ids.begin() + end);
    std::vector<int> real, expected = ref.expert_pairs[e];
    for (int id : ids)
      if (id != pairs) real.push_back(id);
    std::sort(real.begin(), real.end());
    std::sort(expected.begin(), expected.end());
    if (real != expected || ids.size() - real.size() != std::size_t(end - begin) - expected.size()) {
      row.detail = fmt::format("expert {}: {} ids in its run, expected {}", e, real.size(), expected.size());
      return row;
    }
  }
  row.passed = true;
  row.detail = fmt::format("{} padded rows, {} blocks", got.padded_rows, got.block_experts.size());
  return row;
}

}  // namespace

nlohmann::json VerifyReport::to_json() const {
  nlohmann::json j{{"device", device}, {"target", target}, {"failures", failures}, {"skipped", skipped},
                   {"seconds", seconds}, {"checks", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["checks"].push_back({{"check", r.check}, {"tokens", r.tokens}, {"passed", r.passed}, {"rel_l2", r.rel_l2},
                           {"max_abs", r.max_abs}, {"detail", r.detail}});
  return j;
}

Result<VerifyReport> verify_space(const VerifyConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  FT_CHECK(cfg.problem.validate());
  VerifyReport report;
  std::unique_ptr<Device> device;
  const Target* target = nullptr;
  if (cfg.emulate) {
    if (cfg.target.empty())
      return fail(Errc::usage, fmt::format("--emulate needs --target ({})", known_target_names(" or ")));
    target = FT_TRY(lookup_target(cfg.target));
    device = FT_TRY(emu::EmuDevice::create(*target));
  } else {
    device = FT_TRY(open_device(cfg.device_selector));
    target = find_target(device->info().arch);
    if (!target) return fail(Errc::invalid_input, fmt::format("the GPU {} is {}, which flytune has no target for", device->info().name, device->info().arch));
    if (!cfg.target.empty() && cfg.target != target->name)
      return fail(Errc::invalid_input, fmt::format("--target {} does not match the GPU {} ({}); use --emulate to run {} on the CPU",
                                                   cfg.target, device->info().name, target->name, cfg.target));
  }
  report.device = cfg.emulate ? fmt::format("CPU emulation of {}", target->name) : device->info().name;
  report.target = std::string(target->name);

  BuiltSpace built = FT_TRY(cfg.emulate ? build_for_emulator(cfg, *target) : build_for_gpu(cfg, *target));
  report.skipped = built.skipped;
  for (auto& f : built.failures) report.rows.push_back(f);

  const int max_tokens = *std::max_element(cfg.tokens.begin(), cfg.tokens.end());
  auto bench = FT_TRY(LayerBench::create(*device, cfg.problem, *target, built.support, max_tokens));
  std::vector<FunctionHandle> fns;
  for (const Built& b : built.variants) fns.push_back(FT_TRY(bench->load(b.binary, b.variant.name(), b.variant.lds_limit())));

  const std::uint64_t base_seed =
      cfg.seed ? cfg.seed : std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  Progress bar("verify", cfg.tokens.size() * (built.variants.size() + 2), cfg.progress);
  for (int tokens : cfg.tokens) {
    WorkloadOptions wo;
    wo.seed = base_seed + std::uint64_t(tokens) * 7919;
    // One expert without tokens where the routing allows it (ragged loads, an empty run).
    wo.empty_experts = cfg.problem.experts > cfg.problem.topk && cfg.problem.routing.kind != Routing::Kind::replay ? 1 : 0;
    Routed routed = FT_TRY(make_routing(cfg.problem, tokens, wo));
    FT_CHECK(bench->set_inputs(tokens, wo.seed, routed.ids, routed.weights));

    Workload w;
    w.problem = cfg.problem;
    w.tokens = tokens;
    w.seed = wo.seed;
    w.topk_ids = routed.ids;
    w.topk_weights = routed.weights;
    for (int block : {16, 64}) {
      auto got = bench->run_align_only(block);
      VerifyRow row = got ? check_align(*got, reference_align(w, block), tokens, tokens * cfg.problem.topk)
                          : VerifyRow{"align", tokens, false, 0, 0, got.error().describe()};
      row.check = fmt::format("align (block {})", block);
      report.rows.push_back(row);
    }
    bar.advance("align");

    if (tokens <= cfg.cpu_reference_max_tokens) {
      // The device reference against the CPU reference on the very same inputs.
      FT_CHECK(bench->download_inputs(w));
      for (bool w1 : {false, true}) {
        ReferenceOptions ro;
        ro.weight_in_stage1 = w1;
        ReferenceOutput cpu = reference_layer(w, ro);
        auto dev_y = FT_TRY(bench->reference_output(w1));
        Comparison c = compare_output(dev_y, cpu.y, cfg.problem.dtype);
        report.rows.push_back({fmt::format("reference vs CPU (routed weight in stage {})", w1 ? 1 : 2), tokens, c.passed,
                               c.rel_l2, c.max_abs, c.summary(std::size_t(cfg.problem.hidden))});
      }
    }
    bar.advance("reference");

    for (std::size_t i = 0; i < built.variants.size(); ++i) {
      const Variant& v = built.variants[i].variant;
      auto c = bench->verify_stage(v, fns[i]);
      if (c) report.rows.push_back({v.name(), tokens, c->passed, c->rel_l2, c->max_abs,
                                    c->summary(std::size_t(v.role == StageRole::stage1 ? cfg.problem.inter : cfg.problem.hidden))});
      else report.rows.push_back({v.name(), tokens, false, 0, 0, c.error().describe()});
      bar.advance(v.name());
    }
  }
  bar.finish();
  report.failures = std::size_t(std::count_if(report.rows.begin(), report.rows.end(), [](const VerifyRow& r) { return !r.passed; }));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace ft
