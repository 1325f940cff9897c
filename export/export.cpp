#include "export/export.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/store.hpp"
#include "store/kind.hpp"
#include "generator/emitter.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "compile/compile.hpp"
#include "compile/analyze/elf_image.hpp"
#include "system/hash.hpp"
#include "layer/program.hpp"
#include "manifest/manifest.hpp"
#include "export/export_parts.hpp"
#include "export/backward_export.hpp"

namespace ft::db {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The code objects' format (and file extension): the toolchain's. A search
// on the CPU emulator (backend emulate) built host libraries, which only the
// emulator runs.
std::string object_format(const Target& t, const ToolchainRecord& toolchain) {
  if (toolchain.backend == to_string(Backend::emulate)) return "so";
  return t.is_nvidia() ? "cubin" : "hsaco";
}

std::string device_label(const DeviceRecord& d) { return fmt::format("{} ({}, {})", d.name, d.arch, d.runtime); }

// Winners of kind 'layer' that pass the filters; refuses a mix of devices.
Result<std::vector<WinnerRow>> layer_winners(Store& store, const std::optional<std::string>& target,
                                             const std::optional<std::string>& device, const std::optional<std::string>& problem) {
  WinnerFilter f;
  f.kind = kind_text(Kind::layer);
  f.arch = target;
  f.problem_key = problem;
  auto rows = FT_TRY(store.winners(f));
  std::erase_if(rows, [&](const WinnerRow& r) { return device && r.device.name != *device; });
  std::set<std::int64_t> devices;
  std::string names;
  for (const WinnerRow& r : rows)
    if (devices.insert(r.device.id).second) names += (names.empty() ? "" : "; ") + device_label(r.device);
  if (devices.size() > 1)
    return fail(Errc::usage, fmt::format("the database holds layer winners of {} devices ({}); pick one with --device or --target",
                                         devices.size(), names),
                store.path());
  return rows;
}

// The support unit (align, reduce, shuffle, reference, fill) of a target and
// dtype: from the database when the search recorded it, else compiled here.
// Entries added to the support unit after its first version (16-bit
// partials, the wide align): a unit a database recorded earlier lacks them, so
// the export looks in its symbol table; the manifest names what is there, and
// layers use only that (the one-block align at every size without the wide
// align's kernels).
struct FoundSupport {
  manifest::SupportUnit unit;
  bool compiled_here = false;
};

Result<FoundSupport> support_unit(Store& store, ObjectSet& objects, const Target& target, DType dtype,
                                  const ToolchainRecord& toolchain, std::int64_t toolchain_id) {
  const std::string name = support_unit_name(target, dtype);
  VariantFilter f;
  f.kernel_name = name;
  f.target = std::string(target.name);
  f.kind = kind_text(Kind::support);
  auto rows = FT_TRY(store.variants(f));
  std::erase_if(rows, [](const VariantRecord& v) { return v.code_object_hash.empty(); });
  auto same_toolchain = std::find_if(rows.begin(), rows.end(), [&](const VariantRecord& v) { return v.toolchain_id == toolchain_id; });
  FoundSupport out;
  std::string file, built_by = toolchain.version;
  if (same_toolchain != rows.end()) {
    file = FT_TRY(objects.from_store(same_toolchain->code_object_hash, name));
  } else {
    CompileOptions options;
    if (toolchain.backend == to_string(Backend::emulate)) options.backend = Backend::emulate;  // the winners' kind of build
    CodeObject co = FT_TRY(compile(emit_support(target, dtype), target, options));
    built_by = co.toolchain_version;
    out.compiled_here = true;
    file = FT_TRY(objects.add(co.hash, std::move(co.binary), name));
  }
  bool partials16 = false, wide_align = false, saved = false;
  if (auto elf = ElfImage::parse(objects.bytes_of(file))) {  // else none is named; the runtime's open checks the unit itself
    partials16 = elf->symbol(reduce_entry(target, Reduce::partials16, dtype)) != nullptr;
    wide_align = elf->symbol(align_count_entry(target)) && elf->symbol(align_scatter_entry(target));
    saved = dtype != DType::e4m3 && elf->symbol(saved_entry(target, dtype)) != nullptr;
  }
  out.unit = manifest::SupportUnit::of(target, dtype, partials16, wide_align, saved);
  out.unit.code_object = file;
  out.unit.source = out.compiled_here ? "compiled by flytune export" : "database";
  out.unit.toolchain = built_by;
  return out;
}

Status write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) return fail(Errc::io, "cannot write the file", path.string());
  return {};
}

}  // namespace

std::string MissingLayers::describe() const {
  std::vector<std::string> parts;
  for (const auto& [key, buckets] : by_problem) {
    std::vector<std::string> t;
    for (int b : buckets) t.push_back(fmt::format("T={}", b));
    parts.push_back(fmt::format("{} {}", key, fmt::join(t, ", ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

// Buckets of the exported device (and problem filter) with stage winners but
// none of `exported`'s layers: what a search left without a layer winner.
Status add_stage_only_buckets(Store& store, const ExportOptions& opt, std::int64_t device_id,
                              const std::map<std::string, std::set<int>>& exported, MissingLayers& missing) {
  WinnerFilter f;
  f.device_id = device_id;
  f.arch = opt.target;
  f.problem_key = opt.problem;
  for (const WinnerRow& r : FT_TRY(store.winners(f))) {
    if (is(r.winner.kind, Kind::layer)) continue;
    const auto it = exported.find(r.problem.key);
    if (it == exported.end() || !it->second.contains(r.winner.tokens)) missing.by_problem[r.problem.key].insert(r.winner.tokens);
  }
  return {};
}

// The buckets left out: in the summary, its notes and each problem's missing_buckets.
void record_missing(const MissingLayers& missing, const std::map<std::string, std::set<int>>& exported,
                    manifest::Manifest& man, ExportSummary& summary) {
  for (const auto& [key, buckets] : missing.by_problem) {
    for (int b : buckets) summary.missing.push_back(fmt::format("{} T={}", key, b));
    if (!exported.contains(key))
      summary.notes.push_back(fmt::format("{}: not exported: none of its buckets has a layer winner", key));
  }
  for (manifest::ProblemEntry& pe : man.problems) {
    const auto it = missing.by_problem.find(pe.key);
    if (it != missing.by_problem.end()) pe.missing_buckets.assign(it->second.begin(), it->second.end());
  }
}

}  // namespace

Result<ExportContents> build_export(const ExportOptions& opt) {
  Store store = FT_TRY(Store::open(opt.db_path, OpenMode::read_only));
  auto rows = FT_TRY(layer_winners(store, opt.target, opt.device, opt.problem));
  if (rows.empty())
    return fail(Errc::not_found,
                fmt::format("no layer winners{}{}; run 'flytune search' (it records kind 'layer' winners) or check --target/--device",
                            opt.target ? " for target " + *opt.target : "", opt.device ? " on device " + *opt.device : "")
                    + (opt.problem ? " of problem " + *opt.problem : ""),
                opt.db_path);
  const DeviceRecord& device = rows.front().device;
  const Target* target = FT_TRY(lookup_target(device.arch));
  const std::int64_t toolchain_id = rows.front().variant.toolchain_id;
  const ToolchainRecord& toolchain = rows.front().toolchain;
  const std::string ext = "." + object_format(*target, toolchain);
  ObjectSet objects(store, ext);
  ExportContents out;
  out.summary.target = std::string(target->name);
  out.summary.device = device_label(device);

  std::map<std::int64_t, RunRecord> runs;
  for (RunRecord& r : FT_TRY(store.list_runs())) runs[r.id] = std::move(r);
  const WinnerSource src{store, objects, *target, toolchain_id, runs};

  manifest::Manifest man;
  man.target = target;
  man.code_object_format = object_format(*target, toolchain);
  man.exported_at = utc_now();
  man.source_database = fs::path(opt.db_path).filename().string();
  man.device = {device.runtime,     device.name,           device.arch,           device.compute_units,
                device.memory_bytes, device.driver_version, device.runtime_version};
  man.toolchain = {toolchain.backend, toolchain.version};
  std::map<std::string, FoundSupport> supports;  // by dtype
  std::map<std::string, std::set<int>> exported;  // layer buckets written, by problem key
  MissingLayers missing;
  for (const WinnerRow& row : rows) {
    if (row.variant.toolchain_id != toolchain_id)
      return fail(Errc::database, "layer winners were built by different toolchains; export one device and toolchain at a time",
                  opt.db_path);
    const std::string what = fmt::format("{} T={}", row.problem.key, row.winner.tokens);
    auto read = row.problem.to_problem();
    if (!read) return std::unexpected(with_context(std::move(read).error(), what));
    const Problem p = std::move(*read);
    const std::string dtype(to_string(p.dtype));
    if (!supports.contains(dtype)) {
      FoundSupport s = FT_TRY(support_unit(store, objects, *target, p.dtype, toolchain, toolchain_id));
      if (s.compiled_here) {
        out.summary.support_compiled = true;
        out.summary.notes.push_back(fmt::format(
            "the database holds no support unit for {} {}; export compiled it with {} (the winners were built with {})",
            target->name, dtype, s.unit.toolchain, toolchain.version));
      }
      supports[dtype] = s;
    }
    BucketOrNote bucket = FT_TRY(export_bucket(op::moe_forward(), src, p, supports[dtype].unit, row, what));
    if (!bucket) {
      // A winner recorded before the program's rules (a pair whose row blocks
      // do not line up), or before its support kernel existed, cannot be run
      // as timed: it is left out, and said so.
      out.summary.notes.push_back(fmt::format("{}: not exported: {}; search this bucket again", what, bucket.error()));
      missing.by_problem[row.problem.key].insert(row.winner.tokens);
      continue;
    }
    if (man.problems.empty() || man.problems.back().key != row.problem.key) {
      man.problems.push_back({row.problem.key, p, row.problem.activation, row.problem.routing, {}, {}});
      ++out.summary.problems;
    }
    man.problems.back().buckets.push_back(std::move(*bucket));
    exported[row.problem.key].insert(row.winner.tokens);
    ++out.summary.buckets;
  }
  FT_CHECK(add_stage_only_buckets(store, opt, device.id, exported, missing));
  if (!missing.empty() && !opt.allow_missing)
    return fail(Errc::not_found,
                fmt::format("token buckets without a layer winner: {}; the runtime would serve them with another bucket's "
                            "kernels. Search them again, or pass --allow-missing to export the rest (the manifest then "
                            "lists them as missing_buckets)",
                            missing.describe()),
                opt.db_path);
  record_missing(missing, exported, man, out.summary);
  if (man.problems.empty())
    return fail(Errc::not_found, "no layer winner could be exported (see the notes); search again", opt.db_path);
  for (manifest::ProblemEntry& pe : man.problems)
    std::sort(pe.buckets.begin(), pe.buckets.end(), [](const manifest::Bucket& a, const manifest::Bucket& b) { return a.tokens < b.tokens; });
  const BackwardSource backward{opt, device.id, [&](DType d) -> const manifest::SupportUnit* {
                                  const auto it = supports.find(std::string(to_string(d)));
                                  return it == supports.end() ? nullptr : &it->second.unit;
                                }};
  FT_CHECK(add_backward(src, backward, man, out.summary));
  for (auto& [dtype, s] : supports) man.supports.push_back(std::move(s.unit));

  out.manifest = manifest::encode(man);
  out.objects = objects.take();
  out.summary.code_objects = int(out.objects.size());
  out.dispatch_header = dispatch_header(man);
  return out;
}

namespace {

// Whether `dir` exists and holds anything.
Result<bool> holds_anything(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return false;
  if (!fs::is_directory(dir, ec)) return fail(Errc::io, "the export folder is a file, not a folder", dir.string());
  const bool empty = fs::is_empty(dir, ec);
  if (ec) return fail(Errc::io, "cannot read the export folder: " + ec.message(), dir.string());
  return !empty;
}

Status write_contents(const fs::path& dir, ExportContents& c) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot create the folder: {}", ec.message()), dir.string());
  for (const auto& [name, bytes] : c.objects) FT_CHECK(write_file(dir / name, bytes.data(), bytes.size()));
  FT_CHECK(write_file(dir / "flytune_dispatch.h", c.dispatch_header.data(), c.dispatch_header.size()));
  const std::string manifest = c.manifest.dump(2) + "\n";
  return write_file(dir / "manifest.json", manifest.data(), manifest.size());  // last: a folder with a manifest is complete
}

// Puts the staged folder at `out`: a rename, or with an old folder there an
// exchange of the two (then the old contents are removed).
Status move_into_place(const fs::path& staged, const fs::path& out, bool replace) {
  std::error_code ec;
  if (!replace) {
    fs::remove(out, ec);  // an empty folder
    fs::rename(staged, out, ec);
    if (ec) return fail(Errc::io, "cannot move the export into place: " + ec.message(), out.string());
    return {};
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0) {
    // No exchange on this file system: move the old folder aside first.
    const fs::path old = fs::path(staged.string() + ".old");
    fs::rename(out, old, ec);
    if (!ec) fs::rename(staged, out, ec);
    if (ec) return fail(Errc::io, "cannot replace the export: " + ec.message(), out.string());
    fs::remove_all(old, ec);
    return {};
  }
  fs::remove_all(staged, ec);  // now the old contents
  return {};
}

}  // namespace

Result<ExportSummary> export_winners(const ExportOptions& opt) {
  const fs::path out = fs::absolute(fs::path(opt.out_dir)).lexically_normal();
  const bool occupied = FT_TRY(holds_anything(out));
  if (occupied && !opt.force)
    return fail(Errc::usage, "the folder already holds files (an earlier export?); pass --force to replace its contents",
                opt.out_dir);
  ExportContents c = FT_TRY(build_export(opt));
  std::error_code ec;
  const fs::path staged = out.parent_path() / fmt::format(".{}.staging-{}", out.filename().string(), ::getpid());
  fs::remove_all(staged, ec);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{staged};
  FT_CHECK(write_contents(staged, c));
  if (opt.check) FT_CHECK(opt.check(staged.string()));
  FT_CHECK(move_into_place(staged, out, occupied));
  c.summary.header_path = (out / "flytune_dispatch.h").string();
  c.summary.manifest_path = (out / "manifest.json").string();
  return c.summary;
}

int CoverageReport::untuned() const {
  return int(std::count_if(lines.begin(), lines.end(), [](const CoverageLine& l) { return l.rule != "tuned"; }));
}

Result<CoverageReport> check_coverage(const std::string& db_path, const std::vector<int>& tokens,
                                      const std::optional<std::string>& target, const std::optional<std::string>& device) {
  Store store = FT_TRY(Store::open(db_path, OpenMode::read_only));
  WinnerFilter f;
  f.arch = target;
  auto all = FT_TRY(store.winners(f));
  std::erase_if(all, [&](const WinnerRow& r) { return device && r.device.name != *device; });
  // (problem, device) -> buckets with a layer winner / with any winner.
  std::map<std::pair<std::string, std::string>, std::set<int>> layer, any;
  for (const WinnerRow& r : all) {
    auto key = std::make_pair(r.problem.key, device_label(r.device));
    any[key].insert(r.winner.tokens);
    if (is(r.winner.kind, Kind::layer)) layer[key].insert(r.winner.tokens);
  }
  CoverageReport rep;
  rep.requested = tokens;
  for (const auto& [key, buckets] : any) {
    const std::set<int>& tuned = layer[key];
    for (int b : buckets)
      if (!tuned.contains(b))
        rep.incomplete_buckets.push_back(fmt::format("{} on {}: T={} has stage winners but no layer winner", key.first, key.second, b));
    const std::vector<int> sorted(tuned.begin(), tuned.end()), searched(buckets.begin(), buckets.end());
    for (int t : tokens) {
      CoverageLine l{key.first, key.second, t, std::nullopt, "", std::nullopt};
      if (sorted.empty()) {
        l.rule = "no layer winner: refused";
      } else {
        l.bucket = sorted[manifest::select_bucket(sorted, t)];
        // The bucket that would serve T had its search found a layer for every bucket.
        const int meant = searched[manifest::select_bucket(searched, t)];
        if (meant >= t && !tuned.contains(meant)) {
          l.rule = "missing layer";
          l.missing_bucket = meant;
        } else {
          l.rule = *l.bucket == t ? "tuned" : *l.bucket > t ? "next bucket up" : "largest bucket";
        }
      }
      rep.lines.push_back(std::move(l));
    }
  }
  return rep;
}

}  // namespace ft::db
