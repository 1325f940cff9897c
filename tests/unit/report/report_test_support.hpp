#pragma once
// Building baseline/current databases for the report tests with the Store API,
// and the standard pair whose every key has a known verdict (kExpected).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "report/report.hpp"
#include "store/store.hpp"

namespace ft::test {

inline constexpr const char* kMixtral = "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform";

struct DeviceSpec {
  std::string name = "NVIDIA H200";
  std::string arch = "sm_90a";
  std::string driver = "580.95.05";
  std::string runtime = "13.0";
};

struct ToolchainSpec {
  std::string backend = "nvrtc";
  std::string version = "13.0";
};

// One database with one run, one device and one toolchain; helpers add
// variants, measurements and winners. Every call checks that the store agreed.
class TestDb {
 public:
  TestDb(const std::string& path, DeviceSpec device = {}, ToolchainSpec toolchain = {}) : arch_(device.arch) {
    auto s = db::Store::open(path, db::OpenMode::create);
    if (!s) {
      ADD_FAILURE() << s.error().describe();
      return;
    }
    store_.emplace(std::move(*s));
    run_ = store_->begin_run(db::RunRecord::for_this_build("flytune search --problem mixtral-8x7b", "halving")).value();
    DeviceInfo info;
    info.runtime = device.arch.starts_with("sm_") ? "cuda" : "hip";
    info.name = device.name;
    info.arch = device.arch;
    info.compute_units = 132;
    info.driver_version = device.driver;
    info.runtime_version = device.runtime;
    device_ = store_->upsert_device(db::DeviceRecord::from(info)).value();
    toolchain_ = store_->upsert_toolchain({0, toolchain.backend, toolchain.version, "libnvrtc.so.13"}).value();
    problem(kMixtral);
  }
  ~TestDb() {
    if (store_) {
      EXPECT_TRUE(store_->end_run(run_, db::RunStatus::finished));
    }
  }

  std::int64_t problem(const std::string& key) {
    if (auto it = problems_.find(key); it != problems_.end()) return it->second;
    db::ProblemRecord p{0, key, 8, 4096, 14336, 2, "bf16", "swiglu", "uniform"};
    return problems_[key] = store_->upsert_problem(p).value();
  }

  // A variant that compiled, or failed to with `compile_log`.
  std::int64_t variant(const std::string& name, const std::string& kind = "moe1",
                       std::optional<std::string> compile_log = std::nullopt, nlohmann::json params = nlohmann::json::object()) {
    db::VariantRecord v;
    v.kernel_name = name;
    v.target = arch_;
    v.kind = kind;
    v.params = std::move(params);
    v.source_hash = "src-" + name;
    v.toolchain_id = toolchain_;
    if (compile_log) {
      v.compile_status = db::CompileStatus::compile_error;
      v.compile_log = *compile_log;
    } else {
      v.code_object_hash = "co-" + name;
    }
    return variants_[name] = store_->upsert_variant(v).value();
  }

  // A layer variant named "s1+s2" with its stage kernels in params.
  std::int64_t layer_variant(const std::string& stage1, const std::string& stage2) {
    if (!variants_.contains(stage1)) variant(stage1, "moe1");
    if (!variants_.contains(stage2)) variant(stage2, "moe2");
    return variant(stage1 + "+" + stage2, "layer", std::nullopt,
                   {{"stage1", nlohmann::json::object()}, {"stage2", nlohmann::json::object()},
                    {"stage1_kernel", stage1}, {"stage2_kernel", stage2}});
  }

  void measure(const std::string& name, int tokens, std::optional<double> median, std::optional<double> p10 = {},
               std::optional<double> p90 = {}, db::MeasurementStatus status = db::MeasurementStatus::ok,
               const std::string& phase = "ab", const std::string& message = {}, const std::string& problem_key = kMixtral) {
    db::MeasurementRecord m;
    m.run_id = run_;
    m.variant_id = variants_.at(name);
    m.problem_id = problem(problem_key);
    m.device_id = device_;
    m.tokens = tokens;
    m.phase = phase;
    m.status = status;
    m.error_message = message;
    m.median_us = median;
    m.p10_us = p10;
    m.p90_us = p90;
    m.samples = median ? 50 : 0;
    EXPECT_TRUE(store_->add_measurement(m));
  }

  // A winner with its own measurement (so the kernel's latest result is ok).
  void winner(const std::string& name, const std::string& kind, int tokens, double median,
              std::optional<double> p10 = {}, std::optional<double> p90 = {}, std::optional<double> speedup = {},
              const std::string& problem_key = kMixtral) {
    if (!variants_.contains(name)) variant(name, kind);
    measure(name, tokens, median, p10, p90, db::MeasurementStatus::ok, kind == "layer" ? "layer" : "ab", {}, problem_key);
    db::WinnerRecord w;
    w.problem_id = problem(problem_key);
    w.device_id = device_;
    w.tokens = tokens;
    w.kind = kind;
    w.variant_id = variants_.at(name);
    w.run_id = run_;
    w.median_us = median;
    w.p10_us = p10;
    w.p90_us = p90;
    w.speedup_vs_default = speedup;
    EXPECT_TRUE(store_->set_winner(w));
  }

  db::Store& store() { return *store_; }

 private:
  std::optional<db::Store> store_;
  std::string arch_;
  std::int64_t run_ = 0, device_ = 0, toolchain_ = 0;
  std::map<std::string, std::int64_t> problems_, variants_;
};

// Kernel names of the standard pair.
inline constexpr const char* kA = "ft_sm_90a_moe1_bf16_m64n128k32_w2x2_mma16x8x16_s2";
inline constexpr const char* kB = "ft_sm_90a_moe1_bf16_m64n64k32_w2x2_mma16x8x16_s2";
inline constexpr const char* kC = "ft_sm_90a_moe2_bf16_m64n64k64_w1x4_mma16x8x16_s2_partials";
inline constexpr const char* kD = "ft_sm_90a_moe2_bf16_m64n128k64_w2x2_mma16x8x16_s2_atomic";
inline constexpr const char* kE = "ft_sm_90a_moe2_bf16_m128n128k64_w2x2_mma16x8x16_s3_atomic";
inline constexpr const char* kF = "ft_sm_90a_moe2_bf16_m32n64k64_w1x2_mma16x8x16_s2_atomic";
inline constexpr const char* kG = "ft_sm_90a_moe1_bf16_m32n64k32_w1x2_mma16x8x16_s2";
inline constexpr const char* kH = "ft_sm_90a_moe2_bf16_m32n128k64_w1x4_mma16x8x16_s2_partials";
inline constexpr const char* kI = "ft_sm_90a_moe2_bf16_m64n64k64_w2x2_mma16x8x16_s1_atomic";

struct ExpectedKey {
  std::string kind;
  int tokens;
  db::report::Verdict verdict;
};

// The standard pair's keys (problem kMixtral on "NVIDIA H200 (sm_90a)").
inline const std::vector<ExpectedKey> kExpected{
    {"moe1", 1, db::report::Verdict::unchanged},       // 0.5% slower: noise
    {"moe1", 16, db::report::Verdict::regression},     // 30% slower, intervals disjoint
    {"moe1", 64, db::report::Verdict::improvement},    // 25% faster with a new winner
    {"moe1", 512, db::report::Verdict::unchanged},     // 12% slower but p10-p90 overlap
    {"moe1", 4096, db::report::Verdict::unchanged},    // disjoint but only 4% slower
    {"moe1", 16384, db::report::Verdict::new_key},     // only in current
    {"moe2", 1, db::report::Verdict::broken},          // baseline winner E no longer compiles
    {"moe2", 16, db::report::Verdict::missing},        // only in baseline, kernel C still fine
    {"moe2", 64, db::report::Verdict::broken},         // baseline winner D fails verification
    {"moe2", 512, db::report::Verdict::regression},    // 10% slower, no spread recorded
    {"layer", 16, db::report::Verdict::broken},        // stage kernel H times out at T=16
    {"layer", 64, db::report::Verdict::unchanged},     // same layer, same time
};

inline void fill_baseline(TestDb& db) {
  db.winner(kA, "moe1", 1, 100, 98, 103, 1.4);
  db.winner(kA, "moe1", 16, 100, 98, 103, 1.5);
  db.winner(kA, "moe1", 64, 200, 196, 206);
  db.winner(kA, "moe1", 512, 50, 40, 60);
  db.winner(kA, "moe1", 4096, 1000, 990, 1010);
  db.winner(kE, "moe2", 1, 70, 69, 71);
  db.winner(kC, "moe2", 16, 80, 79, 81);
  db.winner(kD, "moe2", 64, 90, 89, 91);
  db.winner(kI, "moe2", 512, 100);
  db.layer_variant(kG, kH);
  db.winner(std::string(kG) + "+" + kH, "layer", 16, 300, 295, 305);
  db.layer_variant(kA, kC);
  db.winner(std::string(kA) + "+" + kC, "layer", 64, 400, 395, 405);
}

inline void fill_current(TestDb& db) {
  db.winner(kA, "moe1", 1, 100.5, 98.5, 103.5, 1.4);
  db.winner(kA, "moe1", 16, 130, 127, 134, 1.2);
  db.winner(kB, "moe1", 64, 150, 147, 154);
  db.winner(kA, "moe1", 512, 56, 45, 66);
  db.winner(kA, "moe1", 4096, 1040, 1035, 1045);
  db.winner(kA, "moe1", 16384, 5000, 4950, 5050);
  // E now fails to compile; F wins instead.
  db.variant(kE, "moe2", "ptxas error   : Entry function uses too much shared data (0x31000 bytes, 0xc000 max)");
  db.winner(kF, "moe2", 1, 75, 74, 76);
  // C still compiles and verifies, but has no winner at T=16.
  db.variant(kC, "moe2");
  db.measure(kC, 37, std::nullopt, {}, {}, db::MeasurementStatus::ok, "verify");
  // D fails verification (at the verify token count, not a bucket); no winner at T=64.
  db.variant(kD, "moe2");
  db.measure(kD, 37, std::nullopt, {}, {}, db::MeasurementStatus::verify_failed, "verify",
             "rel L2 error 0.31 > 0.01 <max abs 4.5 at [3, 17]> & \"bad\"");
  db.winner(kI, "moe2", 512, 110);
  db.layer_variant(kG, kH);
  db.measure(kH, 16, std::nullopt, {}, {}, db::MeasurementStatus::timeout, "short", "watchdog: 120 s");
  db.layer_variant(kA, kC);
  db.winner(std::string(kA) + "+" + kC, "layer", 64, 400, 395, 405);
}

}  // namespace ft::test
