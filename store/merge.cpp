#include "store/merge.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "store/store.hpp"

namespace ft::db {
namespace {

using IdMap = std::unordered_map<std::int64_t, std::int64_t>;

struct CodeObject {
  std::string hash, format;
  std::vector<std::byte> bytes;
};

// Everything an input holds, read before OUT is written.
struct InputData {
  std::string path;
  std::vector<RunRecord> runs;
  std::vector<DeviceRecord> devices;
  std::vector<ToolchainRecord> toolchains;
  std::vector<ProblemRecord> problems;
  std::vector<VariantRecord> variants;
  std::vector<CodeObject> code_objects;
  std::vector<MeasurementRecord> measurements;
  std::vector<WinnerRow> winners;
};

// A winner of OUT (ids of OUT) and where it came from.
struct Candidate {
  WinnerRecord winner;
  ToolchainRecord toolchain;
  std::string source;  // the file it came from
  bool in_out = false;  // already OUT's winner
};

using WinnerKey = std::tuple<std::int64_t, std::int64_t, int, std::string, Pass>;
constexpr WinnerFilter kEveryPass{.pass = std::nullopt};

Result<InputData> read_input(const std::string& path) {
  Store in = FT_TRY(Store::open(path, OpenMode::read_only));
  InputData d;
  d.path = path;
  d.runs = FT_TRY(in.list_runs());
  d.devices = FT_TRY(in.devices());
  d.toolchains = FT_TRY(in.toolchains());
  d.problems = FT_TRY(in.problems());
  d.variants = FT_TRY(in.variants());
  d.measurements = FT_TRY(in.measurements());
  d.winners = FT_TRY(in.winners(kEveryPass));
  std::map<std::string, bool> seen;
  for (const VariantRecord& v : d.variants) {
    if (v.code_object_hash.empty() || seen[v.code_object_hash]) continue;
    seen[v.code_object_hash] = true;
    auto bytes = in.code_object(v.code_object_hash);  // not FT_TRY: g++ 12 then warns about the optional's vector
    if (!bytes) return std::unexpected(bytes.error());
    auto format = FT_TRY(in.code_object_format(v.code_object_hash));
    if (*bytes && format) d.code_objects.push_back({v.code_object_hash, *format, std::move(**bytes)});
  }
  return d;
}

Result<std::int64_t> mapped(const IdMap& map, std::int64_t id, std::string_view table, const std::string& path) {
  auto it = map.find(id);
  if (it == map.end())
    return fail(Errc::invalid_input, fmt::format("a row refers to {} id {}, which does not exist", table, id), path);
  return it->second;
}

// Id maps of one input into OUT.
struct Keys {
  IdMap runs, devices, toolchains, problems, variants;
};

// A variant OUT already has under this identity must be the same kernel.
Status check_same_variant(Store& out, std::int64_t id, const VariantRecord& v, const std::string& path) {
  auto existing = FT_TRY(out.variant(id));
  if (!existing) return {};
  const bool other_source = existing->source_hash != v.source_hash;
  const bool other_code = !existing->code_object_hash.empty() && !v.code_object_hash.empty() &&
                          existing->code_object_hash != v.code_object_hash;
  if (other_source || other_code)
    return fail(Errc::invalid_input,
                fmt::format("variant {} ({}) was built from other {} than in {}; the templates or flags differ, "
                            "merge only databases of one flytune build",
                            v.kernel_name, v.target, other_source ? "sources" : "code", out.path()),
                path);
  return {};
}

Result<Keys> import_rows(Store& out, const InputData& in) {
  Keys k;
  for (const DeviceRecord& d : in.devices) k.devices[d.id] = FT_TRY(out.upsert_device(d));
  for (const ToolchainRecord& t : in.toolchains) k.toolchains[t.id] = FT_TRY(out.upsert_toolchain(t));
  for (const ProblemRecord& p : in.problems) k.problems[p.id] = FT_TRY(out.upsert_problem(p));
  for (const RunRecord& r : in.runs) k.runs[r.id] = FT_TRY(out.import_run(r));
  for (const CodeObject& c : in.code_objects) FT_CHECK(out.put_code_object(c.hash, c.format, c.bytes));
  for (VariantRecord v : in.variants) {
    const std::int64_t in_id = v.id;
    v.toolchain_id = FT_TRY(mapped(k.toolchains, v.toolchain_id, "toolchain", in.path));
    const std::int64_t id = FT_TRY(out.import_variant(v));
    FT_CHECK(check_same_variant(out, id, v, in.path));
    k.variants[in_id] = id;
  }
  for (MeasurementRecord m : in.measurements) {
    m.run_id = FT_TRY(mapped(k.runs, m.run_id, "run", in.path));
    m.variant_id = FT_TRY(mapped(k.variants, m.variant_id, "variant", in.path));
    m.problem_id = FT_TRY(mapped(k.problems, m.problem_id, "problem", in.path));
    m.device_id = FT_TRY(mapped(k.devices, m.device_id, "device", in.path));
    FT_CHECK(out.import_measurement(m));
  }
  return k;
}

Result<Candidate> rekey_winner(const WinnerRow& row, const Keys& k, const std::string& path) {
  Candidate c{row.winner, row.toolchain, path, false};
  WinnerRecord& w = c.winner;
  w.problem_id = FT_TRY(mapped(k.problems, w.problem_id, "problem", path));
  w.device_id = FT_TRY(mapped(k.devices, w.device_id, "device", path));
  w.variant_id = FT_TRY(mapped(k.variants, w.variant_id, "variant", path));
  w.run_id = FT_TRY(mapped(k.runs, w.run_id, "run", path));
  if (w.default_variant_id) w.default_variant_id = FT_TRY(mapped(k.variants, *w.default_variant_id, "variant", path));
  return c;
}

std::string toolchain_label(const ToolchainRecord& t) { return t.backend + " " + t.version; }

// The fastest candidate; the first of equals (OUT's own winner comes first),
// so a merge that brings nothing faster changes nothing.
Result<const Candidate*> pick(const WinnerRow& names, const std::vector<Candidate>& all) {
  const Candidate* best = &all.front();
  for (const Candidate& c : all) {
    const ToolchainRecord& a = all.front().toolchain;
    if (c.toolchain.backend != a.backend || c.toolchain.version != a.version)
      return fail(Errc::invalid_input,
                  fmt::format("cannot merge the {} winners of {} on {} ({}) at T={}: built by {} in {} and by {} in "
                              "{}; merge only results of one toolchain version",
                              names.winner.kind, names.problem.key, names.device.name, names.device.arch,
                              names.winner.tokens, toolchain_label(a), all.front().source, toolchain_label(c.toolchain),
                              c.source),
                  c.source);
    if (c.winner.median_us < best->winner.median_us) best = &c;
  }
  return best;
}

// Re-derives OUT's winners from its own and the inputs' (already re-keyed).
Result<int> derive_winners(Store& out, std::map<WinnerKey, std::vector<Candidate>>& candidates,
                           const std::map<WinnerKey, WinnerRow>& names) {
  int changed = 0;
  for (auto& [key, all] : candidates) {
    const Candidate* best = FT_TRY(pick(names.at(key), all));
    if (best->in_out) continue;
    FT_CHECK(out.set_winner(best->winner));
    ++changed;
  }
  return changed;
}

Result<int> merge_into(Store& out, const std::vector<InputData>& inputs) {
  std::map<WinnerKey, std::vector<Candidate>> candidates;
  std::map<WinnerKey, WinnerRow> names;  // for messages
  auto add = [&](Candidate c, const WinnerRow& row) {
    const WinnerRecord& w = c.winner;
    WinnerKey key{w.problem_id, w.device_id, w.tokens, w.kind, w.pass};
    names.emplace(key, row);
    candidates[key].push_back(std::move(c));
  };
  for (const WinnerRow& row : FT_TRY(out.winners(kEveryPass))) add(Candidate{row.winner, row.toolchain, out.path(), true}, row);
  for (const InputData& in : inputs) {
    const Keys k = FT_TRY(import_rows(out, in));
    for (const WinnerRow& row : in.winners) add(FT_TRY(rekey_winner(row, k, in.path)), row);
  }
  return derive_winners(out, candidates, names);
}

Result<std::vector<std::pair<std::string, std::int64_t>>> row_counts(Store& s) {
  return FT_TRY(s.schema_info()).table_rows;
}

void remove_database(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

}  // namespace

Result<MergeSummary> merge_databases(const std::string& out_path, const std::vector<std::string>& inputs) {
  if (inputs.empty()) return fail(Errc::usage, "nothing to merge: give at least one input database");
  std::vector<InputData> data;
  for (const std::string& path : inputs) data.push_back(FT_TRY(read_input(path)));

  std::error_code ec;
  const bool existed = std::filesystem::exists(out_path, ec);
  MergeSummary summary;
  Status status = [&]() -> Status {
    Store out = FT_TRY(Store::open(out_path, OpenMode::create));
    summary.rows_before = FT_TRY(row_counts(out));
    FT_CHECK(out.transaction([&]() -> Status {
      summary.winners_changed = FT_TRY(merge_into(out, data));
      return {};
    }));
    summary.rows_after = FT_TRY(row_counts(out));
    return {};
  }();
  if (!status) {
    if (!existed) remove_database(out_path);
    return std::unexpected(status.error());
  }
  return summary;
}

}  // namespace ft::db
