#include "runtime/check/check_export.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "flytune_runtime.h"
#include "generator/emitter.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "compile/emu_compile.hpp"
#include "emulate/emu_device.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/workload.hpp"

namespace ft::check {
namespace {

// Device memory of one check, released through the runtime on scope exit.
class Allocations {
 public:
  explicit Allocations(ft_runtime* rt) : rt_(rt) {}
  ~Allocations() {
    for (void* p : ptrs_) ft_runtime_free(rt_, p);
  }
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;
  void* get(std::size_t bytes) {
    void* p = nullptr;
    if (ft_runtime_alloc(rt_, bytes ? bytes : 4, &p) != FT_OK) return nullptr;
    ptrs_.push_back(p);
    return p;
  }

 private:
  ft_runtime* rt_;
  std::vector<void*> ptrs_;
};

// A problem's weights, filled once and shared by all its checks (a layer of
// DeepSeek-V3 holds 22 GB of them), with the arranged copies made on first
// use: plain W1/W2 for the reference, shuffled or tiled copies for stages
// that read them. An fp8 problem's weights are e4m3 codes with fp32 scales
// (and per-tensor a static activation scale), drawn as the search's
// workloads draw theirs (measure/workload/workload.hpp) from other seeds.
class ProblemWeights {
 public:
  ProblemWeights(ft_runtime* rt, const Problem& p, std::uint64_t seed) : rt_(rt), mem_(rt), fp8_(p.fp8()) {
    const std::size_t E = std::size_t(p.experts), H = std::size_t(p.hidden), I = std::size_t(p.inter);
    rows_[0] = E * 2 * I, cols_[0] = H;
    rows_[1] = E * H, cols_[1] = I;
    const TensorStream streams[2] = {TensorStream::w1, TensorStream::w2};
    const TensorStream scale_streams[2] = {TensorStream::w1_scales, TensorStream::w2_scales};
    const std::size_t scale_counts[2] = {std::size_t(weight_scale_count(p.scales, long(E), long(2 * I), long(H))),
                                         std::size_t(weight_scale_count(p.scales, long(E), long(H), long(I)))};
    for (int w = 0; w < 2 && error_.empty(); ++w) {
      const std::size_t count = rows_[w] * cols_[w];
      plain_[w] = mem_.get(count * element_bytes());
      bool ok = plain_[w] != nullptr;
      if (ok && !fp8_)
        ok = ft_runtime_fill_random(rt, plain_[w], count, seed * 3 + 2 + std::uint64_t(w), float(1.0 / std::sqrt(double(cols_[w])))) ==
             FT_OK;
      if (ok && fp8_) {
        scales_[w] = static_cast<float*>(mem_.get(scale_counts[w] * 4));
        ok = scales_[w] &&
             ft_runtime_fill_random_as(rt, plain_[w], count, seed * 3 + 2 + std::uint64_t(w), tensor_scale(p, streams[w]),
                                       FT_FILL_FP8_CODES, 0) == FT_OK &&
             ft_runtime_fill_random_as(rt, scales_[w], scale_counts[w], seed * 5 + 7 + std::uint64_t(w),
                                       tensor_scale(p, scale_streams[w]), FT_FILL_F32_SCALES, 0) == FT_OK;
      }
      if (!ok) error_ = std::string("weights: ") + ft_runtime_last_error(rt);
    }
    if (fp8_ && p.scales == Scales::per_tensor && error_.empty()) {
      const float xs = fp8_x_scale(rt::runtime_of(rt)->manifest().target_info->fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3);
      x_scale_ = static_cast<float*>(mem_.get(4));
      if (!x_scale_ || ft_runtime_upload(rt, x_scale_, &xs, 4) != FT_OK) error_ = std::string("x_scale: ") + ft_runtime_last_error(rt);
    }
  }
  const std::string& error() const { return error_; }
  const void* plain(int stage) const { return plain_[stage - 1]; }
  // The caller's scale buffers of an fp8 layer (null for 16-bit problems).
  void bind_scales(ft_layer_buffers& b) const {
    b.x_scale = x_scale_;
    b.w1_scales = scales_[0];
    b.w2_scales = scales_[1];
  }
  // The copy a plan's stage reads (plain, shuffled or tiled); null on failure.
  const void* arranged(int stage, int layout) {
    if (layout == FT_WEIGHT_LAYOUT_PLAIN) return plain_[stage - 1];
    void*& slot = copies_[stage - 1][layout];
    if (!slot) {
      const int w = stage - 1;
      void* dst = mem_.get(rows_[w] * cols_[w] * element_bytes());
      if (dst && ft_runtime_arrange_weights_of(rt_, plain_[w], dst, int(rows_[w]), int(cols_[w]), int(element_bytes()), layout,
                                               nullptr) == FT_OK)
        slot = dst;
    }
    return slot;
  }

 private:
  std::size_t element_bytes() const { return fp8_ ? 1 : 2; }
  ft_runtime* rt_;
  Allocations mem_;
  bool fp8_ = false;
  void* plain_[2] = {nullptr, nullptr};
  float* scales_[2] = {nullptr, nullptr};
  float* x_scale_ = nullptr;
  void* copies_[2][3] = {};
  std::size_t rows_[2] = {}, cols_[2] = {};
  std::string error_;
};

struct RuntimeHandle {
  ft_runtime* rt = nullptr;
  ~RuntimeHandle() { ft_runtime_close(rt); }
};

// The routing of a check: ids [T, k] (-1 for masked slots) and weights.
Result<Routed> routing_for(const std::string& name, const ft_problem_shape& shape, int tokens, std::uint64_t seed) {
  Problem p;
  p.experts = shape.experts;
  p.hidden = shape.hidden;
  p.inter = shape.inter;
  p.topk = shape.topk;
  WorkloadOptions o{seed, 0};
  if (name == "hot") p.routing = *Routing::parse(fmt::format("hot:{}", shape.topk));  // every token on the same top-k
  else if (name == "zipf") p.routing = *Routing::parse("zipf:1.2");
  else if (name == "one-empty") o.empty_experts = shape.experts > shape.topk ? 1 : 0;
  else if (name != "uniform" && name != "masked")
    return fail(Errc::usage, "unknown routing '" + name + "' (uniform, hot, zipf, one-empty, masked)");
  Routed r = FT_TRY(make_routing(p, tokens, o));
  // masked: this rank owns the first half of the experts; the others' slots are -1.
  if (name == "masked")
    for (std::int32_t& id : r.ids)
      if (id >= (shape.experts + 1) / 2) id = -1;
  return r;
}

DevicePtr ptr(const void* p) { return DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }

// Tokens checked against the reference: all up to kFullReference, else that
// many -- the first, the last and the rest spread evenly between them.
constexpr int kFullReference = 1024;
std::vector<int> sample_tokens(int tokens) {
  std::vector<int> out;
  if (tokens <= kFullReference) {
    for (int t = 0; t < tokens; ++t) out.push_back(t);
    return out;
  }
  for (int i = 0; i < kFullReference; ++i) out.push_back(int((long long)i * (tokens - 1) / (kFullReference - 1)));
  return out;
}

// Fills a device buffer with the all-ones pattern: NaN in 16-bit and fp32
// data, a huge index in sorted_ids / block_experts.
bool poison(ft_runtime* rt, void* p, std::size_t bytes) {
  const std::vector<std::uint8_t> ones(bytes, 0xff);
  return ft_runtime_upload(rt, p, ones.data(), bytes) == FT_OK;
}

// ft_plan_launch captured on a stream of the runtime's device, then replayed;
// the bad-id count read back afterwards.
int launch_in_graph(ft_runtime* rt, const ft_plan* plan, ft_layer_buffers& b, void* bad_word, std::int32_t& bad_ids) {
  Device& dev = rt::runtime_of(rt)->device();
  auto stream = dev.create_stream();
  if (!stream) return FT_ERR_DEVICE;
  b.bad_ids = static_cast<std::int32_t*>(bad_word);
  int st = dev.begin_capture(*stream) ? FT_OK : FT_ERR_DEVICE;
  if (st == FT_OK) st = ft_plan_launch(plan, &b, stream->p);
  auto graph = dev.end_capture(*stream);
  if (st == FT_OK && graph) st = dev.launch_graph(*graph, *stream) && dev.synchronize(*stream) ? FT_OK : FT_ERR_DEVICE;
  else if (st == FT_OK) st = FT_ERR_DEVICE;
  if (graph) (void)dev.destroy_graph(*graph);
  (void)dev.destroy_stream(*stream);
  if (st == FT_OK) st = ft_runtime_download(rt, &bad_ids, bad_word, 4);
  return st;
}

// The support unit's reference into y_ref (`bf16_layer`: the bf16 layer on the
// same weights, fp8 problems' sanity reference): on the layer's own buffers
// when every token is checked, else on the sampled tokens alone, their x rows,
// ids and weights copied into buffers of their own. An error text, empty when
// it launched.
std::string reference_into(ft_runtime* rt, const ft_plan* plan, Allocations& mem, const ft_layer_buffers& b,
                           const Routed& routed, const std::vector<int>& sampled, void* y_ref, bool bf16_layer = false) {
  ft_problem_shape shape{};
  ft_plan_shape(plan, &shape);
  const std::size_t S = sampled.size(), H = std::size_t(shape.hidden), k = std::size_t(shape.topk), es = 2;
  rt::LayerBuffers sb{};
  sb.x = ptr(b.x), sb.topk_ids = ptr(b.topk_ids), sb.topk_weights = ptr(b.topk_weights), sb.w1 = ptr(b.w1), sb.w2 = ptr(b.w2);
  sb.x_scale = ptr(b.x_scale), sb.w1_scales = ptr(b.w1_scales), sb.w2_scales = ptr(b.w2_scales);
  sb.workspace = ptr(b.workspace);  // the runtime's reference writes the workspace's inter
  sb.workspace_bytes = b.workspace_bytes;
  if (S != std::size_t(ft_plan_tokens(plan))) {
    std::vector<std::uint16_t> row_bits(H);
    std::vector<std::int32_t> s_ids;
    std::vector<float> s_weights;
    void* sx = mem.get(S * H * es);
    void* sids = mem.get(S * k * 4);
    void* sw = mem.get(S * k * 4);
    if (!sx || !sids || !sw) return std::string("alloc: ") + ft_runtime_last_error(rt);
    for (std::size_t i = 0; i < S; ++i) {
      const std::size_t t = std::size_t(sampled[i]);
      if (ft_runtime_download(rt, row_bits.data(), static_cast<const char*>(b.x) + t * H * es, H * es) != FT_OK ||
          ft_runtime_upload(rt, static_cast<char*>(sx) + i * H * es, row_bits.data(), H * es) != FT_OK)
        return std::string("sample: ") + ft_runtime_last_error(rt);
      s_ids.insert(s_ids.end(), routed.ids.begin() + long(t * k), routed.ids.begin() + long((t + 1) * k));
      s_weights.insert(s_weights.end(), routed.weights.begin() + long(t * k), routed.weights.begin() + long((t + 1) * k));
    }
    if (ft_runtime_upload(rt, sids, s_ids.data(), s_ids.size() * 4) != FT_OK ||
        ft_runtime_upload(rt, sw, s_weights.data(), s_weights.size() * 4) != FT_OK)
      return std::string("sample: ") + ft_runtime_last_error(rt);
    sb.x = ptr(sx), sb.topk_ids = ptr(sids), sb.topk_weights = ptr(sw);
  }
  auto st = rt::runtime_of(rt)->reference(*rt::plan_of(plan), sb, ptr(y_ref), {}, int(S), bf16_layer);
  return st ? std::string() : "reference: " + st.error().describe();
}

// Y against the reference: every element written (finite), the sampled rows
// within the search's bounds.
// fp8 layers (`sane_bits` not empty): also within the sanity bound of the bf16
// layer on the same dequantised weights.
void judge(CheckRow& row, const std::vector<std::uint16_t>& all, const std::vector<std::uint16_t>& ref_bits,
           const std::vector<int>& sampled, std::size_t H, DType dtype, const std::vector<std::uint16_t>& sane_bits = {}) {
  std::size_t nonfinite = 0;
  for (std::uint16_t v : all) nonfinite += std::isfinite(half_to_f32(dtype, v)) ? 0 : 1;
  if (nonfinite) {
    row.summary = fmt::format("{} of {} outputs are NaN/Inf (unwritten or broken)", nonfinite, all.size());
    return;
  }
  const std::size_t S = sampled.size(), T = all.size() / H;
  std::vector<std::uint16_t> got(S * H);
  for (std::size_t i = 0; i < S; ++i) std::copy_n(all.begin() + long(std::size_t(sampled[i]) * H), H, got.begin() + long(i * H));
  auto values = [&](const std::vector<std::uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = half_to_f32(dtype, bits[i]);
    return out;
  };
  Comparison c = compare_output(got, values(ref_bits), dtype);
  // A support unit from before the bf16-layer reference ignores its flag and
  // returns the fp8 reference itself: then there is no sanity check to make.
  if (!sane_bits.empty() && sane_bits == ref_bits)
    c.sanity = "not checked (the export's support unit predates the bf16-layer reference)";
  else if (!sane_bits.empty())
    c = with_sanity(c, compare_output(got, values(sane_bits), dtype, fp8_sanity_tolerance()), H);
  row.passed = c.passed;
  row.rel_l2 = c.rel_l2;
  row.summary = c.summary(H) + (S == T ? "" : fmt::format(" ({} of {} tokens against the reference)", S, T));
}

CheckRow check_one(ft_runtime* rt, ProblemWeights& weights_of, const std::string& key, int tokens, const std::string& routing,
                   std::uint64_t seed, bool graph) {
  CheckRow row{key, 0, tokens, routing, false, 0, ""};
  auto failed = [&](const std::string& what) {
    row.summary = what + ": " + ft_runtime_last_error(rt);
    return row;
  };
  ft_plan* plan = nullptr;
  if (ft_runtime_select(rt, key.c_str(), tokens, &plan) != FT_OK) return failed("select");
  const std::unique_ptr<ft_plan, void (*)(ft_plan*)> guard(plan, ft_plan_free);
  row.bucket = ft_plan_bucket(plan);
  ft_problem_shape shape{};
  ft_plan_shape(plan, &shape);
  const std::size_t workspace_bytes = ft_plan_workspace_bytes(plan);
  const std::size_t T = std::size_t(tokens), H = std::size_t(shape.hidden), k = std::size_t(shape.topk), es = 2;
  auto routed = routing_for(routing, shape, tokens, seed);
  if (!routed) {
    row.summary = routed.error().describe();
    return row;
  }
  Allocations mem(rt);
  ft_layer_buffers b{};
  void* x = mem.get(T * H * es);
  void* ids = mem.get(T * k * 4);
  void* weights = mem.get(T * k * 4);
  void* y = mem.get(T * H * es);
  void* y_ref = mem.get(T * H * es);
  // One workspace, carved by the runtime (ft_layer_buffers::workspace), as the
  // Python package and new C callers pass it.
  b.workspace = mem.get(workspace_bytes);
  b.workspace_bytes = workspace_bytes;
  if (!x || !ids || !weights || !y || !y_ref || !b.workspace) return failed("alloc");
  b.x = x;
  b.w1 = weights_of.plain(1);
  b.w2 = weights_of.plain(2);
  b.topk_ids = static_cast<const std::int32_t*>(ids);
  b.topk_weights = static_cast<const float*>(weights);
  b.y = y;
  weights_of.bind_scales(b);
  // fp8 problems' X: 128-value groups of differing magnitudes, so a layer
  // reading another group's activation scale fails.
  const Problem& problem = rt::plan_of(plan)->problem->problem;
  const int x_kind = problem.dtype == DType::f16 ? FT_FILL_F16 : FT_FILL_BF16;  // fp8 layers take bf16 X
  if (ft_runtime_fill_random_as(rt, x, T * H, seed * 3 + 1, tensor_scale(problem, TensorStream::x), x_kind,
                                magnitude_group(problem, TensorStream::x)) != FT_OK)
    return failed("fill");
  if (ft_runtime_upload(rt, ids, routed->ids.data(), routed->ids.size() * 4) != FT_OK ||
      ft_runtime_upload(rt, weights, routed->weights.data(), routed->weights.size() * 4) != FT_OK)
    return failed("upload");
  // Each stage's weights in the layout its kernel reads (a server does this once, at load time).
  for (int stage : {1, 2}) {
    const int layout = ft_plan_needs_shuffled(plan, stage) ? FT_WEIGHT_LAYOUT_SHUFFLED
                       : ft_plan_needs_tiled(plan, stage)  ? FT_WEIGHT_LAYOUT_TILED
                                                            : FT_WEIGHT_LAYOUT_PLAIN;
    const void* copy = weights_of.arranged(stage, layout);
    if (!copy) return failed(fmt::format("arrange w{}", stage));
    if (layout == FT_WEIGHT_LAYOUT_SHUFFLED) (stage == 1 ? b.w1_shuffled : b.w2_shuffled) = copy;
    if (layout == FT_WEIGHT_LAYOUT_TILED) (stage == 1 ? b.w1_tiled : b.w2_tiled) = copy;
  }
  // The reference first: it overwrites `inter`, which the layer then rewrites.
  // Above kFullReference tokens it covers a sample of tokens (the first, the
  // last, the rest spread evenly): its plain loops re-read each expert's
  // weights per token, hours at T = 16384 for DeepSeek-V3. Every output
  // element is still checked for NaN (unwritten) below.
  const std::vector<int> sampled = sample_tokens(tokens);
  const std::size_t S = sampled.size();
  if (std::string e = reference_into(rt, plan, mem, b, *routed, sampled, y_ref); !e.empty()) {
    row.summary = e;
    return row;
  }
  // fp8: the bf16 layer on the same weights, for the sanity bound.
  void* y_sane = problem.fp8() ? mem.get(S * H * es) : nullptr;
  if (problem.fp8() && !y_sane) return failed("alloc");
  if (y_sane)
    if (std::string e = reference_into(rt, plan, mem, b, *routed, sampled, y_sane, true); !e.empty()) {
      row.summary = e;
      return row;
    }
  if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("reference sync");
  // Poison the output and every workspace buffer: the layer must write what it reads.
  if (!poison(rt, y, T * H * es) || !poison(rt, b.workspace, workspace_bytes)) return failed("poison");
  std::int32_t bad_ids = -1;
  if (graph) {
    void* word = mem.get(4);
    if (!word || launch_in_graph(rt, plan, b, word, bad_ids) != FT_OK) return failed("launch in a graph");
    if (bad_ids != 0) return failed(fmt::format("the layer counted {} routing ids outside [-1, experts)", bad_ids));
  } else if (ft_plan_launch_checked(plan, &b, nullptr, &bad_ids) != FT_OK) {
    return failed("launch");
  }
  std::vector<std::uint16_t> all(T * H), ref_bits(S * H), sane_bits(y_sane ? S * H : 0);
  if (ft_runtime_download(rt, all.data(), y, all.size() * 2) != FT_OK ||
      ft_runtime_download(rt, ref_bits.data(), y_ref, ref_bits.size() * 2) != FT_OK ||
      (y_sane && ft_runtime_download(rt, sane_bits.data(), y_sane, sane_bits.size() * 2) != FT_OK))
    return failed("download");
  judge(row, all, ref_bits, sampled, H, problem.dtype, sane_bits);
  return row;
}

// Each code object of the manifest rebuilt for the CPU emulator: the support
// units from their target and dtype, the stage units from their variants.
Result<std::map<std::string, std::vector<std::byte>>> emulated_objects(const rt::Manifest& m) {
  std::map<std::string, KernelSource> units;
  for (const rt::SupportUnit& u : m.supports) units.emplace(u.code_object, emit_support(*m.target_info, FT_TRY(parse_dtype(u.dtype))));
  for (const rt::ProblemEntry& p : m.problems)
    for (const rt::Bucket& b : p.buckets)
      if (!b.recipe.decode_cols)  // the one-launch decode form runs the support unit alone
        for (const Variant* v : {&*b.recipe.stage1, &*b.recipe.stage2}) units.emplace(b.files.at(v->name()), emit_variant(*v));
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& [file, unit] : units) {
    emu::EmuLibrary lib = FT_TRY(emu::compile_emulated(unit, *m.target_info));
    out.emplace(file, std::move(lib.binary));
  }
  return out;
}

Result<ft_runtime*> open_emulated(const std::string& dir, std::string& device, bool& own_objects) {
  const rt::Manifest m = FT_TRY(rt::read_manifest(dir));
  const Target* target = m.target_info;
  device = fmt::format("CPU emulator ({})", target->name);
  auto opener = [&]() -> Result<std::unique_ptr<Device>> {
    auto d = FT_TRY(emu::EmuDevice::create(*target));
    return std::unique_ptr<Device>(std::move(d));
  };
  // An export of a search on the emulator ships host libraries: run those
  // (the artifact itself); a GPU export's kernels are rebuilt for the emulator.
  own_objects = m.format == "so";
  auto runtime = FT_TRY(rt::Runtime::open(dir, opener, own_objects ? rt::Runtime::ObjectSource{} : emulated_objects));
  return rt::adopt_runtime(std::move(runtime));
}

Result<ft_runtime*> open_gpu(const std::string& dir, const std::string& selector, std::string& device) {
  char err[1024] = {0};
  ft_runtime* rt = nullptr;
  const int st = ft_runtime_open_on(dir.c_str(), selector.c_str(), &rt, err, sizeof err);
  if (st == FT_ERR_DEVICE || st == FT_ERR_TARGET)
    return fail(Errc::no_device, std::string(err) + "; without a GPU of this target, check the launch rules with --emulate", dir);
  if (st != FT_OK) return fail(Errc::invalid_input, err, dir);
  device = rt::runtime_of(rt)->device().info().name;
  return rt;
}

}  // namespace

int CheckReport::failures() const {
  return int(std::count_if(rows.begin(), rows.end(), [](const CheckRow& r) { return !r.passed; }));
}

std::string CheckReport::table() const {
  std::size_t width = 7;
  for (const CheckRow& r : rows) width = std::max(width, r.problem.size());
  std::string out = fmt::format("{:<{}}  {:>6}  {:>6}  {:<9}  {:<4}  {}\n", "problem", width, "bucket", "T", "routing", "", "result");
  for (const CheckRow& r : rows)
    out += fmt::format("{:<{}}  {:>6}  {:>6}  {:<9}  {:<4}  {}\n", r.problem, width, r.bucket, r.tokens, r.routing,
                       r.passed ? "ok" : "FAIL", r.summary);
  return out;
}

std::vector<int> check_tokens(const std::vector<int>& buckets) {
  std::set<int> t;
  int previous = 0;
  for (int b : buckets) {
    t.insert(b);
    if (b > 2) t.insert((b - 1) % 2 == 1 ? b - 1 : b - 2);         // odd, just below the bucket
    if (b - previous > 4) t.insert(((previous + b) / 2) | 1);      // odd, between two buckets
    previous = b;
  }
  if (!buckets.empty()) t.insert((buckets.back() + std::max(1, buckets.back() / 4)) | 1);  // above the largest
  return {t.begin(), t.end()};
}

Result<CheckReport> check_export(const CheckOptions& o) {
  for (const std::string& r : o.routings)
    if (r != "uniform" && r != "hot" && r != "zipf" && r != "one-empty" && r != "masked")
      return fail(Errc::usage, "unknown routing '" + r + "' (uniform, hot, zipf, one-empty, masked)");
  CheckReport report;
  RuntimeHandle h;
  h.rt = o.emulate ? FT_TRY(open_emulated(o.dir, report.device, report.own_objects)) : FT_TRY(open_gpu(o.dir, o.device, report.device));
  report.target = ft_runtime_target(h.rt);
  bool found = !o.problem;
  for (int p = 0; p < ft_runtime_problem_count(h.rt); ++p) {
    const std::string key = ft_runtime_problem_key(h.rt, p);
    if (o.problem && key != *o.problem) continue;
    found = true;
    std::vector<int> buckets;
    for (int b = 0; b < ft_runtime_bucket_count(h.rt, p); ++b) buckets.push_back(ft_runtime_bucket_tokens(h.rt, p, b));
    const std::vector<int> tokens = o.tokens.empty() ? check_tokens(buckets) : o.tokens;
    ft_plan* first = nullptr;
    if (ft_runtime_select(h.rt, key.c_str(), 1, &first) != FT_OK)
      return fail(Errc::internal, ft_runtime_last_error(h.rt), key);
    const Problem problem = rt::plan_of(first)->problem->problem;
    ft_plan_free(first);
    ProblemWeights weights(h.rt, problem, o.seed);
    if (!weights.error().empty()) return fail(Errc::device, weights.error(), key);
    for (int t : tokens)
      for (const std::string& routing : o.routings)
        report.rows.push_back(check_one(h.rt, weights, key, t, routing, o.seed + std::uint64_t(t), o.graph));
  }
  if (!found) return fail(Errc::not_found, "the export has no problem '" + *o.problem + "'", o.dir);
  return report;
}

}  // namespace ft::check
