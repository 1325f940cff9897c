#include "runtime/src/runtime_impl.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "device/device_buffer.hpp"
#include "system/hash.hpp"
#include "generator/families/families.hpp"
#include "layer/program.hpp"
#include "layer/calibrate.hpp"
#include "layer/inter_scales.hpp"

namespace ft::rt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A regular file of at most `limit` bytes, read whole; Errc::io otherwise
// (a folder, a device such as /dev/zero, a FIFO, a huge file, unreadable).
Result<std::string> read_regular_file(const fs::path& p, std::uintmax_t limit, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) return fail(Errc::io, what + " is missing", p.string());
  if (!fs::is_regular_file(st)) return fail(Errc::io, what + " is not a regular file", p.string());
  const std::uintmax_t size = fs::file_size(p, ec);
  if (ec) return fail(Errc::io, what + " cannot be read: " + ec.message(), p.string());
  if (size > limit)
    return fail(Errc::io, what + " is " + std::to_string(size) + " bytes, more than the " + std::to_string(limit) + " this runtime reads",
                p.string());
  std::ifstream f(p, std::ios::binary);
  if (!f) return fail(Errc::io, what + " cannot be opened", p.string());
  std::string out(std::size_t(size), '\0');
  f.read(out.data(), std::streamsize(size));
  if (std::size_t(f.gcount()) != out.size()) return fail(Errc::io, what + " could not be read whole", p.string());
  return out;
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

// The manifest library's decoding, with the runtime's places for the functions.
Manifest runtime_manifest(manifest::Manifest d) {
  Manifest m;
  m.target = std::string(d.target->name);
  m.target_info = d.target;
  m.format = d.code_object_format;
  m.files = d.files();
  for (manifest::SupportUnit& u : d.supports) m.supports.push_back(SupportUnit{std::move(u), {}});
  for (manifest::ProblemEntry& p : d.problems) {
    ProblemEntry e{std::move(p.key), std::move(p.problem), {}, std::move(p.missing_buckets), {}};
    for (manifest::Bucket& b : p.buckets) e.buckets.push_back(Bucket{std::move(b), {}});
    for (manifest::Bucket& b : p.backward) e.backward.push_back(Bucket{std::move(b), {}});
    m.problems.push_back(std::move(e));
  }
  return m;
}

}  // namespace

Result<Manifest> read_manifest(const std::string& dir) {
  const std::string text = FT_TRY(read_regular_file(fs::path(dir) / "manifest.json", kMaxManifestBytes, "manifest.json"));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(Errc::invalid_input, "manifest.json is not a JSON object", dir);
  auto decoded = manifest::decode(j);
  if (!decoded) return std::unexpected(with_context(decoded.error(), dir));
  Manifest m = runtime_manifest(std::move(*decoded));
  for (const std::string& f : m.files) FT_CHECK(check_inside(dir, f));
  return m;
}

Result<std::map<std::string, std::vector<std::byte>>> read_code_objects(const std::string& dir, const Manifest& m) {
  std::map<std::string, std::vector<std::byte>> out;
  const std::string ext = "." + m.format;
  for (const std::string& name : m.files) {
    if (fs::path(name).extension() != ext)
      return fail(Errc::invalid_input, "code object '" + name + "' is not a ." + m.format + " file", dir);
    const std::string raw =
        FT_TRY(read_regular_file(fs::path(dir) / name, kMaxCodeObjectBytes, "code object '" + name + "' named by the manifest"));
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

int select_bucket(const ProblemEntry& p, int tokens) {
  std::vector<int> buckets;
  for (const Bucket& b : p.buckets) buckets.push_back(b.tokens);
  return int(manifest::select_bucket(buckets, tokens));
}

CoverageNote coverage_of(const ProblemEntry& p, int tokens) {
  const int served = p.buckets[std::size_t(select_bucket(p, tokens))].tokens;
  const auto& missing = p.missing_buckets;
  // The bucket meant for T: the smallest bucket >= T, tuned or missing.
  const auto missing_up = std::lower_bound(missing.begin(), missing.end(), tokens);
  if (missing_up != missing.end() && (served < tokens || *missing_up < served))
    return {Coverage::missing_bucket,
            "T=" + std::to_string(tokens) + " is served by the T=" + std::to_string(served) + " bucket's kernels: bucket T=" +
                std::to_string(*missing_up) + " has no layer in this export (its search found none; manifest missing_buckets)"};
  if (served < tokens) {
    std::string note = "T=" + std::to_string(tokens) + " is above the largest tuned bucket, T=" + std::to_string(served) +
                       "; served by its kernels";
    if (!missing.empty() && missing.back() > served)
      note += " (bucket T=" + std::to_string(missing.back()) + " has no layer in this export)";
    return {Coverage::above_largest, note};
  }
  return {};
}

Result<BufferTable> buffer_table(const LayerProgram& program, const LayerBuffers& b) {
  BufferTable t = caller_table(b);
  if (!b.workspace) return t;
  FT_CHECK(carve_workspace(t, program, b.workspace, b.workspace_bytes, "the workspace", "the plan needs", "ft_plan_workspace_bytes"));
  return t;
}

Status carve_workspace(BufferTable& t, const LayerProgram& program, DevicePtr workspace, std::size_t bytes,
                       const std::string& what, const std::string& needer, const std::string& sizes_from) {
  const WorkspacePlacement w = workspace_placement(program);
  if (bytes < w.total)
    return fail(Errc::usage, fmt::format("{} holds {} bytes, {} {} ({})", what, bytes, needer, w.total, sizes_from));
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (is_workspace(Buf(i))) t[i] = program.bytes[i] ? workspace + w.offset[i] : 0;
  return {};
}

Result<std::unique_ptr<Runtime>> Runtime::open(const std::string& dir, const DeviceOpener& open_device,
                                               const ObjectSource& source) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->manifest_ = FT_TRY(read_manifest(dir));
  const auto objects = source ? FT_TRY(source(rt->manifest_)) : FT_TRY(read_code_objects(dir, rt->manifest_));
  rt->device_ = FT_TRY(open_device());
  FT_CHECK(check_target(rt->manifest_, rt->device_->info()));
  if (rt->manifest_.format == "so" && !source && rt->device_->info().runtime != "emu")
    return fail(Errc::no_device, "the export holds host libraries for the CPU emulator (code_object_format 'so', from "
                                 "flytune search --emulate), not code objects for " + rt->device_->info().name +
                                 "; check it with flytune check-export --emulate, or search on the GPU and export that", dir);
  if (rt->manifest_.format != "so" && !source && rt->device_->info().runtime == "emu")
    return fail(Errc::no_device, "the export holds " + rt->manifest_.format + " code objects for " + rt->manifest_.target +
                                 ", not host libraries for the CPU emulator (code_object_format 'so', from flytune search "
                                 "--emulate); flytune check-export --emulate rebuilds a GPU export's kernels for it", dir);
  FT_CHECK(rt->load(objects));
  return rt;
}

namespace {

Error no_device_error() {
  return Error{Errc::device, "no device: the export was opened without one (checks and plans only); open it on a GPU to run it", {}};
}

// The device of a runtime opened without one: every call fails with no_device_error.
class NoDevice final : public Device {
 public:
  NoDevice() { info_.runtime = "none", info_.name = "no device"; }
  const DeviceInfo& info() const override { return info_; }
  Result<DevicePtr> alloc(std::size_t) override { return std::unexpected(no_device_error()); }
  Status free(DevicePtr) override { return std::unexpected(no_device_error()); }
  Status copy_to_device(DevicePtr, const void*, std::size_t, StreamHandle) override { return std::unexpected(no_device_error()); }
  Status copy_to_host(void*, DevicePtr, std::size_t, StreamHandle) override { return std::unexpected(no_device_error()); }
  Status copy_device(DevicePtr, DevicePtr, std::size_t, StreamHandle) override { return std::unexpected(no_device_error()); }
  Status memset_u32(DevicePtr, std::uint32_t, std::size_t, StreamHandle) override { return std::unexpected(no_device_error()); }
  Result<ModuleHandle> load_module(std::span<const std::byte>) override { return std::unexpected(no_device_error()); }
  Status unload_module(ModuleHandle) override { return std::unexpected(no_device_error()); }
  Result<FunctionHandle> function(ModuleHandle, const std::string&) override { return std::unexpected(no_device_error()); }
  Status set_dynamic_shared(FunctionHandle, int) override { return std::unexpected(no_device_error()); }
  Status launch(FunctionHandle, Dim3, Dim3, int, StreamHandle, const void*, std::size_t) override {
    return std::unexpected(no_device_error());
  }
  Result<StreamHandle> create_stream() override { return std::unexpected(no_device_error()); }
  Status destroy_stream(StreamHandle) override { return std::unexpected(no_device_error()); }
  Status synchronize(StreamHandle) override { return std::unexpected(no_device_error()); }
  Result<EventHandle> create_event() override { return std::unexpected(no_device_error()); }
  Status destroy_event(EventHandle) override { return std::unexpected(no_device_error()); }
  Status record(EventHandle, StreamHandle) override { return std::unexpected(no_device_error()); }
  Result<float> elapsed_ms(EventHandle, EventHandle) override { return std::unexpected(no_device_error()); }
  Status begin_capture(StreamHandle) override { return std::unexpected(no_device_error()); }
  Result<GraphHandle> end_capture(StreamHandle) override { return std::unexpected(no_device_error()); }
  Status launch_graph(GraphHandle, StreamHandle) override { return std::unexpected(no_device_error()); }
  Status destroy_graph(GraphHandle) override { return std::unexpected(no_device_error()); }

 private:
  DeviceInfo info_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::open_without_device(const std::string& dir) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->manifest_ = FT_TRY(read_manifest(dir));
  (void)FT_TRY(read_code_objects(dir, rt->manifest_));
  rt->device_ = std::make_unique<NoDevice>();
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
    auto mod = modules.find(file);
    if (mod == modules.end()) return fail(Errc::invalid_input, "no code object was loaded for " + file, symbol);
    auto f = device_->function(mod->second, symbol);
    if (!f) return std::unexpected(with_context(f.error(), file + ": " + symbol));
    return functions[key] = *f;
  };
  for (SupportUnit& u : manifest_.supports)
    for (std::size_t i = 0; i < kSupportCount; ++i)
      if (!u.symbols[i].empty()) u.functions[i] = FT_TRY(function(u.code_object, u.symbols[i]));
  for (ProblemEntry& p : manifest_.problems) {
    const SupportUnit& u = *std::find_if(manifest_.supports.begin(), manifest_.supports.end(),
                                         [&](const SupportUnit& s) { return s.dtype == p.problem.dtype; });
    for (Bucket& b : p.buckets) FT_CHECK(load_bucket(op::moe_forward(), b, u, function));
    for (Bucket& b : p.backward) FT_CHECK(load_bucket(op::moe_backward(), b, u, function));
  }
  loaded_ = true;
  return {};
}

Status Runtime::load_bucket(const op::Operation& op, Bucket& b, const SupportUnit& u, const FunctionOf& function) {
  for (Support s : op.support)
    if (const auto role = support_info(s).role) b.kernels.of(*role) = u.fn(s);
  for (const op::RoleKernel& k : op::role_kernels(b.recipe)) {
    if (!launches(b.program, k.symbol)) continue;  // the one-launch layer's moe1 twin
    const auto file = b.code_objects.find(k.symbol);
    if (file == b.code_objects.end())
      return fail(Errc::invalid_input, fmt::format("a {} bucket names no code object for {}", op.name, k.symbol));
    FunctionHandle& slot = b.kernels.of(k.launch);
    slot = FT_TRY(function(file->second, k.symbol));
    if (k.lds_bytes > 0) FT_CHECK(device_->set_dynamic_shared(slot, k.lds_bytes));
  }
  return {};
}

Result<OperationPlan> Runtime::plan_operation(const op::Operation& op, const std::vector<Bucket>& buckets, int tokens,
                                              const std::string& what, const std::string& key) const {
  std::vector<int> sizes;
  for (const Bucket& b : buckets) sizes.push_back(b.tokens);
  OperationPlan out;
  out.bucket = &buckets[manifest::select_bucket(sizes, tokens)];
  auto program = op.build(out.bucket->recipe, tokens);
  if (!program) return fail(Errc::usage, what + program.error().message, key);
  out.program = std::move(*program);
  if (loaded_) out.functions = FT_TRY(bind(out.program, out.bucket->kernels));
  return out;
}

Status Runtime::run(const OperationPlan& plan, const BufferTable& table, StreamHandle stream) {
  FT_CHECK(check_buffers(plan.program, table));
  if (!loaded_) return std::unexpected(no_device_error());
  return execute(*device_, plan.program, plan.functions, table, stream);
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
  static_cast<OperationPlan&>(plan) = FT_TRY(plan_operation(op::moe_forward(), it->buckets, tokens, "", key));
  plan.problem = &*it;
  plan.tokens = tokens;
  plan.coverage = coverage_of(*it, tokens);
  plan.runtime = this;
  for (const SupportUnit& u : manifest_.supports)
    if (u.dtype == it->problem.dtype) plan.support = &u;
  if (!it->backward.empty()) plan.backward = FT_TRY(plan_operation(op::moe_backward(), it->backward, tokens, "backward: ", key));
  return plan;
}

WorkspaceSizes Runtime::workspace(const Plan& plan) const {
  const auto& b = plan.program.bytes;
  return {std::size_t(b[std::size_t(Buf::inter)]), std::size_t(b[std::size_t(Buf::y_acc)]),
          std::size_t(b[std::size_t(Buf::sorted_ids)]), std::size_t(b[std::size_t(Buf::block_experts)]),
          std::size_t(b[std::size_t(Buf::padded_rows)])};
}

Status Runtime::launch(const Plan& plan, const LayerBuffers& b, StreamHandle stream) {
  return run(plan, FT_TRY(buffer_table(plan.program, b)), stream);
}

Status Runtime::launch_support(FunctionHandle f, const LaunchShape& s, const void* args, std::size_t size, StreamHandle stream) {
  if (s.grid_x <= 0 || s.grid_y <= 0 || s.grid_z <= 0) return {};
  return device_->launch(f, Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}, Dim3{unsigned(s.block), 1, 1},
                         s.lds_bytes, stream, args, size);
}

Status Runtime::arrange_weights(DevicePtr src, DevicePtr dst, int rows, int cols, WeightLayout layout, StreamHandle stream,
                                int element_bytes) {
  if (manifest_.supports.empty()) return fail(Errc::invalid_input, "the export has no support unit");
  const ArrangeLaunch a = FT_TRY(arrange_launch(src, dst, rows, cols, element_bytes, layout));
  const std::string what(to_string(layout));
  if (!src || !dst) return fail(Errc::usage, what + " weights: null source or destination");
  const DevicePtr bytes = DevicePtr(rows) * DevicePtr(cols) * DevicePtr(element_bytes);
  if (src < dst + bytes && dst < src + bytes)
    return fail(Errc::usage, what + " weights: source and destination overlap; arrange into a separate buffer");
  return launch_support(manifest_.supports.front().fn(Support::shuffle), a.shape, &a.args, sizeof a.args, stream);
}

Status Runtime::fill_random(DevicePtr dst, std::size_t count, std::uint64_t seed, float scale, int kind, int group) {
  if (manifest_.supports.empty()) return fail(Errc::invalid_input, "the export has no support unit");
  if (!dst) return fail(Errc::usage, "fill: null destination");
  if (kind < -1 || kind > 3) return fail(Errc::usage, fmt::format("fill: kind {} is not 0 (bf16), 1 (f16), 2 (fp8 codes) or 3 (fp32)", kind));
  if (group < 0) return fail(Errc::usage, fmt::format("fill: group {} < 0", group));
  // Codes are the target's fp8 format: the e4m3 unit's fill writes them.
  const SupportUnit* u = &manifest_.supports.front();
  if (kind == 2) {
    auto e4m3 = std::find_if(manifest_.supports.begin(), manifest_.supports.end(), [](const SupportUnit& s) { return s.dtype == DType::e4m3; });
    if (e4m3 == manifest_.supports.end()) return fail(Errc::usage, "fill: fp8 codes need an export with an fp8 problem");
    u = &*e4m3;
  }
  if (kind == -1) kind = u->dtype == DType::f16 ? 1 : 0;
  FillArgs a{device_pointer<u16>(dst), count, seed, scale, kind, group, 0};
  return launch_support(u->fn(Support::fill), fill_launch(count), &a, sizeof a, {});
}

Status Runtime::reference(const Plan& plan, const LayerBuffers& b, DevicePtr y_ref, StreamHandle stream, int tokens,
                          bool bf16_layer) {
  const Problem& p = plan.problem->problem;
  const BufferTable table = FT_TRY(buffer_table(plan.program, b));
  const DevicePtr inter = at(table, Buf::inter);
  if (!b.x || !b.topk_ids || !b.topk_weights || !b.w1 || !b.w2 || (!inter && !p.fp8()) || !y_ref)
    return fail(Errc::usage, "reference: x, topk_ids, topk_weights, w1, w2, inter and y_ref are needed");
  const int T = tokens > 0 ? tokens : plan.tokens;
  MoeArgs a{};
  a.x = device_pointer<const u16>(b.x);
  a.topk_ids = device_pointer<const i32>(b.topk_ids);
  a.topk_weights = device_pointer<const float>(b.topk_weights);
  a.w1 = device_pointer<const u16>(b.w1);
  a.w2 = device_pointer<const u16>(b.w2);
  a.inter = device_pointer<u16>(inter);
  a.y = device_pointer<u16>(y_ref);
  a.tokens = T;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.flags = plan.bucket->recipe.stage(StageRole::stage1)->contract().weight_in_stage1 ? kFlagWeightInStage1 : 0;
  if (p.fp8()) return reference_fp8(plan, b, a, stream, bf16_layer);
  FT_CHECK(launch_support(plan.support->fn(Support::reference1), reference_launch(StageRole::stage1, p, T), &a, sizeof a, stream));
  return launch_support(plan.support->fn(Support::reference2), reference_launch(StageRole::stage2, p, T), &a, sizeof a, stream);
}

Result<float> Runtime::calibrate_inter_scale(const Plan& plan, const LayerBuffers& b, StreamHandle stream, int tokens) {
  const Problem& p = plan.problem->problem;
  if (p.scales != Scales::static_tensor)
    return fail(Errc::usage, fmt::format("calibrate: a {} plan has no static intermediate scale", p.dtype_spec()));
  if (!b.x || !b.topk_ids || !b.topk_weights || !b.w1 || !b.x_scale || !b.w1_scales)
    return fail(Errc::usage, "calibrate: x, topk_ids, topk_weights, w1, x_scale and w1_scales are needed");
  MoeArgs a{};
  a.x = device_pointer<const u16>(b.x);
  a.topk_ids = device_pointer<const i32>(b.topk_ids);
  a.topk_weights = device_pointer<const float>(b.topk_weights);
  a.w1 = device_pointer<const u16>(b.w1);
  a.tokens = tokens > 0 ? tokens : plan.tokens;
  a.hidden = p.hidden;
  a.inter_size = p.inter;
  a.experts = p.experts;
  a.topk = p.topk;
  a.x_scale = device_pointer<const float>(b.x_scale);
  a.w1_scales = device_pointer<const float>(b.w1_scales);
  a.scales = int(p.scales);
  const std::size_t n = std::size_t(a.tokens) * std::size_t(p.topk) * std::size_t(p.inter);
  DeviceBuffer h = FT_TRY(DeviceBuffer::allocate(*device_, n * 4));
  a.y_acc = device_pointer<float>(h.ptr());
  FT_CHECK(launch_support(plan.support->fn(Support::reference1), reference_launch(StageRole::stage1, p, a.tokens), &a, sizeof a,
                          stream));
  FT_CHECK(device_->synchronize(stream));
  return static_scale_of(*device_, h.ptr(), n, manifest_.target_info->fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3);
}

// The fp8 reference (templates/ft/reference.hpp): the fp32 intermediate, its
// quantisation as stage 2 reads it (1 x 128 groups or rows), then Y -- in scratch of its own,
// freed after the stream has run it.
Status Runtime::reference_fp8(const Plan& plan, const LayerBuffers& b, MoeArgs& a, StreamHandle stream, bool bf16_layer) {
  const Problem& p = plan.problem->problem;
  if ((tensor_scales(p.scales) && !b.x_scale) || !b.w1_scales || !b.w2_scales)
    return fail(Errc::usage, "reference: an fp8 plan needs w1_scales, w2_scales and, per-tensor and static, x_scale");
  if (p.scales == Scales::static_tensor && !b.inter_scale)
    return fail(Errc::usage, "reference: a static-scale fp8 plan needs inter_scale (the static intermediate scale, [1] fp32)");
  const std::size_t pairs = std::size_t(a.tokens) * std::size_t(p.topk), I = std::size_t(p.inter);
  DeviceBuffer inter_f32 = FT_TRY(DeviceBuffer::allocate(*device_, pairs * I * 4));
  DeviceBuffer inter_q = FT_TRY(DeviceBuffer::allocate(*device_, pairs * I));
  DeviceBuffer inter_scales = FT_TRY(DeviceBuffer::allocate(*device_, pairs * (I / kScaleGroup) * 4));
  a.x_scale = device_pointer<const float>(b.x_scale);
  a.w1_scales = device_pointer<const float>(b.w1_scales);
  a.w2_scales = device_pointer<const float>(b.w2_scales);
  a.inter_scale = device_pointer<const float>(b.inter_scale);
  a.scales = int(p.scales);
  a.y_acc = device_pointer<float>(inter_f32.ptr());
  a.inter_q = device_pointer<u8>(inter_q.ptr());
  a.inter_scales = device_pointer<float>(inter_scales.ptr());
  if (bf16_layer) a.flags |= kFlagUnquantised;
  // The intermediate quantised as the plan's stage 2 reads it (row or group scales).
  if (const Variant* s2 = plan.bucket->recipe.stage(StageRole::stage2); s2 && fp8::inter_row_scales(*s2)) a.flags |= kFlagInterRowScales;
  const SupportUnit& u = *plan.support;
  FT_CHECK(launch_support(u.fn(Support::reference1), reference_launch(StageRole::stage1, p, a.tokens), &a, sizeof a, stream));
  FT_CHECK(launch_support(u.fn(Support::reference_quantise), reference_quantise_launch(p, a.tokens), &a, sizeof a, stream));
  FT_CHECK(launch_support(u.fn(Support::reference2), reference_launch(StageRole::stage2, p, a.tokens), &a, sizeof a, stream));
  return device_->synchronize(stream);
}

}  // namespace ft::rt
