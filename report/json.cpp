// JSON: everything the report knows, for scripts. Invalid UTF-8 in logs is
// replaced when dumped (render()).
#include <algorithm>

#include "report/report.hpp"

namespace ft::db::report {

namespace {

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const Winner& w) {
  return {{"kernel", w.kernel_name},
          {"median_us", w.timing.median_us},
          {"p10_us", opt(w.timing.p10_us)},
          {"p90_us", opt(w.timing.p90_us)},
          {"toolchain", w.toolchain},
          {"device", w.device},
          {"speedup_vs_default", opt(w.speedup_vs_default)},
          {"run_id", w.run_id},
          {"chosen_at", w.chosen_at}};
}

nlohmann::json to_json(const SourceInfo& s) {
  return {{"path", s.path}, {"devices", s.devices}, {"toolchains", s.toolchains}, {"builds", s.builds}, {"winners", s.winners}};
}

nlohmann::json key_fields(const Key& k) {
  return {{"problem", k.problem}, {"device", k.device}, {"tokens", k.tokens}, {"kind", k.kind}};
}

}  // namespace

nlohmann::json to_json(const Comparison& c, std::span<const Verdict> fail_on) {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [v, n] : c.counts()) counts[std::string(to_string(v))] = n;
  nlohmann::json fail_list = nlohmann::json::array();
  for (Verdict v : fail_on) fail_list.push_back(to_string(v));
  nlohmann::json keys = nlohmann::json::array();
  for (const KeyResult& k : c.keys) {
    nlohmann::json j = key_fields(k.key);
    j["verdict"] = to_string(k.verdict);
    j["fails"] = std::find(fail_on.begin(), fail_on.end(), k.verdict) != fail_on.end();
    j["reason"] = k.reason;
    j["ratio"] = opt(k.ratio);
    j["floor_us"] = opt(k.floor_us);
    j["baseline"] = k.baseline ? to_json(*k.baseline) : nlohmann::json(nullptr);
    j["current"] = k.current ? to_json(*k.current) : nlohmann::json(nullptr);
    j["failures"] = nlohmann::json::array();
    for (const KernelFailure& f : k.failures)
      j["failures"].push_back({{"kernel", f.kernel_name}, {"status", f.status}, {"tokens", opt(f.tokens)},
                               {"phase", f.phase}, {"message", f.message}});
    keys.push_back(std::move(j));
  }
  return {{"report", "compare"},
          {"format_version", 1},
          {"summary", summary_line(c)},
          {"failed", c.fails(fail_on)},
          {"fail_on", fail_list},
          {"threshold", c.threshold},
          {"noise_rule",
           "slower: current median > baseline median * (1 + threshold) and current p10 > baseline p90; faster: "
           "current median < baseline median * (1 - threshold) and current p90 < baseline p10 (intervals widened to "
           "contain the median)"},
          {"baseline", to_json(c.baseline)},
          {"current", to_json(c.current)},
          {"notices", c.notices},
          {"counts", counts},
          {"keys", keys}};
}

nlohmann::json to_json(const Summary& s) {
  nlohmann::json winners = nlohmann::json::array();
  for (const SummaryRow& r : s.winners) {
    nlohmann::json j = key_fields(r.key);
    j["winner"] = to_json(r.winner);
    j["floor_us"] = opt(r.floor_us);
    j["floor_fraction"] = opt(r.floor_fraction);
    winners.push_back(std::move(j));
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const FailedKernel& f : s.failures)
    failures.push_back({{"kernel", f.kernel_name}, {"target", f.target}, {"kind", f.kind}, {"status", f.status},
                        {"problem", f.problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.problem)},
                        {"device", f.device.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.device)},
                        {"tokens", opt(f.tokens)}, {"message", f.message}});
  return {{"report", "summary"},
          {"format_version", 1},
          {"summary", summary_line(s)},
          {"database", to_json(s.source)},
          {"notices", s.notices},
          {"winners", winners},
          {"compile_counts", s.compile_counts},
          {"measurement_counts", s.measurement_counts},
          {"failures", failures}};
}

}  // namespace ft::db::report
