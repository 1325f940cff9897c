// LayerBench for fp8 layers (Problem::fp8): the quantise steps and the fp8
// reference kernels of the e4m3 support unit, the caller's scales and the
// quantise workspace, random e4m3 codes and fp32 scales drawn as the host
// workloads draw them (measure/workload/workload.hpp), and stage 1's check on
// what stage 2 reads: the e4m3 intermediate and its 1 x 128 group scales,
// dequantised, against the reference's (templates/ft/reference.hpp).
#include <cmath>

#include "generator/emitter.hpp"
#include "measure/layer_bench.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"
#include "layer/calibrate.hpp"
#include "layer/inter_scales.hpp"

namespace ft {
namespace {

Elem format_of(const Target& t) { return t.fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3; }
// Four NaN codes of a format (the poison of e4m3 buffers).
std::uint32_t nan_codes(Elem format) { return format == Elem::e4m3fnuz ? 0x80808080u : 0xffffffffu; }
constexpr std::uint32_t kNaN32 = 0xffffffffu;
constexpr int kFillBf16 = 0, kFillCodes = 2, kFillF32 = 3;  // FillArgs::elem

}  // namespace

Status LayerBench::create_fp8(ModuleHandle m, std::size_t T) {
  const Problem& p = problem_;
  reference_quantise_ = FT_TRY(dev_.function(m, reference_quantise_entry(target_)));
  const std::size_t E = p.experts, H = p.hidden, I = p.inter, k = p.topk, groups = I / kScaleGroup;
  const std::pair<Buf, std::size_t> sizes[] = {
      {Buf::x_scale, 16},
      {Buf::w1_scales, std::size_t(weight_scale_count(p.scales, E, 2 * I, H)) * 4},
      {Buf::w2_scales, std::size_t(weight_scale_count(p.scales, E, H, I)) * 4},
      {Buf::xq, T * H},
      {Buf::x_scales, std::size_t(activation_scale_count(p.scales, T, H)) * 4 + 16},
      {Buf::inter_q, T * k * I},
      {Buf::inter_scales, T * k * groups * 4},
      {Buf::inter_scale, 16}};
  for (const auto& [buf, bytes] : sizes) {
    buffers_[std::size_t(buf)] = FT_TRY(DeviceBuffer::allocate(dev_, bytes));
    at(table_, buf) = buffers_[std::size_t(buf)].ptr();
  }
  inter_ref_f32_ = FT_TRY(DeviceBuffer::allocate(dev_, T * k * I * 4));
  for (int f = 0; f < 4; ++f) {  // by ref_slot: routed-weight placement, group or row scales
    y_bf16_layer_[f] = FT_TRY(DeviceBuffer::allocate(dev_, T * p.hidden * 2));
    inter_ref_q_[f] = FT_TRY(DeviceBuffer::allocate(dev_, T * k * I));
    inter_ref_scales_[f] = FT_TRY(DeviceBuffer::allocate(dev_, T * k * groups * 4));
  }
  return {};
}

Status LayerBench::fill_fp8(std::size_t tokens, std::uint64_t seed, bool weights) {
  const Problem& p = problem_;
  const std::size_t E = p.experts, H = p.hidden, I = p.inter, k = p.topk;
  auto fill = [&](Buf b, std::size_t count, std::uint64_t s, float scale, int elem, int group) -> Status {
    FillArgs a{device_pointer<u16>(at(table_, b)), count, s, scale, elem, group, 0};
    return run_support(fill_, fill_launch(count), &a, sizeof a);
  };
  FT_CHECK(fill(Buf::x, tokens * H, tensor_seed(seed, TensorStream::x), tensor_scale(p, TensorStream::x),
                kFillBf16, magnitude_group(p, TensorStream::x)));
  if (tensor_scales(p.scales)) {
    const float xs = fp8_x_scale(format_of(target_));
    FT_CHECK(dev_.copy_to_device(at(table_, Buf::x_scale), &xs, 4));
  }
  // A finite e4m3 intermediate with positive scales, for timing stage 2 on its own.
  FT_CHECK(fill(Buf::inter_q, tokens * k * I, seed * 3 + 4, kFp8CodeSpread, kFillCodes, 0));
  FT_CHECK(fill(Buf::inter_scales, tokens * k * I / kScaleGroup, seed * 3 + 4, 1.0f / kFp8CodeSpread, kFillF32, 0));
  if (!weights) return {};
  FT_CHECK(fill(Buf::w1, E * 2 * I * H, tensor_seed(seed, TensorStream::w1), tensor_scale(p, TensorStream::w1),
                kFillCodes, 0));
  FT_CHECK(fill(Buf::w2, E * H * I, tensor_seed(seed, TensorStream::w2), tensor_scale(p, TensorStream::w2),
                kFillCodes, 0));
  FT_CHECK(fill(Buf::w1_scales, std::size_t(weight_scale_count(p.scales, E, 2 * I, H)),
                tensor_seed(seed, TensorStream::w1_scales), tensor_scale(p, TensorStream::w1_scales), kFillF32, 0));
  FT_CHECK(fill(Buf::w2_scales, std::size_t(weight_scale_count(p.scales, E, H, I)),
                tensor_seed(seed, TensorStream::w2_scales), tensor_scale(p, TensorStream::w2_scales), kFillF32, 0));
  return {};
}

Status LayerBench::download_fp8(Workload& w) {
  const Problem& p = problem_;
  const std::size_t E = p.experts, H = p.hidden, I = p.inter;
  auto bytes = [&](Buf b, auto& out, std::size_t count) -> Status {
    out.resize(count);
    return dev_.copy_to_host(out.data(), at(table_, b), count * sizeof(out[0]));
  };
  w.fp8_format = format_of(target_);
  FT_CHECK(bytes(Buf::w1, w.w1q, E * 2 * I * H));
  FT_CHECK(bytes(Buf::w2, w.w2q, E * H * I));
  FT_CHECK(bytes(Buf::w1_scales, w.w1_scales, std::size_t(weight_scale_count(p.scales, E, 2 * I, H))));
  FT_CHECK(bytes(Buf::w2_scales, w.w2_scales, std::size_t(weight_scale_count(p.scales, E, H, I))));
  w.x_scale.clear();
  w.inter_scale.clear();
  if (tensor_scales(p.scales)) FT_CHECK(bytes(Buf::x_scale, w.x_scale, 1));
  // The static intermediate scale the inputs were calibrated with (calibrate_fp8), the kernels' own.
  if (p.scales == Scales::static_tensor) FT_CHECK(bytes(Buf::inter_scale, w.inter_scale, 1));
  return {};
}

// The fp8 reference: the fp32 intermediate (into inter_ref_f32_), quantised as
// stage 2 reads it (inter_ref_q_, inter_ref_scales_: group scales, or row scales
// with kFlagInterRowScales in a.flags), then Y. f: the slot (ref_slot).
void LayerBench::bind_scales_fp8(MoeArgs& a) const {
  a.x_scale = device_pointer<const float>(at(table_, Buf::x_scale));
  a.w1_scales = device_pointer<const float>(at(table_, Buf::w1_scales));
  a.w2_scales = device_pointer<const float>(at(table_, Buf::w2_scales));
  a.inter_scale = device_pointer<const float>(at(table_, Buf::inter_scale));
  a.scales = int(problem_.scales);
}

// As the peer bench calibrates (bench/triton_moe_fp8.py calibrate_h_scale): h
// from X as the layer quantises it and the dequantised W1, before the routed weight.
Status LayerBench::calibrate_fp8() {
  if (problem_.scales != Scales::static_tensor) return {};
  MoeArgs a = input_args();
  bind_scales_fp8(a);
  a.y_acc = device_pointer<float>(inter_ref_f32_.ptr());
  FT_CHECK(run_support(reference1_, reference_launch(StageRole::stage1, problem_, tokens_), &a, sizeof a));
  FT_CHECK(dev_.synchronize());
  const float scale = FT_TRY(static_scale_of(dev_, inter_ref_f32_.ptr(), std::size_t(tokens_) * problem_.topk * problem_.inter,
                                             format_of(target_)));
  return dev_.copy_to_device(at(table_, Buf::inter_scale), &scale, 4);
}

Status LayerBench::reference_fp8(MoeArgs& a, int f) {
  const std::size_t pairs = std::size_t(tokens_) * problem_.topk, I = problem_.inter;
  bind_scales_fp8(a);
  a.y_acc = device_pointer<float>(inter_ref_f32_.ptr());
  a.inter_q = device_pointer<u8>(inter_ref_q_[f].ptr());
  a.inter_scales = device_pointer<float>(inter_ref_scales_[f].ptr());
  FT_CHECK(dev_.memset_u32(inter_ref_q_[f].ptr(), nan_codes(format_of(target_)), pairs * I / 4));
  FT_CHECK(dev_.memset_u32(inter_ref_scales_[f].ptr(), kNaN32, pairs * I / kScaleGroup));
  FT_CHECK(run_support(reference1_, reference_launch(StageRole::stage1, problem_, tokens_), &a, sizeof a));
  FT_CHECK(run_support(reference_quantise_, reference_quantise_launch(problem_, tokens_), &a, sizeof a));
  FT_CHECK(run_support(reference2_, reference_launch(StageRole::stage2, problem_, tokens_), &a, sizeof a));
  // The sanity reference: the bf16 layer on the same weights (its fp32 intermediate replaces the one above,
  // which is no longer needed once quantised).
  MoeArgs b = a;
  b.flags |= kFlagUnquantised;
  b.y = device_pointer<u16>(y_bf16_layer_[f].ptr());
  FT_CHECK(dev_.memset_u32(y_bf16_layer_[f].ptr(), 0xffffffffu, y_bf16_layer_[f].bytes() / 4));
  FT_CHECK(run_support(reference1_, reference_launch(StageRole::stage1, problem_, tokens_), &b, sizeof b));
  FT_CHECK(run_support(reference2_, reference_launch(StageRole::stage2, problem_, tokens_), &b, sizeof b));
  return dev_.synchronize();
}

// Every buffer the quantise steps and stage 1 write, poisoned.
Status LayerBench::poison_fp8(const BufferTable& table) {
  const std::size_t T = std::size_t(tokens_), H = problem_.hidden, I = problem_.inter, k = problem_.topk;
  const std::uint32_t nan = nan_codes(format_of(target_));
  FT_CHECK(dev_.memset_u32(at(table, Buf::xq), nan, T * H / 4));
  FT_CHECK(dev_.memset_u32(at(table, Buf::x_scales), kNaN32, std::size_t(activation_scale_count(problem_.scales, T, H))));
  FT_CHECK(dev_.memset_u32(at(table, Buf::inter_q), nan, T * k * I / 4));
  return dev_.memset_u32(at(table, Buf::inter_scales), kNaN32, T * k * I / kScaleGroup);
}

Result<Comparison> LayerBench::compare_inter_fp8(const BufferTable& table, int f) {
  const std::size_t pairs = std::size_t(tokens_) * problem_.topk, I = problem_.inter, groups = I / kScaleGroup;
  auto codes = [&](DevicePtr ptr) -> Result<std::vector<std::uint8_t>> {
    std::vector<std::uint8_t> out(pairs * I);
    FT_CHECK(dev_.copy_to_host(out.data(), ptr, out.size()));
    return out;
  };
  auto scales = [&](DevicePtr ptr) -> Result<std::vector<float>> {
    std::vector<float> out(pairs * groups);
    FT_CHECK(dev_.copy_to_host(out.data(), ptr, out.size() * 4));
    return out;
  };
  const Elem format = format_of(target_);
  const auto got = dequantise_rows(FT_TRY(codes(at(table, Buf::inter_q))), FT_TRY(scales(at(table, Buf::inter_scales))),
                                   (long long)I, format);
  const auto want = dequantise_rows(FT_TRY(codes(inter_ref_q_[f].ptr())), FT_TRY(scales(inter_ref_scales_[f].ptr())),
                                    (long long)I, format);
  return compare_values(got, want, tolerance_for(DType::e4m3));
}

}  // namespace ft
