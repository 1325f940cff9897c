#pragma once
// flytune db's options and its read-only views (internal to cli/): runs,
// winners, statistics, variants and the schema, as tables or JSON
// (cli/db_views.cpp); cli/cmd_db.cpp parses the command and runs the others
// (snapshot, merge, model-check).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "search/model_check.hpp"
#include "store/store.hpp"

namespace ft::cli::dbcmd {

enum class DbView { runs, winners, stats, variants, schema, snapshot, merge, model_check };

struct DbOptions {
  std::string db = "./flytune.db";
  bool json = false;
  DbView view = DbView::runs;
  // Filters (winners, variants).
  std::string problem;
  std::string target;
  int tokens = 0;  // 0: every bucket
  std::string kind;
  std::string status;
  int limit = 0;
  bool sql = false;  // schema: print the CREATE statements
  std::string out;   // snapshot: the new file; merge: the merged database
  std::vector<std::string> inputs;  // merge: the databases to merge into `out`
  // model-check: the replay and the pick's options (the search's defaults).
  std::string mode = "loo";
  model::PickOptions pick;
  std::uint64_t seed = 1;
};

// A text table: columns padded to their widest cell; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::string right_aligned = {})
      : right_(std::move(right_aligned)) {
    rows_.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.size() == 1; }
  void print(std::string_view indent = {}) const {
    std::vector<std::size_t> width(rows_[0].size(), 0);
    for (const auto& r : rows_)
      for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    for (const auto& r : rows_) {
      std::string line(indent);
      for (std::size_t c = 0; c < r.size(); ++c) {
        bool right = c < right_.size() && right_[c] == 'r';
        bool last = c + 1 == r.size();
        if (right) line += fmt::format("{:>{}}", r[c], width[c]);
        else line += last ? r[c] : fmt::format("{:<{}}", r[c], width[c]);
        if (!last) line += "  ";
      }
      fmt::print("{}\n", line);
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
  std::string right_;  // per column: 'r' right-aligned, anything else left
};


std::string opt_text(const std::optional<double>& v, std::string_view spec = "{:.1f}");
std::string opt_text(const std::optional<int>& v);
template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

Status show_runs(db::Store& store, const DbOptions& opt);
Status show_winners(db::Store& store, const DbOptions& opt);
Status show_stats(db::Store& store, const DbOptions& opt);
Status show_variants(db::Store& store, const DbOptions& opt);
Status show_schema(db::Store& store, const DbOptions& opt);

}  // namespace ft::cli::dbcmd
