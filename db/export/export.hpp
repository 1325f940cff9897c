#pragma once
// Export: the tuned layer winners of a database as a folder a serving process
// can load without flytune -- manifest.json (schema: docs/EXPORT.md), the code
// objects named by content hash, and flytune_dispatch.h (the same dispatch
// table as a C header). runtime/ loads such a folder.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generator/error.hpp"

namespace ft::db {

inline constexpr int kManifestSchemaVersion = 1;

struct ExportOptions {
  std::string db_path;
  std::string out_dir;                // created if missing; an existing manifest.json is replaced
  std::optional<std::string> target;  // only winners measured on this arch ("sm_90a")
  std::optional<std::string> device;  // only winners measured on a device of this name ("NVIDIA H200")
};

struct ExportSummary {
  std::string manifest_path;
  std::string header_path;
  std::string target;
  std::string device;
  int problems = 0;
  int buckets = 0;        // (problem, token bucket) entries
  int code_objects = 0;   // files written, the support unit included
  bool support_compiled = false;  // the database lacked the support unit; export compiled it
  std::vector<std::string> notes; // what the user should know (toolchain differences, ...)
};

// Reads the database read-only; writes nothing unless every winner's code
// object exists and hashes to its recorded name.
Result<ExportSummary> export_winners(const ExportOptions& opt);

// The manifest as JSON and the dispatch header text, without touching the file
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
std::string dispatch_header(const nlohmann::json& manifest);

// Coverage of requested token counts by tuned layer winners.
struct CoverageLine {
  std::string problem_key;
  std::string device;        // device name and arch
  int tokens = 0;            // requested token count
  std::optional<int> bucket; // the bucket the runtime uses; nullopt: no layer winner at all
  std::string rule;          // "tuned", "next bucket up", "largest bucket", "no layer winner: refused"
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

// The bucket the runtime serves `tokens` with: the smallest tuned bucket that
// is >= tokens, else the largest. `buckets` sorted ascending, non-empty.
int select_bucket(const std::vector<int>& buckets, int tokens);

}  // namespace ft::db
