#pragma once
// flytune db's options and its read-only views (internal to cli/): runs,
// winners, statistics, variants and the schema, as tables or JSON
// (cli/db_views.cpp); cli/cmd_db.cpp parses the command and runs the others
// (snapshot, merge, model-check: cli/db_model_check.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "search/model_pick.hpp"
#include "store/store.hpp"

namespace ft::cli {

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
  std::string pass;  // winners: "forward" or "backward"; empty: both
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

Status show_runs(db::Store& store, const DbOptions& opt);
Status show_winners(db::Store& store, const DbOptions& opt);
Status show_stats(db::Store& store, const DbOptions& opt);
Status show_variants(db::Store& store, const DbOptions& opt);
Status show_schema(db::Store& store, const DbOptions& opt);

}  // namespace ft::cli
