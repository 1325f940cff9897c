#include "generator/space_sample.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

namespace ft {
namespace {

// One thing a sample must hold: a value of an axis (b = -1), or a pair of
// values of axes a < b, in the variants of one family and stage role.
using Fact = std::tuple<const Family*, int /*role*/, int /*a*/, AxisValue, int /*b*/, AxisValue>;

// The axes each (family, role) varies over in `legal`: the axes present in
// two of its variants with different values. A pair with an axis that does
// not vary is covered with the other axis's value, so only these pair up.
std::map<std::pair<const Family*, int>, std::vector<bool>> varying_axes(std::span<const Variant> legal) {
  std::map<std::pair<const Family*, int>, std::vector<std::set<AxisValue>>> seen;
  for (const Variant& v : legal) {
    auto& sets = seen[{v.family, int(v.role)}];
    const auto axes = v.family->axes();
    sets.resize(axes.size());
    for (std::size_t i = 0; i < axes.size(); ++i)
      if (axes[i].present_in(v)) sets[i].insert(v.values[i]);
  }
  std::map<std::pair<const Family*, int>, std::vector<bool>> out;
  for (const auto& [key, sets] : seen) {
    auto& varying = out[key];
    for (const auto& s : sets) varying.push_back(s.size() > 1);
  }
  return out;
}

// Every fact of each variant, as indices into one numbering of the facts.
std::vector<std::vector<int>> facts_of(std::span<const Variant> legal, std::size_t& values, std::size_t& pairs) {
  const auto varying = varying_axes(legal);
  std::map<Fact, int> ids;
  std::vector<std::vector<int>> out(legal.size());
  values = pairs = 0;
  for (std::size_t k = 0; k < legal.size(); ++k) {
    const Variant& v = legal[k];
    const auto axes = v.family->axes();
    const auto& vary = varying.at({v.family, int(v.role)});
    std::vector<int> present;
    for (std::size_t i = 0; i < axes.size(); ++i)
      if (axes[i].present_in(v)) present.push_back(int(i));
    auto add = [&](const Fact& f) {
      auto [it, added] = ids.emplace(f, int(ids.size()));
      if (added) ++(std::get<4>(f) < 0 ? values : pairs);
      out[k].push_back(it->second);
    };
    for (std::size_t x = 0; x < present.size(); ++x) {
      const int a = present[x];
      add({v.family, int(v.role), a, v.values[a], -1, 0});
      if (!vary[a]) continue;
      for (std::size_t y = x + 1; y < present.size(); ++y) {
        const int b = present[y];
        if (!vary[b]) continue;
        add({v.family, int(v.role), a, v.values[a], b, v.values[b]});
      }
    }
  }
  return out;
}

}  // namespace

SampleCoverage coverage_of(std::span<const Variant> legal) {
  SampleCoverage c;
  facts_of(legal, c.values, c.pairs);
  return c;
}

std::vector<Variant> covering_sample(std::span<const Variant> legal) {
  std::size_t values = 0, pairs = 0;
  const auto facts = facts_of(legal, values, pairs);
  std::vector<bool> covered(values + pairs, false);
  auto gain = [&](std::size_t k) {
    int g = 0;
    for (int f : facts[k]) g += !covered[f];
    return g;
  };
  // Lazy greedy: a variant's gain only falls as others are picked, so a
  // queued gain is an upper bound; the top is picked once its recomputed gain
  // still beats every other bound. (gain, -index) orders ties by enumeration.
  std::priority_queue<std::pair<int, long>> queue;
  for (std::size_t k = 0; k < legal.size(); ++k) queue.push({int(facts[k].size()), -long(k)});
  std::size_t left = values + pairs;
  std::vector<std::size_t> picked;
  while (left > 0 && !queue.empty()) {
    auto [bound, neg] = queue.top();
    queue.pop();
    const std::size_t k = std::size_t(-neg);
    const int g = gain(k);
    if (g == 0) continue;
    if (!queue.empty() && std::pair{g, neg} < queue.top()) {
      queue.push({g, neg});
      continue;
    }
    picked.push_back(k);
    for (int f : facts[k])
      if (!covered[f]) {
        covered[f] = true;
        --left;
      }
  }
  std::sort(picked.begin(), picked.end());
  std::vector<Variant> out;
  out.reserve(picked.size());
  for (std::size_t k : picked) out.push_back(legal[k]);
  return out;
}

}  // namespace ft
