#include "runtime/src/runtime_impl.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "tuner/compile/hash.hpp"
#include "tuner/layer/kernel_args.hpp"

namespace ft::rt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kSupportThreads = 256;  // block of the shuffle, fill and reference kernels

Result<std::string> read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return fail(Errc::invalid_input, "no manifest.json in the export folder", p.parent_path().string());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A file the manifest names must resolve (symbolic links followed) to a path
// inside the export folder.
Status check_inside(const fs::path& dir, const std::string& name) {
  if (name.empty()) return fail(Errc::invalid_input, "manifest names a code object with an empty file name");
  const fs::path rel(name);
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir, ec);
  const fs::path full = fs::weakly_canonical(dir / rel, ec);
  const fs::path inside = full.lexically_relative(root);
  if (rel.is_absolute() || ec || inside.empty() || *inside.begin() == ".." || inside == ".")
    return fail(Errc::io, "manifest names a file outside its folder: '" + name + "'; refusing to load it", dir.string());
  return {};
}

Result<Step> parse_step(const json& j) {
  Step s;
  s.name = j.at("step").get<std::string>();
  const std::string op = j.at("op").get<std::string>();
  if (op == "memset_u32") {
    if (j.at("buffer") != "y_acc" || j.at("value") != 0)
      return fail(Errc::invalid_input, "step " + s.name + ": only the zeroing of y_acc is a known memset");
    s.op = Step::Op::memset_y_acc;
    return s;
  }
  if (op != "launch") return fail(Errc::invalid_input, "step " + s.name + ": unknown op '" + op + "'");
  s.symbol = j.at("symbol").get<std::string>();
  s.code_object = j.at("code_object").get<std::string>();
  s.block = j.at("block").at(0).get<unsigned>();
  s.dynamic_shared = j.at("dynamic_shared").get<int>();
  const json& g = j.at("grid_rule");
  const std::string kind = g.at("kind").get<std::string>();
  if (kind == "single") {
    s.grid = Step::Grid::single;
  } else if (kind == "stage") {
    s.grid = Step::Grid::stage;
    s.rows_per_block = g.at("rows_per_block").get<int>();
    s.n_is_inter = g.at("n").get<std::string>() == "inter";
    s.cols_per_block = g.at("cols_per_block").get<int>();
    s.grid_z = g.at("z").get<int>();
    if (s.rows_per_block < 1 || s.cols_per_block < 1 || s.grid_z < 1)
      return fail(Errc::invalid_input, "step " + s.name + ": grid_rule sizes must be positive");
  } else if (kind == "elementwise") {
    s.grid = Step::Grid::elementwise;
    s.elements_per_thread = g.at("elements_per_thread").get<int>();
    if (s.elements_per_thread < 1) return fail(Errc::invalid_input, "step " + s.name + ": elements_per_thread < 1");
  } else {
    return fail(Errc::invalid_input, "step " + s.name + ": unknown grid_rule kind '" + kind + "'");
  }
  const std::string layout = j.value("weight_layout", std::string("plain"));
  if (layout == "plain") s.weight_layout = WeightLayoutKind::plain;
  else if (layout == "shuffled") s.weight_layout = WeightLayoutKind::shuffled;
  else if (layout == "tiled") s.weight_layout = WeightLayoutKind::tiled;
  else return fail(Errc::invalid_input, "step " + s.name + ": unknown weight_layout '" + layout + "'");
  if (s.block < 1) return fail(Errc::invalid_input, "step " + s.name + ": block size < 1");
  return s;
}

Result<Manifest> parse(const json& j) {
  Manifest m;
  const int schema = j.at("schema_version").get<int>();
  if (schema != kSupportedSchema)
    return fail(Errc::invalid_input, "manifest schema_version " + std::to_string(schema) + ", this runtime reads " +
                                         std::to_string(kSupportedSchema));
  m.target = j.at("target").get<std::string>();
  m.format = j.at("code_object_format").get<std::string>();
  if (m.format != "cubin" && m.format != "hsaco")
    return fail(Errc::invalid_input, "unknown code_object_format '" + m.format + "'");
  for (const json& s : j.at("support_units")) {
    SupportUnit u;
    u.dtype = s.at("dtype").get<std::string>();
    u.code_object = s.at("code_object").get<std::string>();
    const json& sym = s.at("symbols");
    u.shuffle = sym.at("shuffle").get<std::string>();
    u.reference1 = sym.at("reference1").get<std::string>();
    u.reference2 = sym.at("reference2").get<std::string>();
    u.fill = sym.at("fill").get<std::string>();
    m.supports.push_back(std::move(u));
  }
  for (const json& pj : j.at("problems")) {
    ProblemEntry p;
    p.key = pj.at("key").get<std::string>();
    p.experts = pj.at("experts").get<int>();
    p.hidden = pj.at("hidden").get<int>();
    p.inter = pj.at("inter").get<int>();
    p.topk = pj.at("topk").get<int>();
    p.dtype = pj.at("dtype").get<std::string>();
    if (p.experts < 1 || p.hidden < 1 || p.inter < 1 || p.topk < 1)
      return fail(Errc::invalid_input, "problem " + p.key + ": sizes must be positive");
    for (const json& bj : pj.at("buckets")) {
      Bucket b;
      b.tokens = bj.at("tokens").get<int>();
      b.align_block = bj.at("align_block").get<int>();
      b.atomic = bj.at("reduction").get<std::string>() == "atomic";
      b.weight_in_stage1 = bj.at("weight_in_stage1").get<bool>();
      for (const json& sj : bj.at("steps")) {
        Step s = FT_TRY(parse_step(sj));
        if (s.name == "stage1") b.w1_layout = s.weight_layout;
        if (s.name == "stage2") b.w2_layout = s.weight_layout;
        b.steps.push_back(std::move(s));
      }
      if (b.tokens < 1 || b.align_block < 1)
        return fail(Errc::invalid_input, "problem " + p.key + ": bucket tokens and align_block must be positive");
      p.buckets.push_back(std::move(b));
    }
    if (p.buckets.empty()) return fail(Errc::invalid_input, "problem " + p.key + " has no buckets");
    std::sort(p.buckets.begin(), p.buckets.end(), [](const Bucket& a, const Bucket& b) { return a.tokens < b.tokens; });
    if (std::none_of(m.supports.begin(), m.supports.end(), [&](const SupportUnit& u) { return u.dtype == p.dtype; }))
      return fail(Errc::invalid_input, "problem " + p.key + ": no support unit for dtype " + p.dtype);
    m.problems.push_back(std::move(p));
  }
  std::set<std::string> files;
  for (const SupportUnit& u : m.supports) files.insert(u.code_object);
  for (const ProblemEntry& p : m.problems)
    for (const Bucket& b : p.buckets)
      for (const Step& s : b.steps)
        if (s.op == Step::Op::launch) files.insert(s.code_object);
  m.files.assign(files.begin(), files.end());
  return m;
}

unsigned to_grid(long long n) { return unsigned(std::max<long long>(n, 0)); }

// The copy of a stage's weights its layout asks for, and what to tell a
// caller who passed none.
struct StageWeights {
  DevicePtr ptr = 0;
  std::string missing;  // "w1_tiled (stage 1 reads tiled weights: ...)"
};

StageWeights stage_weights(int stage, WeightLayoutKind layout, DevicePtr plain, DevicePtr shuffled, DevicePtr tiled) {
  const std::string w = "w" + std::to_string(stage), st = "stage " + std::to_string(stage);
  switch (layout) {
    case WeightLayoutKind::shuffled:
      return {shuffled, w + "_shuffled (" + st + " reads pre-shuffled weights: pass " + w +
                            "_shuffled, made by ft_runtime_shuffle_weights)"};
    case WeightLayoutKind::tiled:
      return {tiled, w + "_tiled (" + st + " reads tiled weights: pass " + w +
                         "_tiled, made by ft_runtime_arrange_weights with FT_WEIGHT_LAYOUT_TILED)"};
    case WeightLayoutKind::plain: break;
  }
  return {plain, w};
}

}  // namespace

Result<Manifest> read_manifest(const std::string& dir) {
  const std::string text = FT_TRY(read_text(fs::path(dir) / "manifest.json"));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(Errc::invalid_input, "manifest.json is not a JSON object", dir);
  Result<Manifest> m;
  try {  // nlohmann's at()/get() report missing or mistyped members by exception
    m = parse(j);
  } catch (const json::exception& e) {
    return fail(Errc::invalid_input, std::string("manifest.json is malformed: ") + e.what(), dir);
  }
  if (!m) return std::unexpected(with_context(m.error(), dir));
  for (const std::string& f : m->files) FT_CHECK(check_inside(dir, f));
  return m;
}

Result<std::map<std::string, std::vector<std::byte>>> read_code_objects(const std::string& dir, const Manifest& m) {
  std::map<std::string, std::vector<std::byte>> out;
  const std::string ext = "." + m.format;
  for (const std::string& name : m.files) {
    const fs::path path = fs::path(dir) / name;
    if (fs::path(name).extension() != ext)
      return fail(Errc::invalid_input, "code object '" + name + "' is not a ." + m.format + " file", dir);
    std::ifstream f(path, std::ios::binary);
    if (!f) return fail(Errc::io, "code object '" + name + "' named by the manifest is missing or unreadable", dir);
    std::string raw((std::istreambuf_iterator<char>(f)), {});
    std::vector<std::byte> bytes(raw.size());
    std::transform(raw.begin(), raw.end(), bytes.begin(), [](char c) { return std::byte(c); });
    const std::string actual = xxh3_128_hex(bytes);
    const std::string recorded = fs::path(name).stem().string();
    if (actual != recorded)
      return fail(Errc::verify, "code object '" + name + "' does not match its recorded hash (its bytes hash to " + actual +
                                    "); refusing to load it", dir);
    out.emplace(name, std::move(bytes));
  }
  return out;
}

Status check_target(const Manifest& m, const DeviceInfo& d) {
  if (d.arch != m.target)
    return fail(Errc::no_device, "the export is for " + m.target + ", the device (" + d.runtime + ":" +
                                     std::to_string(d.ordinal) + ", " + d.name + ") is " + d.arch +
                                     "; export winners of this target or use a matching GPU");
  return {};
}

long long max_padded_rows(const ProblemEntry& p, int tokens, int align_block) {
  const long long pairs = (long long)tokens * p.topk;
  const long long rows = pairs + std::min<long long>(p.experts, pairs) * (align_block - 1);
  return (rows + align_block - 1) / align_block * align_block;
}

int select_bucket(const ProblemEntry& p, int tokens) {
  for (std::size_t i = 0; i < p.buckets.size(); ++i)
    if (p.buckets[i].tokens >= tokens) return int(i);
  return int(p.buckets.size()) - 1;
}

Result<std::unique_ptr<Runtime>> Runtime::open(const std::string& dir, const DeviceOpener& open_device) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->manifest_ = FT_TRY(read_manifest(dir));
  const auto objects = FT_TRY(read_code_objects(dir, rt->manifest_));
  rt->device_ = FT_TRY(open_device());
  FT_CHECK(check_target(rt->manifest_, rt->device_->info()));
  FT_CHECK(rt->load(objects));
  return rt;
}

Runtime::~Runtime() {
  if (device_)
    for (ModuleHandle m : modules_) (void)device_->unload_module(m);
}

Status Runtime::load(const std::map<std::string, std::vector<std::byte>>& objects) {
  std::map<std::string, ModuleHandle> modules;
  for (const auto& [name, bytes] : objects) {
    ModuleHandle m = FT_TRY(device_->load_module(bytes));
    modules_.push_back(m);
    modules[name] = m;
  }
  std::map<std::pair<std::string, std::string>, FunctionHandle> functions;
  auto function = [&](const std::string& file, const std::string& symbol) -> Result<FunctionHandle> {
    auto key = std::make_pair(file, symbol);
    if (auto it = functions.find(key); it != functions.end()) return it->second;
    auto f = device_->function(modules.at(file), symbol);
    if (!f) return std::unexpected(with_context(f.error(), file + ": " + symbol));
    return functions[key] = *f;
  };
  for (SupportUnit& u : manifest_.supports) {
    u.shuffle_fn = FT_TRY(function(u.code_object, u.shuffle));
    u.reference1_fn = FT_TRY(function(u.code_object, u.reference1));
    u.reference2_fn = FT_TRY(function(u.code_object, u.reference2));
    u.fill_fn = FT_TRY(function(u.code_object, u.fill));
  }
  for (ProblemEntry& p : manifest_.problems)
    for (Bucket& b : p.buckets)
      for (Step& s : b.steps) {
        if (s.op != Step::Op::launch) continue;
        s.function = FT_TRY(function(s.code_object, s.symbol));
        if (s.dynamic_shared > 0) FT_CHECK(device_->set_dynamic_shared(s.function, s.dynamic_shared));
      }
  return {};
}

Result<Plan> Runtime::select(const std::string& key, int tokens) {
  if (tokens < 1) return fail(Errc::usage, "token count " + std::to_string(tokens) + " < 1");
  auto it = std::find_if(manifest_.problems.begin(), manifest_.problems.end(), [&](const ProblemEntry& p) { return p.key == key; });
  if (it == manifest_.problems.end()) {
    std::string known;
    for (const ProblemEntry& p : manifest_.problems) known += (known.empty() ? "" : ", ") + p.key;
    return fail(Errc::not_found, "no tuned kernels for problem '" + key + "' (the export has: " + known + ")");
  }
  Plan plan;
  plan.problem = &*it;
  plan.bucket = &it->buckets[std::size_t(select_bucket(*it, tokens))];
  plan.tokens = tokens;
  plan.runtime = this;
  for (const SupportUnit& u : manifest_.supports)
    if (u.dtype == it->dtype) plan.support = &u;
  return plan;
}

WorkspaceSizes Runtime::workspace(const Plan& plan) const {
  const ProblemEntry& p = *plan.problem;
  const std::size_t T = std::size_t(plan.tokens), k = std::size_t(p.topk);
  const std::size_t rows = std::size_t(max_padded_rows(p, plan.tokens, plan.bucket->align_block));
  WorkspaceSizes w;
  w.inter = T * k * std::size_t(p.inter) * 2;
  w.y_acc = (plan.bucket->atomic ? T : T * k) * std::size_t(p.hidden) * 4;
  w.sorted_ids = rows * 4;
  w.block_experts = rows / std::size_t(plan.bucket->align_block) * 4;
  w.padded_rows = 4;
  return w;
}

Status Runtime::launch(const Plan& plan, const LayerBuffers& b, StreamHandle stream) {
  const ProblemEntry& p = *plan.problem;
  const Bucket& bucket = *plan.bucket;
  const StageWeights w1 = stage_weights(1, bucket.w1_layout, b.w1, b.w1_shuffled, b.w1_tiled);
  const StageWeights w2 = stage_weights(2, bucket.w2_layout, b.w2, b.w2_shuffled, b.w2_tiled);
  const std::pair<DevicePtr, std::string> needed[] = {
      {b.x, "x"},           {b.topk_ids, "topk_ids"},   {b.topk_weights, "topk_weights"},
      {w1.ptr, w1.missing}, {w2.ptr, w2.missing},       {b.inter, "inter"},
      {b.y_acc, "y_acc"},   {b.sorted_ids, "sorted_ids"}, {b.block_experts, "block_experts"},
      {b.padded_rows, "padded_rows"}, {b.y, "y"}};
  std::string null_buffers;  // every one, so a caller fixes them in one go
  for (const auto& [buffer, name] : needed)
    if (!buffer) null_buffers += (null_buffers.empty() ? "" : ", ") + name;
  if (!null_buffers.empty()) return fail(Errc::usage, "null layer buffers: " + null_buffers);
  const long long rows = max_padded_rows(p, plan.tokens, bucket.align_block);
  MoeArgsHost a{};
  a.x = b.x;
  a.topk_ids = b.topk_ids;
  a.topk_weights = b.topk_weights;
  a.w1 = w1.ptr;
  a.w2 = w2.ptr;
  a.inter = b.inter;
  a.y_acc = b.y_acc;
  a.y = b.y;
  a.sorted_ids = b.sorted_ids;
  a.block_experts = b.block_experts;
  a.padded_rows = b.padded_rows;
  a.tokens = plan.tokens;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.align_block = bucket.align_block;
  a.max_padded_rows = int(rows);
  a.flags = 0;
  for (const Step& s : bucket.steps) {
    if (s.op == Step::Op::memset_y_acc) {
      FT_CHECK(device_->memset_u32(b.y_acc, 0u, std::size_t(plan.tokens) * std::size_t(p.hidden), stream));
      continue;
    }
    Dim3 grid;
    if (s.grid == Step::Grid::stage) {
      grid.x = to_grid(rows / s.rows_per_block);
      grid.y = to_grid((s.n_is_inter ? p.inter : p.hidden) / s.cols_per_block);
      grid.z = unsigned(s.grid_z);
    } else if (s.grid == Step::Grid::elementwise) {
      const long long chunks = (long long)plan.tokens * p.hidden / s.elements_per_thread;
      grid.x = to_grid((chunks + s.block - 1) / s.block);
    }
    if (grid.x == 0 || grid.y == 0) continue;  // nothing to do
    FT_CHECK(device_->launch(s.function, grid, Dim3{s.block, 1, 1}, s.dynamic_shared, stream, &a, sizeof a));
  }
  return {};
}

Status Runtime::shuffle_weights(DevicePtr src, DevicePtr dst, int rows, int cols, StreamHandle stream) {
  return arrange_weights(src, dst, rows, cols, WeightLayoutKind::shuffled, stream);
}

Status Runtime::arrange_weights(DevicePtr src, DevicePtr dst, int rows, int cols, WeightLayoutKind layout, StreamHandle stream) {
  if (manifest_.supports.empty()) return fail(Errc::invalid_input, "the export has no support unit");
  if (layout != WeightLayoutKind::shuffled && layout != WeightLayoutKind::tiled)
    return fail(Errc::usage, "arrange weights: the layout must be shuffled (1) or tiled (2); plain weights need no arranging");
  const std::string what(to_string(layout));
  if (!src || !dst) return fail(Errc::usage, what + " weights: null source or destination");
  const int col_unit = layout == WeightLayoutKind::tiled ? 64 : 8;
  if (rows < 16 || cols < col_unit || rows % 16 || cols % col_unit)
    return fail(Errc::usage, what + " weights: rows must be a multiple of 16 and cols of " + std::to_string(col_unit) +
                                 " (got " + std::to_string(rows) + " x " + std::to_string(cols) + ")");
  const DevicePtr bytes = DevicePtr(rows) * DevicePtr(cols) * 2;
  if (src < dst + bytes && dst < src + bytes)
    return fail(Errc::usage, what + " weights: source and destination overlap; arrange into a separate buffer");
  ShuffleArgsHost a{src, dst, rows, cols, int(layout), 0};
  const long long chunks = (long long)rows * cols / 8;
  return device_->launch(manifest_.supports.front().shuffle_fn, Dim3{unsigned((chunks + kSupportThreads - 1) / kSupportThreads), 1, 1},
                         Dim3{kSupportThreads, 1, 1}, 0, stream, &a, sizeof a);
}

Status Runtime::fill_random(DevicePtr dst, std::size_t count, std::uint64_t seed, float scale) {
  if (manifest_.supports.empty()) return fail(Errc::invalid_input, "the export has no support unit");
  const SupportUnit& u = manifest_.supports.front();
  FillArgsHost a{dst, count, seed, scale, u.dtype == "f16" ? 1 : 0};
  const std::size_t blocks = (count + 8 * kSupportThreads - 1) / (8 * kSupportThreads);
  return device_->launch(u.fill_fn, Dim3{unsigned(blocks), 1, 1}, Dim3{kSupportThreads, 1, 1}, 0, {}, &a, sizeof a);
}

Status Runtime::reference(const Plan& plan, const LayerBuffers& b, DevicePtr y_ref, StreamHandle stream) {
  const ProblemEntry& p = *plan.problem;
  if (!b.x || !b.topk_ids || !b.topk_weights || !b.w1 || !b.w2 || !b.inter || !y_ref)
    return fail(Errc::usage, "reference: x, topk_ids, topk_weights, w1, w2, inter and y_ref are needed");
  MoeArgsHost a{};
  a.x = b.x;
  a.topk_ids = b.topk_ids;
  a.topk_weights = b.topk_weights;
  a.w1 = b.w1;
  a.w2 = b.w2;
  a.inter = b.inter;
  a.y = y_ref;
  a.tokens = plan.tokens;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.align_block = 16;
  a.max_padded_rows = int(max_padded_rows(p, plan.tokens, 16));
  a.flags = plan.bucket->weight_in_stage1 ? kFlagWeightInStage1 : 0;
  // One thread per output element (templates/ft/reference.hpp).
  const unsigned T = unsigned(plan.tokens), k = unsigned(p.topk);
  FT_CHECK(device_->launch(plan.support->reference1_fn, Dim3{unsigned(p.inter + kSupportThreads - 1) / kSupportThreads, T * k, 1},
                           Dim3{kSupportThreads, 1, 1}, 0, stream, &a, sizeof a));
  return device_->launch(plan.support->reference2_fn, Dim3{unsigned(p.hidden + kSupportThreads - 1) / kSupportThreads, T, 1},
                         Dim3{kSupportThreads, 1, 1}, 0, stream, &a, sizeof a);
}

}  // namespace ft::rt
