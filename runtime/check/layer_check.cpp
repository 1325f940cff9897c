#include "runtime/check/layer_check.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/src/runtime_impl.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"

namespace ft::check {

ProblemWeights::ProblemWeights(ft_runtime* rt, const Problem& p, std::uint64_t seed) : rt_(rt), mem_(rt), fp8_(p.fp8()) {
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
  if (fp8_ && tensor_scales(p.scales) && error_.empty()) {
    const float xs = fp8_x_scale(rt::runtime_of(rt)->manifest().target_info->fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3);
    x_scale_ = static_cast<float*>(mem_.get(4));
    if (!x_scale_ || ft_runtime_upload(rt, x_scale_, &xs, 4) != FT_OK) error_ = std::string("x_scale: ") + ft_runtime_last_error(rt);
  }
}

const void* ProblemWeights::arranged(int stage, int layout) {
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

namespace {
DevicePtr ptr(const void* p) { return DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

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

namespace {

// The runtime's view of b for the reference kernels: the layer's own buffers
// when every token is checked, else the sampled tokens' x rows, ids and
// weights copied into buffers of `mem`. An error text, empty when done.
std::string sampled_inputs(ft_runtime* rt, const ft_plan* plan, Allocations& mem, const ft_layer_buffers& b,
                           const Routed& routed, const std::vector<int>& sampled, rt::LayerBuffers& sb) {
  ft_problem_shape shape{};
  ft_plan_shape(plan, &shape);
  const std::size_t S = sampled.size(), H = std::size_t(shape.hidden), k = std::size_t(shape.topk), es = 2;
  sb = {};
  sb.x = ptr(b.x), sb.topk_ids = ptr(b.topk_ids), sb.topk_weights = ptr(b.topk_weights), sb.w1 = ptr(b.w1), sb.w2 = ptr(b.w2);
  sb.x_scale = ptr(b.x_scale), sb.w1_scales = ptr(b.w1_scales), sb.w2_scales = ptr(b.w2_scales);
  sb.inter_scale = ptr(b.inter_scale);
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
  return {};
}

}  // namespace

std::string reference_into(ft_runtime* rt, const ft_plan* plan, Allocations& mem, const ft_layer_buffers& b,
                           const Routed& routed, const std::vector<int>& sampled, void* y_ref, bool bf16_layer, void* stream) {
  rt::LayerBuffers sb;
  if (std::string e = sampled_inputs(rt, plan, mem, b, routed, sampled, sb); !e.empty()) return e;
  auto st = rt::runtime_of(rt)->reference(*rt::plan_of(plan), sb, ptr(y_ref), StreamHandle{stream}, int(sampled.size()), bf16_layer);
  return st ? std::string() : "reference: " + st.error().describe();
}

std::string calibrate_into(ft_runtime* rt, const ft_plan* plan, Allocations& mem, ft_layer_buffers& b, const Routed& routed,
                           const std::vector<int>& sampled, void* stream) {
  if (ft_plan_scales(plan) != FT_SCALES_STATIC) return {};
  rt::LayerBuffers sb;
  if (std::string e = sampled_inputs(rt, plan, mem, b, routed, sampled, sb); !e.empty()) return e;
  auto scale = rt::runtime_of(rt)->calibrate_inter_scale(*rt::plan_of(plan), sb, StreamHandle{stream}, int(sampled.size()));
  if (!scale) return "calibrate: " + scale.error().describe();
  auto* dst = static_cast<float*>(mem.get(4));
  if (!dst || ft_runtime_upload(rt, dst, &*scale, 4) != FT_OK) return std::string("inter_scale: ") + ft_runtime_last_error(rt);
  b.inter_scale = dst;
  return {};
}

// Y against the reference: every element written (finite), the sampled rows
// within the search's bounds.
// fp8 layers (`sane_bits` not empty): also within the sanity bound of the bf16
// layer on the same dequantised weights.
void judge(CheckRow& row, const std::vector<std::uint16_t>& all, const std::vector<std::uint16_t>& ref_bits,
           const std::vector<int>& sampled, std::size_t H, DType dtype, const std::vector<std::uint16_t>& sane_bits) {
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

}  // namespace ft::check
