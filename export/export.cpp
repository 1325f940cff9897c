#include "export/export.hpp"
#include "export/layouts.hpp"

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
#include "generator/emitter.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "compile/compile.hpp"
#include "compile/analyze/elf_image.hpp"
#include "system/hash.hpp"
#include "layer/program.hpp"

namespace ft::db {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct LoadedObject {
  std::string file;  // <hash><ext>
  std::vector<std::byte> bytes;
};

// Code objects by hash, read once, each checked against its name.
class ObjectSet {
 public:
  ObjectSet(Store& store, std::string ext) : store_(store), ext_(std::move(ext)) {}

  Result<std::string> from_store(const std::string& hash, const std::string& what) {
    if (auto it = files_.find(hash); it != files_.end()) return it->second.file;
    auto bytes = FT_TRY(store_.code_object(hash));
    if (!bytes) return fail(Errc::database, fmt::format("code object {} is missing from the database", hash), what);
    return add(hash, std::move(*bytes), what);
  }

  Result<std::string> add(const std::string& hash, std::vector<std::byte> bytes, const std::string& what) {
    const std::string actual = xxh3_128_hex(bytes);
    if (actual != hash)
      return fail(Errc::database, fmt::format("code object {} is corrupt (its bytes hash to {})", hash, actual), what);
    LoadedObject& o = files_[hash];
    o.file = hash + ext_;
    o.bytes = std::move(bytes);
    return o.file;
  }

  std::span<const std::byte> bytes_of(const std::string& file) const {
    for (const auto& [h, o] : files_)
      if (o.file == file) return o.bytes;
    return {};
  }

  std::vector<std::pair<std::string, std::vector<std::byte>>> take() {
    std::vector<std::pair<std::string, std::vector<std::byte>>> out;
    for (auto& [h, o] : files_) out.emplace_back(o.file, std::move(o.bytes));
    return out;
  }

 private:
  Store& store_;
  std::string ext_;
  std::map<std::string, LoadedObject> files_;
};

// The layer program's steps at the bucket's T, each launch with the file of
// its code object.
json recorded_steps(const LayerProgram& prog, const std::string& support, const std::string& stage1, const std::string& stage2) {
  json steps = steps_json(prog);
  for (json& st : steps) {
    if (st["op"] != "launch") continue;
    const std::string role = st["role"];
    st["code_object"] = role == "stage1" ? stage1 : role == "stage2" ? stage2 : support;
  }
  return steps;
}

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
  f.kind = "layer";
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
struct SupportUnit {
  std::string file;
  std::string toolchain;
  bool compiled_here = false;
  // Entries added to the support unit after its first version: a unit a
  // database recorded earlier lacks them, so the export looks in its symbol
  // table; the manifest names what is there, and layers use only that (the
  // one-block align at every size without the wide align's kernels).
  bool partials16 = false, wide_align = false;
};

void find_optional_entries(SupportUnit& s, const ObjectSet& objects, const Target& t, DType d) {
  auto elf = ElfImage::parse(objects.bytes_of(s.file));
  if (!elf) return;  // then neither is named; the runtime's open checks the unit itself
  s.partials16 = elf->symbol(reduce_entry(t, Reduce::partials16, d)) != nullptr;
  s.wide_align = elf->symbol(align_count_entry(t)) && elf->symbol(align_scatter_entry(t));
}

Result<SupportUnit> support_unit(Store& store, ObjectSet& objects, const Target& target, DType dtype,
                                 const ToolchainRecord& toolchain, std::int64_t toolchain_id) {
  const std::string name = support_unit_name(target, dtype);
  VariantFilter f;
  f.kernel_name = name;
  f.target = std::string(target.name);
  f.kind = "support";
  auto rows = FT_TRY(store.variants(f));
  std::erase_if(rows, [](const VariantRecord& v) { return v.code_object_hash.empty(); });
  auto same_toolchain = std::find_if(rows.begin(), rows.end(), [&](const VariantRecord& v) { return v.toolchain_id == toolchain_id; });
  if (same_toolchain != rows.end()) {
    SupportUnit out{FT_TRY(objects.from_store(same_toolchain->code_object_hash, name)), "", false};
    find_optional_entries(out, objects, target, dtype);
    return out;
  }
  CompileOptions options;
  if (toolchain.backend == to_string(Backend::emulate)) options.backend = Backend::emulate;  // the winners' kind of build
  CodeObject co = FT_TRY(compile(emit_support(target, dtype), target, options));
  SupportUnit out;
  out.toolchain = co.toolchain_version;
  out.compiled_here = true;
  out.file = FT_TRY(objects.add(co.hash, std::move(co.binary), name));
  find_optional_entries(out, objects, target, dtype);
  return out;
}

Status write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) return fail(Errc::io, "cannot write the file", path.string());
  return {};
}

// The manifest around its problems: target, device, toolchain, the argument
// and weight layouts, the support units.
// One bucket of the manifest: the layer winner's stages, the program's
// steps at the bucket's T, the measured time and where it came from.
// y_acc's bytes as the manifest documents them (layer/program.cpp sizes it).
std::string y_acc_formula(Reduce out) {
  const std::string_view counters = "ceil(T*hidden/32/64)*256+";  // the _y modes' arrival counters (direct_y_words)
  switch (out) {
    case Reduce::atomic: return "T*hidden*4";
    case Reduce::partials: return "T*topk*hidden*4";
    case Reduce::partials16: return "T*topk*hidden*2";
    case Reduce::atomic_y: return std::string(counters) + "T*hidden*4";
    case Reduce::partials_y: return std::string(counters) + "T*topk*hidden*4";
  }
  return "?";
}

json bucket_json(const WinnerRow& row, const LayerProgram& prog, const Variant& v1, const Variant& v2, json steps,
                 const std::map<std::int64_t, RunRecord>& runs) {
  json provenance{{"variant_id", row.variant.id}, {"run_id", row.winner.run_id}, {"chosen_at", row.winner.chosen_at}};
  if (auto it = runs.find(row.winner.run_id); it != runs.end())
    provenance.update({{"flytune_version", it->second.flytune_version},
                       {"git_commit", it->second.git_commit},
                       {"templates_commit", it->second.templates_commit},
                       {"hostname", it->second.hostname}});
  json bucket{{"tokens", row.winner.tokens},
              {"kernel_name", row.variant.kernel_name},
              {"stages", {{"stage1", v1.to_json()}, {"stage2", v2.to_json()}}},
              {"align_block", prog.align_block},
              {"max_padded_rows_formula", "ceil((T*topk + min(experts, T*topk) * (align_block - 1)) / align_block) * align_block"},
              {"reduction", std::string(to_string(v2.contract().output))},
              {"weight_in_stage1", v1.contract().weight_in_stage1},
              {"weights", {{"w1", std::string(to_string(v1.contract().weights))}, {"w2", std::string(to_string(v2.contract().weights))}}},
              {"workspace_bytes",
               {{"inter", "T*topk*inter*2"},
                {"y_acc", y_acc_formula(v2.contract().output)},
                {"sorted_ids", "max_padded_rows*4"},
                {"block_experts", "max_padded_rows/align_block*4"},
                {"padded_rows", "4"}}},
              {"buffers_at_bucket", buffers_json(prog)},
              {"steps", std::move(steps)},
              {"time_us", {{"median", row.winner.median_us}, {"p10", row.winner.p10_us ? json(*row.winner.p10_us) : json()},
                           {"p90", row.winner.p90_us ? json(*row.winner.p90_us) : json()}}},
              {"provenance", std::move(provenance)}};
  if (row.winner.speedup_vs_default) bucket["speedup_vs_default"] = *row.winner.speedup_vs_default;
  return bucket;
}

json manifest_json(const ExportOptions& opt, const Target& t, const DeviceRecord& device, const ToolchainRecord& toolchain,
                   const std::map<std::string, SupportUnit>& supports, json problems) {
  json support_units = json::array();
  for (const auto& [dtype, s] : supports) {
    auto dt = *parse_dtype(dtype);
    json symbols{{"align", align_entry(t)},
                 {"reduce_atomic", reduce_entry(t, Reduce::atomic, dt)},
                 {"reduce_partials", reduce_entry(t, Reduce::partials, dt)},
                 {"shuffle", shuffle_entry(t)},
                 {"reference1", reference_entry(t, StageRole::stage1, dt)},
                 {"reference2", reference_entry(t, StageRole::stage2, dt)},
                 {"fill", fill_entry(t)}};
    if (s.partials16) symbols["reduce_partials16"] = reduce_entry(t, Reduce::partials16, dt);
    if (s.wide_align) {
      symbols["align_count"] = align_count_entry(t);
      symbols["align_scatter"] = align_scatter_entry(t);
    }
    if (dt == DType::e4m3) {  // the fp8 unit's quantise steps (every e4m3 unit has them)
      symbols["quantise_x"] = quantise_x_entry(t);
      symbols["quantise_inter"] = quantise_inter_entry(t);
      symbols["reference_quantise"] = reference_quantise_entry(t);
    }
    support_units.push_back({{"dtype", dtype},
                             {"code_object", s.file},
                             {"source", s.compiled_here ? "compiled by flytune export" : "database"},
                             {"toolchain", s.compiled_here ? s.toolchain : toolchain.version},
                             {"symbols", std::move(symbols)}});
  }
  return {{"schema_version", kManifestSchemaVersion},
          {"target", t.name},
          {"vendor", std::string(to_string(t.vendor))},
          {"code_object_format", object_format(t, toolchain)},
          {"exported_at", utc_now()},
          {"source_database", fs::path(opt.db_path).filename().string()},
          {"device",
           {{"runtime", device.runtime},
            {"name", device.name},
            {"arch", device.arch},
            {"compute_units", device.compute_units},
            {"memory_bytes", device.memory_bytes},
            {"driver_version", device.driver_version},
            {"runtime_version", device.runtime_version}}},
          {"toolchain", {{"backend", toolchain.backend}, {"version", toolchain.version}}},
          {"selection_rule", "the smallest tuned bucket >= T, else the largest bucket"},
          {"args", moe_args_layout()},
          {"shuffle",
           {{"args", shuffle_args_layout()},
            {"grid_formula", fmt::format("[ceil(rows*cols/8 / {0}), 1, 1]", kReduceThreads)},
            {"block", {kReduceThreads, 1, 1}}}},
          {"routing_ids", "topk_ids in [0, experts) name an expert; -1 is an empty slot (it contributes nothing); "
                          "any other value is left out and counted into bad_ids"},
          {"weight_layouts", weight_layouts()},
          {"support_units", std::move(support_units)},
          {"problems", std::move(problems)}};
}

}  // namespace

int select_bucket(const std::vector<int>& buckets, int tokens) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), tokens);
  return it != buckets.end() ? *it : buckets.back();
}

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
    if (r.winner.kind == "layer") continue;
    const auto it = exported.find(r.problem.key);
    if (it == exported.end() || !it->second.contains(r.winner.tokens)) missing.by_problem[r.problem.key].insert(r.winner.tokens);
  }
  return {};
}

}  // namespace

namespace {

// A stage's code object: the variants row of that kernel by the same toolchain.
Result<std::string> stage_code_object(Store& store, ObjectSet& objects, const Target& target, std::int64_t toolchain_id,
                                      const Variant& v, const std::string& kernel, const std::string& what) {
  if (v.name() != kernel)
    return fail(Errc::database, fmt::format("stage parameters name {}, the row says {}", v.name(), kernel), what);
  VariantFilter f;
  f.kernel_name = kernel;
  f.target = std::string(target.name);
  f.toolchain_id = toolchain_id;
  auto vs = FT_TRY(store.variants(f));
  if (vs.empty() || vs.front().code_object_hash.empty())
    return fail(Errc::database, fmt::format("no compiled code object for {}", kernel), what);
  return objects.from_store(vs.front().code_object_hash, kernel);
}

// A problem's entry of the manifest, before its buckets.
json problem_json(const WinnerRow& row, const Problem& p, const Target& target, const std::string& support_file) {
  json pj = {{"key", row.problem.key},
             {"experts", p.experts},
             {"hidden", p.hidden},
             {"inter", p.inter},
             {"topk", p.topk},
             {"dtype", std::string(to_string(p.dtype))},
             {"activation", row.problem.activation},
             {"routing", row.problem.routing},
             {"support_code_object", support_file},
             {"buckets", json::array()}};
  if (p.fp8()) pj.update(fp8_problem_json(p, target));
  return pj;
}

// The buckets left out: in the summary, its notes and each problem's missing_buckets.
void record_missing(const MissingLayers& missing, const std::map<std::string, std::set<int>>& exported, json& problems,
                    ExportSummary& summary) {
  for (const auto& [key, buckets] : missing.by_problem) {
    for (int b : buckets) summary.missing.push_back(fmt::format("{} T={}", key, b));
    if (!exported.contains(key))
      summary.notes.push_back(fmt::format("{}: not exported: none of its buckets has a layer winner", key));
  }
  for (json& pj : problems) {
    const auto it = missing.by_problem.find(pj["key"].get<std::string>());
    pj["missing_buckets"] = it == missing.by_problem.end() ? std::vector<int>{} : std::vector<int>(it->second.begin(), it->second.end());
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

  std::map<std::string, SupportUnit> supports;  // by dtype
  std::map<std::string, std::set<int>> exported;  // layer buckets written, by problem key
  MissingLayers missing;
  json problems = json::array();
  std::string current_key;
  for (const WinnerRow& row : rows) {
    if (row.variant.toolchain_id != toolchain_id)
      return fail(Errc::database, "layer winners were built by different toolchains; export one device and toolchain at a time",
                  opt.db_path);
    const std::string what = fmt::format("{} T={}", row.problem.key, row.winner.tokens);
    auto read = row.problem.to_problem();
    if (!read) return std::unexpected(with_context(std::move(read).error(), what));
    const Problem p = std::move(*read);
    const json& params = row.variant.params;
    if (!params.contains("stage1") || !params.contains("stage2") || !params.contains("stage1_kernel") ||
        !params.contains("stage2_kernel"))
      return fail(Errc::database, fmt::format("layer variant {} lacks stage1/stage2 parameters", row.variant.id), what);
    const Variant v1 = FT_TRY(Variant::from_json(params["stage1"]));
    const Variant v2 = FT_TRY(Variant::from_json(params["stage2"]));
    const std::string dtype(to_string(p.dtype));
    if (!supports.contains(dtype)) {
      SupportUnit s = FT_TRY(support_unit(store, objects, *target, p.dtype, toolchain, toolchain_id));
      if (s.compiled_here) {
        out.summary.support_compiled = true;
        out.summary.notes.push_back(fmt::format(
            "the database holds no support unit for {} {}; export compiled it with {} (the winners were built with {})",
            target->name, dtype, s.toolchain, toolchain.version));
      }
      supports[dtype] = s;
    }
    const SupportUnit& support = supports[dtype];
    if (v2.contract().output == Reduce::partials16 && !support.partials16) {
      out.summary.notes.push_back(fmt::format("{}: not exported: its stage 2 writes 16-bit partials, which the database's support "
                                              "unit cannot reduce; search this bucket again", what));
      missing.by_problem[row.problem.key].insert(row.winner.tokens);
      continue;
    }
    // A winner recorded before the program's rules (a pair whose row blocks
    // do not line up) cannot be run as timed: it is left out, and said so.
    LayerRecipe recipe{target, p, v1, v2};
    recipe.wide_align = support.wide_align;
    auto built = build_program(recipe, row.winner.tokens);
    if (!built) {
      out.summary.notes.push_back(fmt::format("{}: not exported: {}; search this bucket again", what, built.error().message));
      missing.by_problem[row.problem.key].insert(row.winner.tokens);
      continue;
    }
    const LayerProgram& prog = *built;
    const std::string file1 =
        FT_TRY(stage_code_object(store, objects, *target, toolchain_id, v1, params["stage1_kernel"].get<std::string>(), what));
    const std::string file2 =
        FT_TRY(stage_code_object(store, objects, *target, toolchain_id, v2, params["stage2_kernel"].get<std::string>(), what));
    json bucket = bucket_json(row, prog, v1, v2, recorded_steps(prog, support.file, file1, file2), runs);
    if (problems.empty() || current_key != row.problem.key) {
      current_key = row.problem.key;
      problems.push_back(problem_json(row, p, *target, support.file));
      ++out.summary.problems;
    }
    problems.back()["buckets"].push_back(std::move(bucket));
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
  record_missing(missing, exported, problems, out.summary);
  if (problems.empty())
    return fail(Errc::not_found, "no layer winner could be exported (see the notes); search again", opt.db_path);
  for (json& pj : problems)
    std::sort(pj["buckets"].begin(), pj["buckets"].end(),
              [](const json& a, const json& b) { return a["tokens"].get<int>() < b["tokens"].get<int>(); });

  out.manifest = manifest_json(opt, *target, device, toolchain, supports, std::move(problems));
  out.objects = objects.take();
  out.summary.code_objects = int(out.objects.size());
  out.dispatch_header = dispatch_header(out.manifest);
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
    if (r.winner.kind == "layer") layer[key].insert(r.winner.tokens);
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
        l.bucket = select_bucket(sorted, t);
        // The bucket that would serve T had its search found a layer for every bucket.
        const int meant = select_bucket(searched, t);
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
