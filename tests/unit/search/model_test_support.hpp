#pragma once
// Synthetic datasets for the cost model's tests: variants of a made-up target
// (no layer program, so only their parameters and resources are features)
// whose times follow a known law of their parameters, resources and T.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "search/cost_model.hpp"

namespace ft::test {

struct SyntheticVariant {
  int tile = 16, stages = 1, occupancy = 1;
  std::string mode = "a";
  bool flag = false;
  double own = 0;  // an effect of this variant alone (log2), seen by no feature
};

// log2 of the time (us): small tiles win at small T, large ones at large T;
// mode b is twice as slow; more stages, a higher occupancy and the flag off are faster.
inline double law_log2_us(const SyntheticVariant& v, int tokens) {
  const double L = std::log2(double(tokens)), a = std::log2(double(v.tile)) - 5.5;
  return 2 + 0.8 * L + 0.6 * a - 0.15 * a * L + (v.mode == "b" ? 1.0 : 0.0) - 0.5 * std::log2(double(v.stages)) -
         0.5 * std::log2(double(v.occupancy)) + (v.flag ? 0.6 : 0.0) + v.own;
}

struct SyntheticOptions {
  std::vector<int> tokens{1, 16, 64, 512, 4096, 16384};
  double noise = 0.02;      // lognormal sigma of the measured times (natural log)
  double own_spread = 0;    // the variants' own effects, uniform in [-own_spread, own_spread] (log2)
  // A broken feature: applied to each variant's JSON parameters and resources after its time is drawn.
  std::function<void(nlohmann::json&, db::Resources&)> mutate;
  std::uint64_t seed = 3;
};

inline std::vector<SyntheticVariant> synthetic_variants(double own_spread, std::mt19937_64& rng) {
  std::vector<SyntheticVariant> out;
  std::uniform_real_distribution<double> own(-own_spread, own_spread);
  for (int tile : {16, 32, 64, 128})
    for (int stages : {1, 2, 4})
      for (const char* mode : {"a", "b"})
        for (bool flag : {false, true}) {
          SyntheticVariant v{tile, stages, 1 << ((tile / 16 + stages) % 3), mode, flag, 0};
          if (own_spread > 0) v.own = own(rng);
          out.push_back(v);
        }
  return out;
}

inline model::Dataset synthetic_dataset(const SyntheticOptions& opt = {}) {
  std::mt19937_64 rng(opt.seed);
  model::Dataset d;
  d.kind = "moe1";
  d.device_name = "Test GPU";
  d.arch = "synthetic";
  db::DeviceRecord dev;
  dev.id = 1;
  dev.runtime = "cuda";
  dev.name = d.device_name;
  dev.arch = d.arch;
  dev.compute_units = 132;
  d.devices[1] = dev;
  d.problems[1] = {1, "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform", 8, 4096, 14336, 2, "bf16", "swiglu", "uniform"};
  const std::vector<SyntheticVariant> vs = synthetic_variants(opt.own_spread, rng);
  std::normal_distribution<double> noise(0, opt.noise);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    db::VariantRecord r;
    r.id = std::int64_t(i + 1);
    r.kernel_name = "synthetic_" + std::to_string(i);
    r.target = "synthetic";
    r.kind = "moe1";
    r.params = {{"target", "synthetic"}, {"kind", "moe1"}, {"tile", vs[i].tile}, {"stages", vs[i].stages},
                {"mode", vs[i].mode}, {"flag", vs[i].flag}};
    r.resources.occupancy = vs[i].occupancy;
    r.resources.regs = 128;
    if (opt.mutate) opt.mutate(r.params, r.resources);
    d.variants[r.id] = r;
    for (int t : opt.tokens) {
      const double us = std::exp2(law_log2_us(vs[i], t)) * std::exp(noise(rng));
      d.samples.push_back({{r.id, 1, 1, t}, us, 1});
    }
  }
  model::compute_features(d);
  return d;
}

// The samples of one bucket, and of all the others.
inline void split_bucket(const model::Dataset& d, int tokens, std::vector<std::size_t>& held, std::vector<std::size_t>& rest) {
  for (std::size_t i = 0; i < d.samples.size(); ++i) (d.samples[i].at.tokens == tokens ? held : rest).push_back(i);
}

// A synthetic dataset's rows in a store: a run, the device, a toolchain, the
// problem and the variants (ids by the dataset's variant id).
struct StoredDataset {
  std::int64_t run = 0, device = 0, toolchain = 0, problem = 0;
  std::map<std::int64_t, std::int64_t> variants;
};

inline StoredDataset store_dataset(db::Store& store, const model::Dataset& d, const std::string& strategy) {
  StoredDataset ids;
  ids.run = store.begin_run(db::RunRecord::for_this_build("search", strategy)).value();
  ids.device = store.upsert_device(d.devices.begin()->second).value();
  ids.toolchain = store.upsert_toolchain({0, "nvrtc", "nvrtc 13.0", ""}).value();
  db::ProblemRecord p = d.problems.begin()->second;
  p.id = 0;
  ids.problem = store.upsert_problem(p).value();
  for (const auto& [id, v] : d.variants) {
    db::VariantRecord r = v;
    r.id = 0;
    r.toolchain_id = ids.toolchain;
    r.source_hash = "s" + r.kernel_name;
    r.code_object_hash = "c" + r.kernel_name;
    ids.variants[id] = store.upsert_variant(r).value();
  }
  return ids;
}

// The samples `keep` selects as short timings of `run` (the 4096 bucket's as long ones).
inline void store_samples(db::Store& store, const model::Dataset& d, const StoredDataset& ids, std::int64_t run,
                          const std::function<bool(const model::Sample&)>& keep) {
  for (const model::Sample& s : d.samples) {
    if (!keep(s)) continue;
    db::MeasurementRecord m;
    m.run_id = run, m.variant_id = ids.variants.at(s.at.variant_id), m.problem_id = ids.problem, m.device_id = ids.device;
    m.tokens = s.at.tokens;
    m.phase = s.at.tokens == 4096 ? "long" : "short";
    m.median_us = s.time_us, m.p10_us = s.time_us, m.p90_us = s.time_us, m.min_us = s.time_us, m.samples = 5;
    ASSERT_TRUE(store.add_measurement(m));
  }
}

}  // namespace ft::test
