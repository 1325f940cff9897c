#pragma once
// Export: the tuned layer winners of a database as a folder a serving process
// can load without flytune -- manifest.json (schema: docs/EXPORT.md), the code
// objects named by content hash, and flytune_dispatch.h (the same dispatch
// table as a C header). runtime/ loads such a folder.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "manifest/manifest.hpp"

namespace ft::db {

struct ExportOptions {
  std::string db_path;
  std::string out_dir;                // created; a folder that holds anything is refused unless `force`
  std::optional<std::string> target;  // only winners measured on this arch ("sm_90a")
  std::optional<std::string> device;  // only winners measured on a device of this name ("NVIDIA H200")
  bool force = false;                 // replace what out_dir holds (atomically, see export_winners)
  // Run on the complete export in a staging folder before it takes out_dir's
  // place; an error leaves out_dir as it was (check-export through the runtime).
  std::function<Status(const std::string& staged_dir)> check;
  std::optional<std::string> problem;  // only winners of this problem key (a database may hold several)
  // Export even when token buckets of an exported problem have stage winners
  // but no layer winner (the manifest's missing_buckets lists them, and the
  // runtime says when it serves a T with another bucket's kernels because of
  // one); without it such a database is refused, naming the buckets.
  bool allow_missing = false;
};

struct ExportSummary {
  std::string manifest_path;
  std::string header_path;
  std::string target;
  std::string device;
  int problems = 0;
  int buckets = 0;        // (problem, token bucket) entries
  int backward_buckets = 0;  // (problem, token bucket) entries of the backward (pass backward winners)
  int code_objects = 0;   // files written, the support unit included
  bool support_compiled = false;  // the database lacked the support unit; export compiled it
  std::vector<std::string> notes; // what the user should know (toolchain differences, ...)
  // "<problem key> T=<tokens>" of every bucket without a layer in the export
  // (only with allow_missing; otherwise the export is refused).
  std::vector<std::string> missing;
};

// Reads the database read-only; writes nothing unless every winner's code
// object exists and hashes to its recorded name. The export is written to a
// staging folder beside out_dir, checked (options.check), then renamed into
// place; with `force` it is exchanged with out_dir's old contents in one
// rename (renameat2 RENAME_EXCHANGE where the file system has it), so a
// reader never sees new code objects beside an old manifest.
Result<ExportSummary> export_winners(const ExportOptions& opt);

// The manifest as JSON (manifest::encode) and the dispatch header text, without touching the file
// system beyond reading the database (and compiling the support unit where the
// database lacks it). `objects` receives (file name, bytes) of every code object.
struct ExportContents {
  nlohmann::json manifest;
  std::string dispatch_header;
  std::vector<std::pair<std::string, std::vector<std::byte>>> objects;
  ExportSummary summary;
};
Result<ExportContents> build_export(const ExportOptions& opt);

// The C header with the manifest's dispatch table.
std::string dispatch_header(const manifest::Manifest& manifest);

// Coverage of requested token counts by tuned layer winners.
struct CoverageLine {
  std::string problem_key;
  std::string device;        // device name and arch
  int tokens = 0;            // requested token count
  std::optional<int> bucket; // the bucket the runtime uses; nullopt: no layer winner at all
  std::string rule;          // "tuned", "next bucket up", "largest bucket", "missing layer", "no layer winner: refused"
  // "missing layer": the bucket that would serve T has stage winners but no
  // layer winner; the runtime serves T with `bucket`, another bucket's kernels.
  std::optional<int> missing_bucket;
};
struct CoverageReport {
  std::vector<int> requested;
  std::vector<CoverageLine> lines;  // every (problem, device, requested T)
  // Buckets with stage winners (moe1/moe2) but no layer winner: export skips them.
  std::vector<std::string> incomplete_buckets;
  int untuned() const;              // lines whose rule is not "tuned"
};
Result<CoverageReport> check_coverage(const std::string& db_path, const std::vector<int>& tokens,
                                      const std::optional<std::string>& target = {},
                                      const std::optional<std::string>& device = {});

// The token buckets of (problem, device) rows that have stage winners but no
// layer winner, by problem key (the buckets a search left without a layer).
struct MissingLayers {
  std::map<std::string, std::set<int>> by_problem;
  bool empty() const { return by_problem.empty(); }
  // "mixtral-... T=16384, T=4096; other-key T=1"
  std::string describe() const;
};

}  // namespace ft::db
