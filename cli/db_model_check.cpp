// flytune db model-check's output (cli/db_model_check.hpp).
#include "cli/db_model_check.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/table.hpp"

namespace ft::cli {
namespace {

nlohmann::json to_json(const model::CheckReport& rep) {
  nlohmann::json buckets = nlohmann::json::array(), methods = nlohmann::json::array();
  for (const model::BucketCheck& b : rep.buckets)
    buckets.push_back({{"problem", b.problem_key}, {"device", b.device}, {"kind", b.kind}, {"tokens", b.tokens},
                       {"candidates", b.candidates}, {"timed", b.timed}, {"model_used", b.model_used},
                       {"winner_rank", b.winner_rank == 0 ? nlohmann::json(nullptr) : nlohmann::json(b.winner_rank)},
                       {"winner_timed", b.winner_timed}, {"best_ratio", b.best_ratio}, {"saved", b.saved},
                       {"spearman", b.spearman}, {"cost_ratio", b.cost_ratio}, {"winner", b.winner},
                       {"best_timed", b.best_timed}, {"pick", b.why}});
  for (const model::MethodCheck& m : rep.methods) {
    nlohmann::json top = nlohmann::json::array();
    for (std::size_t k = 0; k < rep.top_n.size() && k < m.in_top.size(); ++k)
      top.push_back({{"n", rep.top_n[k]}, {"winner_in_top", m.in_top[k]}, {"worst_ratio", m.worst_ratio[k]}});
    methods.push_back({{"method", m.method}, {"buckets", m.buckets}, {"top", top}, {"mean_spearman", m.mean_spearman}});
  }
  return {{"mode", rep.mode == model::CheckMode::search ? "search" : "loo"}, {"devices", rep.devices},
          {"buckets", buckets}, {"methods", methods}};
}

// The summary lines under the bucket table: the search's pick over all
// buckets, then each method's top-N counts.
void print_check_summary(const model::CheckReport& rep) {
  std::size_t timed_winner = 0, used = 0, candidates = 0, timed = 0;
  double worst = 1, ratio_sum = 0, saved_sum = 0;
  for (const model::BucketCheck& b : rep.buckets) {
    timed_winner += b.winner_timed ? 1 : 0;
    used += b.model_used ? 1 : 0;
    candidates += b.candidates;
    timed += b.timed;
    worst = std::max(worst, b.best_ratio);
    ratio_sum += b.best_ratio;
    saved_sum += b.saved;
  }
  const double n = double(rep.buckets.size());
  fmt::print("\n{} bucket(s), the model's pick used in {}: the winner timed in {} ({:.0f}%); fastest timed / winner: mean "
             "{:.3f}, worst {:.3f}; timing saved: {:.0f}% of the short timing ({} of {} candidates timed)\n",
             rep.buckets.size(), used, timed_winner, 100.0 * double(timed_winner) / n, ratio_sum / n, worst,
             100.0 * saved_sum / n, timed, candidates);
  fmt::print("\nthe winner among the model's N fastest (buckets with a model), worst fastest-of-N / winner:\n");
  std::vector<std::string> header{"method", "buckets"};
  for (std::size_t top : rep.top_n) header.push_back(fmt::format("N={}", top));
  header.push_back("rank corr");
  Table t(header, ".rrrrrrrrrr");
  for (const model::MethodCheck& m : rep.methods) {
    std::vector<std::string> row{m.method, std::to_string(m.buckets)};
    for (std::size_t k = 0; k < m.in_top.size(); ++k)
      row.push_back(fmt::format("{}/{} {:.3f}", m.in_top[k], m.buckets, m.worst_ratio[k]));
    row.push_back(fmt::format("{:.2f}", m.mean_spearman));
    t.add(std::move(row));
  }
  t.print("  ");
}

}  // namespace

Status print_model_check(db::Store& store, const model::CheckOptions& co, bool json) {
  const model::CheckReport rep = FT_TRY(model::check_model(store, co));
  if (json) {
    fmt::print("{}\n", to_json(rep).dump(2));
    return {};
  }
  if (rep.buckets.empty()) {
    fmt::print("no bucket of {} has {} or more stage timings to check the model on\n", store.path(), co.min_candidates);
    return {};
  }
  fmt::print("model check of {} on {}: {}\n", store.path(), fmt::join(rep.devices, ", "),
             co.mode == model::CheckMode::search
                 ? "the search replayed (each bucket predicted from other problems and this one's smaller buckets, "
                   "only what their picks timed)"
                 : "each bucket predicted by a model fitted without it");
  fmt::print("pick: the model's fastest within {:g} s of short timing (at least {}), {} at random, the default variant\n\n",
             co.pick.budget_s, co.pick.min_top, co.pick.explore);
  Table t({"problem", "kind", "tokens", "candidates", "timed", "saved", "winner's rank", "winner timed", "fastest timed / winner",
           "cost predicted / measured", "pick"},
          "..rrrrrrrr");
  for (const model::BucketCheck& b : rep.buckets)
    t.add({b.problem_key, b.kind, std::to_string(b.tokens), std::to_string(b.candidates), std::to_string(b.timed),
           fmt::format("{:.0f}%", 100 * b.saved), b.winner_rank ? std::to_string(b.winner_rank) : "-",
           b.winner_timed ? "yes" : "no", fmt::format("{:.3f}", b.best_ratio),
           b.cost_ratio > 0 ? fmt::format("{:.2f}", b.cost_ratio) : "-", b.why});
  t.print("  ");
  print_check_summary(rep);
  return {};
}


}  // namespace ft::cli
