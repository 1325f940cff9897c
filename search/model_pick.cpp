#include "search/model_pick.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace ft::model {
namespace {

std::string seconds(double s) { return s < 10 ? fmt::format("{:.1f} s", s) : fmt::format("{:.0f} s", s); }

Pick everything(std::size_t n, std::string why) {
  Pick p;
  p.chosen.resize(n);
  std::iota(p.chosen.begin(), p.chosen.end(), 0);
  p.everything = true;
  p.why = fmt::format("timed all {}: {}", n, why);
  return p;
}

std::string model_line(const FitReport& r) {
  return fmt::format("model of {} timings in {} buckets, rank correlation {:.2f} in cross-validation", r.samples, r.buckets,
                     r.cv_spearman);
}

}  // namespace

std::string unusable_because(const FitReport& r, const PickOptions& opt) {
  if (r.buckets < opt.min_buckets || r.cv_buckets == 0)
    return fmt::format("the model's timings come from {} bucket(s) (it needs {})", r.buckets,
                       std::max<std::size_t>(2, opt.min_buckets));
  if (r.samples < opt.min_samples)
    return fmt::format("the model has {} timings to learn from (it needs {})", r.samples, opt.min_samples);
  if (r.cv_spearman < opt.min_spearman)
    return fmt::format("the model ranks badly: rank correlation {:.2f} in cross-validation over {} buckets (it needs {:.2f})",
                       r.cv_spearman, r.cv_buckets, opt.min_spearman);
  return {};
}

Pick pick(const Dataset& d, const CostModel* model, const std::string& no_model_why, std::span<const Point> candidates,
          std::optional<std::size_t> baseline, const PickOptions& opt, std::mt19937_64& rng) {
  const std::size_t n = candidates.size();
  if (!model) return everything(n, no_model_why);
  if (std::string why = unusable_because(model->report(), opt); !why.empty()) return everything(n, why);
  std::vector<double> pred(n), cost(n);
  for (std::size_t i = 0; i < n; ++i) {
    pred[i] = model->predict_us(d, candidates[i]);
    cost[i] = opt.overhead_s + (opt.warmup + opt.reps) * pred[i] * 1e-6;
  }
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  if (total <= opt.budget_s) {
    Pick p = everything(n, fmt::format("they fit the budget of {} (predicted {}; {})", seconds(opt.budget_s), seconds(total),
                                       model_line(model->report())));
    p.predicted_us = pred;
    p.predicted_s = total;
    p.top = n;
    return p;
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pred[a] < pred[b]; });
  Pick p;
  p.predicted_us = pred;
  double spent = 0;
  while (p.top < n && (p.top < opt.min_top || spent + cost[order[p.top]] <= opt.budget_s)) spent += cost[order[p.top++]];
  p.chosen.assign(order.begin(), order.begin() + long(p.top));
  std::vector<std::size_t> rest(order.begin() + long(p.top), order.end());
  std::shuffle(rest.begin(), rest.end(), rng);
  for (std::size_t i = 0; i < rest.size() && p.explored < opt.explore; ++i, ++p.explored) {
    p.chosen.push_back(rest[i]);
    spent += cost[rest[i]];
  }
  if (baseline && *baseline < n && std::find(p.chosen.begin(), p.chosen.end(), *baseline) == p.chosen.end()) {
    p.chosen.push_back(*baseline);
    p.baseline_added = true;
    spent += cost[*baseline];
  }
  p.predicted_s = spent;
  p.everything = p.chosen.size() == n;
  p.why = fmt::format("timed {} of {}: the {} predicted fastest, {} at random{} (predicted {} of the {} budget; {})",
                      p.chosen.size(), n, p.top, p.explored, p.baseline_added ? ", the default" : "", seconds(spent),
                      seconds(opt.budget_s), model_line(model->report()));
  return p;
}

Result<Dataset> load_for_bucket(db::Store& store, std::string_view kind, std::int64_t problem_id, std::int64_t device_id,
                                int tokens) {
  std::optional<db::DeviceRecord> device;
  for (const db::DeviceRecord& dev : FT_TRY(store.devices()))
    if (dev.id == device_id) device = dev;
  if (!device) return fail(Errc::not_found, fmt::format("no device row {} in the database", device_id));
  return load_dataset(store, kind, *device, Bucket{problem_id, tokens});
}

Pick pick_for_bucket(const Dataset& d, std::int64_t problem_id, std::int64_t device_id, int tokens,
                     std::span<const std::int64_t> variant_ids, std::optional<std::size_t> baseline, const PickOptions& opt,
                     std::mt19937_64& rng) {
  std::vector<Point> points;
  for (std::int64_t id : variant_ids) points.push_back({id, problem_id, device_id, tokens});
  auto fitted = CostModel::fit(d);
  const std::string why = fitted ? "" : fmt::format("no {} timings on {} to learn from yet", d.kind, d.device_name);
  return pick(d, fitted ? &*fitted : nullptr, why, points, baseline, opt, rng);
}

}  // namespace ft::model
