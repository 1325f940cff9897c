// The typed XLA FFI handlers behind flytune.jax (docs/PYTHON.md):
//
//   flytune_moe_layer        x [..., H], topk_ids [..., k] s32, topk_weights [..., k] f32,
//                            w1, w2 and the arranged copies (empty arrays where absent),
//                            x_scale, w1_scales, w2_scales, inter_scale f32 (fp8 layers; empty where absent)
//                            -> y (x's shape and type), workspace u8[N] (XLA's scratch result)
//   flytune_moe_layer_backward  x [T, H], topk_ids [T, k] s32, topk_weights [T, k] f32, w1, w2 (plain), dy [T, H]
//                            -> dx [T, H] f32, dw1 [E, 2I, H], dw2 [E, H, I] (the weights' type, or f32 where the
//                               export's kernels predate 16-bit dW), d_topk_weights [T, k] f32,
//                               scratch u8[N] (the recomputed saved tensors and the backward's workspace)
//   flytune_arrange_weights  w (16-bit, or 8-bit fp8 codes) -> the same bytes in the layout `layout`
//
// Attributes: `export` (the registry key of flytune.load's export) and `problem`
// (the export's problem key). The stream is the platform stream of the call and
// the device its DeviceOrdinal, so under shard_map every GPU launches on its own
// runtime. Everything else -- plans, launch rules, the workspace carving -- is
// ft::py::Export's (python/src/export.hpp), the same path the torch op takes.
// No allocation and no synchronisation on the launch path: command-buffer
// compatible. Errors are ffi::Error with the runtime's message.
#include "python/src/jax_ffi.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "python/src/export.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace ft::py {
namespace {

ffi::ErrorCode code_of(int status) {
  switch (status) {
    case FT_ERR_ARGUMENT: return ffi::ErrorCode::kInvalidArgument;
    case FT_ERR_NOT_FOUND: return ffi::ErrorCode::kNotFound;
    case FT_ERR_DEVICE: return ffi::ErrorCode::kUnavailable;
    case FT_ERR_TARGET: return ffi::ErrorCode::kFailedPrecondition;
    default: return ffi::ErrorCode::kInternal;
  }
}

std::int64_t count(const ffi::AnyBuffer& b) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < b.dimensions().size(); ++i) n *= b.dimensions()[i];
  return n;
}

std::uintptr_t data(const ffi::AnyBuffer& b) {
  return count(b) == 0 ? 0 : reinterpret_cast<std::uintptr_t>(b.untyped_data());
}

std::string dims(const ffi::AnyBuffer& b) {
  std::string s = "[";
  for (std::size_t i = 0; i < b.dimensions().size(); ++i) s += (i ? ", " : "") + std::to_string(b.dimensions()[i]);
  return s + "]";
}

// Runs `body`, turning ft::py::Error (the runtime's message) into ffi::Error.
template <class F>
ffi::Error guarded(std::string_view what, F&& body) {
  try {
    body();
    return ffi::Error::Success();
  } catch (const Error& e) {
    return ffi::Error(code_of(e.status()), std::string("flytune: ") + std::string(what) + ": " + e.what());
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string("flytune: ") + std::string(what) + ": " + e.what());
  }
}

std::shared_ptr<Export> export_of(std::string_view key) {
  std::shared_ptr<Export> e = find_export(std::string(key));
  if (!e)
    throw Error(FT_ERR_ARGUMENT, "no export '" + std::string(key) +
                                     "' is loaded in this process (it was closed, or the call was compiled by another "
                                     "process: flytune.load the export before running it)");
  return e;
}

// The runtime a call runs on: the GPU of its device ordinal, or (platform "cpu",
// where no kernel can run) whatever device the export was opened on.
std::string selector(const Export& e, const char* runtime, std::int32_t ordinal) {
  return runtime ? std::string(runtime) + ":" + std::to_string(ordinal) : e.device();
}

// The scales of an fp8 layer: each one the problem reads f32 of its shape's count, the others empty.
struct Scales {
  ffi::AnyBuffer x, w1, w2, inter;
};

void check_scales(const ProblemInfo& p, const Scales& s) {
  for (const auto& [name, b] : {std::pair{"x_scale", &s.x}, std::pair{"w1_scales", &s.w1}, std::pair{"w2_scales", &s.w2},
                                std::pair{"inter_scale", &s.inter}}) {
    std::int64_t expected = 0;
    for (const ScaleTensor& t : p.scale_tensors) {
      if (t.name != name) continue;
      expected = 1;
      for (long long d : t.shape) expected *= d;
    }
    if (count(*b) != expected || (expected && b->element_type() != ffi::DataType::F32))
      throw Error(FT_ERR_ARGUMENT, std::string(name) + " " + dims(*b) + " does not fit " + p.key + " (" +
                                       (expected ? std::to_string(expected) + " float32 scales" : "none") + ")");
  }
}

template <const char* Runtime>
ffi::Error moe_layer_scaled(void* stream, std::int32_t ordinal, ffi::AnyBuffer x, ffi::AnyBuffer ids,
                            ffi::AnyBuffer weights, ffi::AnyBuffer w1, ffi::AnyBuffer w2,
                            ffi::AnyBuffer w1_shuffled, ffi::AnyBuffer w2_shuffled, ffi::AnyBuffer w1_tiled,
                            ffi::AnyBuffer w2_tiled, const Scales& scales, ffi::Result<ffi::AnyBuffer> y,
                            ffi::Result<ffi::AnyBuffer> workspace, std::string_view export_key,
                            std::string_view problem) {
  return guarded("moe_layer", [&] {
    std::shared_ptr<Export> e = export_of(export_key);
    const auto rank = x.dimensions().size();
    if (rank < 1) throw Error(FT_ERR_ARGUMENT, "x must have a hidden dimension, got " + dims(x));
    const std::int64_t hidden = x.dimensions()[rank - 1];
    const std::int64_t tokens = hidden ? count(x) / hidden : 0;
    const std::int64_t slots = count(ids);
    if (tokens == 0) return;
    if (tokens > INT32_MAX) throw Error(FT_ERR_ARGUMENT, "too many tokens: " + std::to_string(tokens));
    const std::string key(problem);
    const PlanInfo info = e->plan_info(key, int(tokens));
    const ProblemInfo* p = nullptr;
    for (const ProblemInfo& q : e->problems())
      if (q.key == key) p = &q;
    if (!p) throw Error(FT_ERR_NOT_FOUND, "the export has no problem " + key);
    // x and y: the problem's 16-bit type, bf16 in fp8 layers (whose weights are one code byte each).
    const ffi::DataType dtype = p->dtype == "f16" ? ffi::DataType::F16 : ffi::DataType::BF16;
    const char* xy = p->dtype == "f16" ? "f16" : "bf16";
    if (x.element_type() != dtype || y->element_type() != dtype || ids.element_type() != ffi::DataType::S32 ||
        weights.element_type() != ffi::DataType::F32 ||
        ffi::ByteWidth(w1.element_type()) != std::size_t(p->element_bytes) ||
        ffi::ByteWidth(w2.element_type()) != std::size_t(p->element_bytes))
      throw Error(FT_ERR_ARGUMENT, key + " takes x and y of " + xy + ", topk_ids of int32, topk_weights of "
                                   "float32 and weights of " + std::to_string(p->element_bytes) + " byte(s) (XLA types " +
                                   std::to_string(int(x.element_type())) + ", " +
                                   std::to_string(int(ids.element_type())) + ", " +
                                   std::to_string(int(weights.element_type())) + ", " +
                                   std::to_string(int(w1.element_type())) + " given)");
    check_scales(*p, scales);
    // The shapes the wrapper checked at trace time, checked again where a wrong one would read out of bounds.
    const std::int64_t w1_count = std::int64_t(p->experts) * 2 * p->inter * p->hidden;
    const std::int64_t w2_count = std::int64_t(p->experts) * p->hidden * p->inter;
    // The plain w1 / w2 may be empty where no stage reads them (prepare_weights keeps only what the plans read).
    const auto fits = [](const ffi::AnyBuffer& w, std::int64_t expected) { return count(w) == expected || !count(w); };
    if (hidden != p->hidden || slots != tokens * p->topk || count(weights) != slots || !fits(w1, w1_count) ||
        !fits(w2, w2_count) || count(*y) != count(x))
      throw Error(FT_ERR_ARGUMENT, "shapes x " + dims(x) + ", topk_ids " + dims(ids) + ", w1 " +
                                       dims(w1) + ", w2 " + dims(w2) + " do not fit " + key +
                                       " (vmap over the weights is not supported)");
    for (const auto& [copy, needed, expected] :
         {std::tuple{&w1, info.w1, w1_count}, std::tuple{&w2, info.w2, w2_count},
          std::tuple{&w1_shuffled, info.w1_shuffled, w1_count}, std::tuple{&w2_shuffled, info.w2_shuffled, w2_count},
          std::tuple{&w1_tiled, info.w1_tiled, w1_count}, std::tuple{&w2_tiled, info.w2_tiled, w2_count}})
      if (needed && count(*copy) != expected)
        throw Error(FT_ERR_ARGUMENT, "the layer at T=" + std::to_string(tokens) + " reads weights that were not "
                                     "passed: prepare them with flytune.jax.prepare_weights");
    LayerCall c;
    c.x = data(x), c.topk_ids = data(ids), c.topk_weights = data(weights);
    c.w1 = data(w1), c.w2 = data(w2);
    c.w1_shuffled = data(w1_shuffled), c.w2_shuffled = data(w2_shuffled);
    c.w1_tiled = data(w1_tiled), c.w2_tiled = data(w2_tiled);
    c.workspace = data(*workspace), c.workspace_bytes = std::size_t(count(*workspace));
    c.y = data(*y);
    c.x_scale = data(scales.x), c.w1_scales = data(scales.w1), c.w2_scales = data(scales.w2);
    c.inter_scale = data(scales.inter);
    e->launch(selector(*e, Runtime, ordinal), key, int(tokens), c, stream);
  });
}

template <const char* Runtime>
ffi::Error moe_layer(void* stream, std::int32_t ordinal, ffi::AnyBuffer x, ffi::AnyBuffer ids,
                     ffi::AnyBuffer weights, ffi::AnyBuffer w1, ffi::AnyBuffer w2,
                     ffi::AnyBuffer w1_shuffled, ffi::AnyBuffer w2_shuffled, ffi::AnyBuffer w1_tiled,
                     ffi::AnyBuffer w2_tiled, ffi::AnyBuffer x_scale, ffi::AnyBuffer w1_scales,
                     ffi::AnyBuffer w2_scales, ffi::AnyBuffer inter_scale, ffi::Result<ffi::AnyBuffer> y,
                     ffi::Result<ffi::AnyBuffer> workspace, std::string_view export_key, std::string_view problem) {
  return moe_layer_scaled<Runtime>(stream, ordinal, x, ids, weights, w1, w2, w1_shuffled, w2_shuffled, w1_tiled,
                                   w2_tiled, Scales{x_scale, w1_scales, w2_scales, inter_scale}, y, workspace, export_key,
                                   problem);
}

// The backward (ft_layer_grads through Export::launch_backward): the forward's inputs and dL/dy in; dx and
// d_topk_weights in fp32, dW1 and dW2 in the result's type -- the weights' (ft_layer_grads' dw1_16, dw2_16: the
// kernels round their fp32 accumulators once) or f32 (dw1, dw2: an export whose kernels predate that;
// flytune.jax picks by the plan's backward "dw16") -- and the scratch out. 16-bit layers only (an fp8 problem
// has no backward buckets).
template <const char* Runtime>
ffi::Error moe_layer_backward(void* stream, std::int32_t ordinal, ffi::AnyBuffer x, ffi::AnyBuffer ids,
                              ffi::AnyBuffer weights, ffi::AnyBuffer w1, ffi::AnyBuffer w2, ffi::AnyBuffer dy,
                              ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dw1,
                              ffi::Result<ffi::AnyBuffer> dw2, ffi::Result<ffi::AnyBuffer> dweights,
                              ffi::Result<ffi::AnyBuffer> scratch, std::string_view export_key, std::string_view problem) {
  return guarded("moe_layer_backward", [&] {
    std::shared_ptr<Export> e = export_of(export_key);
    const std::string key(problem);
    const ProblemInfo* p = nullptr;
    for (const ProblemInfo& q : e->problems())
      if (q.key == key) p = &q;
    if (!p) throw Error(FT_ERR_NOT_FOUND, "the export has no problem " + key);
    if (p->scales != "none") throw Error(FT_ERR_ARGUMENT, key + ": fp8 layers have no backward");
    const std::int64_t tokens = count(x) / (p->hidden ? p->hidden : 1);
    if (tokens == 0) return;
    if (tokens > INT32_MAX) throw Error(FT_ERR_ARGUMENT, "too many tokens: " + std::to_string(tokens));
    const ffi::DataType dtype = p->dtype == "f16" ? ffi::DataType::F16 : ffi::DataType::BF16;
    const std::int64_t slots = tokens * p->topk;
    const std::int64_t w1_count = std::int64_t(p->experts) * 2 * p->inter * p->hidden;
    const std::int64_t w2_count = std::int64_t(p->experts) * p->hidden * p->inter;
    const auto f32 = [](const ffi::AnyBuffer& b, std::int64_t n) { return b.element_type() == ffi::DataType::F32 && count(b) == n; };
    const auto weight_grad = [&](const ffi::AnyBuffer& b, std::int64_t n) {
      return count(b) == n && (b.element_type() == dtype || b.element_type() == ffi::DataType::F32);
    };
    if (x.element_type() != dtype || dy.element_type() != dtype || w1.element_type() != dtype ||
        w2.element_type() != dtype || ids.element_type() != ffi::DataType::S32 || count(x) != tokens * p->hidden ||
        count(dy) != count(x) || count(ids) != slots || !f32(weights, slots) || count(w1) != w1_count ||
        count(w2) != w2_count || !f32(*dx, count(x)) || !weight_grad(*dw1, w1_count) || !weight_grad(*dw2, w2_count) ||
        !f32(*dweights, slots))
      throw Error(FT_ERR_ARGUMENT, "x " + dims(x) + ", dy " + dims(dy) + ", topk_ids " + dims(ids) + ", topk_weights " +
                                       dims(weights) + ", w1 " + dims(w1) + ", w2 " + dims(w2) + " (and the gradients: " +
                                       "dx, d_topk_weights in float32, dw1, dw2 in the weights' type or float32) do " +
                                       "not fit " + key + "'s backward (the plain weights are needed)");
    // dW in the weights' type goes to ft_layer_grads' dw1_16 / dw2_16, in f32 to dw1 / dw2.
    const auto sixteen = [&](const ffi::AnyBuffer& b) { return b.element_type() == dtype; };
    GradCall c;
    c.x = data(x), c.topk_ids = data(ids), c.topk_weights = data(weights), c.w1 = data(w1), c.w2 = data(w2);
    c.dy = data(dy), c.dx = data(*dx), c.d_topk_weights = data(*dweights);
    (sixteen(*dw1) ? c.dw1_16 : c.dw1) = data(*dw1);
    (sixteen(*dw2) ? c.dw2_16 : c.dw2) = data(*dw2);
    c.scratch = data(*scratch), c.scratch_bytes = std::size_t(count(*scratch));
    e->launch_backward(selector(*e, Runtime, ordinal), key, int(tokens), c, stream);
  });
}

template <const char* Runtime>
ffi::Error arrange_weights(void* stream, std::int32_t ordinal, ffi::AnyBuffer src, ffi::Result<ffi::AnyBuffer> dst,
                           std::string_view export_key, std::int32_t layout, std::int32_t rows, std::int32_t cols) {
  return guarded("arrange_weights", [&] {
    std::shared_ptr<Export> e = export_of(export_key);
    if (count(src) != std::int64_t(rows) * cols || count(*dst) != count(src))
      throw Error(FT_ERR_ARGUMENT, "weights " + dims(src) + " are not [" + std::to_string(rows) + ", " +
                                       std::to_string(cols) + "]");
    e->arrange(selector(*e, Runtime, ordinal), data(src), data(*dst), rows, cols, layout, stream,
               int(ffi::ByteWidth(src.element_type())));
  });
}

// Platform "cpu": no GPU kernel can run there; the call goes to the device the
// export was opened on, which for an export opened without one (device="none")
// answers with the runtime's error, and on the CPU emulator (device="emulate")
// runs the kernels on XLA's host buffers. This lets a CPU-only process check the
// whole path -- lowering, attribute and buffer decoding, the plan, the error
// XLA raises -- without a GPU.
ffi::Error moe_layer_cpu(ffi::AnyBuffer x, ffi::AnyBuffer ids, ffi::AnyBuffer weights, ffi::AnyBuffer w1,
                         ffi::AnyBuffer w2, ffi::AnyBuffer w1_shuffled, ffi::AnyBuffer w2_shuffled,
                         ffi::AnyBuffer w1_tiled, ffi::AnyBuffer w2_tiled, ffi::AnyBuffer x_scale,
                         ffi::AnyBuffer w1_scales, ffi::AnyBuffer w2_scales, ffi::AnyBuffer inter_scale,
                         ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> workspace, std::string_view export_key,
                         std::string_view problem) {
  return moe_layer_scaled<nullptr>(nullptr, 0, x, ids, weights, w1, w2, w1_shuffled, w2_shuffled, w1_tiled, w2_tiled,
                                   Scales{x_scale, w1_scales, w2_scales, inter_scale}, y, workspace, export_key, problem);
}

// Platform "cpu" too: the backward on the emulator, as the forward.
ffi::Error moe_layer_backward_cpu(ffi::AnyBuffer x, ffi::AnyBuffer ids, ffi::AnyBuffer weights, ffi::AnyBuffer w1,
                                  ffi::AnyBuffer w2, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                                  ffi::Result<ffi::AnyBuffer> dw1, ffi::Result<ffi::AnyBuffer> dw2,
                                  ffi::Result<ffi::AnyBuffer> dweights, ffi::Result<ffi::AnyBuffer> scratch,
                                  std::string_view export_key, std::string_view problem) {
  return moe_layer_backward<nullptr>(nullptr, 0, x, ids, weights, w1, w2, dy, dx, dw1, dw2, dweights, scratch, export_key,
                                     problem);
}

// Platform "cpu" too: on the emulator the runtime's arrangement kernel runs on XLA's host buffers.
ffi::Error arrange_weights_cpu(ffi::AnyBuffer src, ffi::Result<ffi::AnyBuffer> dst, std::string_view export_key,
                               std::int32_t layout, std::int32_t rows, std::int32_t cols) {
  return arrange_weights<nullptr>(nullptr, 0, src, dst, export_key, layout, rows, cols);
}

constexpr char kCuda[] = "cuda";
constexpr char kHip[] = "hip";

auto bind_moe(auto ctx) {
  return std::move(ctx).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()  // x_scale
      .template Arg<ffi::AnyBuffer>()  // w1_scales
      .template Arg<ffi::AnyBuffer>()  // w2_scales
      .template Arg<ffi::AnyBuffer>()  // inter_scale
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<std::string_view>("export")
      .template Attr<std::string_view>("problem");
}

auto bind_backward(auto ctx) {
  return std::move(ctx).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()                    // topk_ids
      .template Arg<ffi::AnyBuffer>()                    // topk_weights
      .template Arg<ffi::AnyBuffer>()                    // w1
      .template Arg<ffi::AnyBuffer>()                    // w2
      .template Arg<ffi::AnyBuffer>()                    // dy
      .template Ret<ffi::AnyBuffer>()                    // dx
      .template Ret<ffi::AnyBuffer>()                    // dw1
      .template Ret<ffi::AnyBuffer>()                    // dw2
      .template Ret<ffi::AnyBuffer>()                    // d_topk_weights
      .template Ret<ffi::AnyBuffer>()                    // scratch
      .template Attr<std::string_view>("export")
      .template Attr<std::string_view>("problem");
}

auto bind_arrange(auto ctx) {
  return std::move(ctx).template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<std::string_view>("export")
      .template Attr<std::int32_t>("layout")
      .template Attr<std::int32_t>("rows")
      .template Attr<std::int32_t>("cols");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerCuda, moe_layer<kCuda>,
                              bind_moe(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerRocm, moe_layer<kHip>,
                              bind_moe(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerCpu, moe_layer_cpu, bind_moe(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerBackwardCuda, moe_layer_backward<kCuda>,
                              bind_backward(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerBackwardRocm, moe_layer_backward<kHip>,
                              bind_backward(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneMoeLayerBackwardCpu, moe_layer_backward_cpu, bind_backward(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneArrangeWeightsCuda, arrange_weights<kCuda>,
                              bind_arrange(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneArrangeWeightsRocm, arrange_weights<kHip>,
                              bind_arrange(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FlytuneArrangeWeightsCpu, arrange_weights_cpu, bind_arrange(ffi::Ffi::Bind()));

std::vector<JaxHandler> jax_handlers() {
  return {{"flytune_moe_layer", "CUDA", reinterpret_cast<void*>(&FlytuneMoeLayerCuda)},
          {"flytune_moe_layer", "ROCM", reinterpret_cast<void*>(&FlytuneMoeLayerRocm)},
          {"flytune_moe_layer", "cpu", reinterpret_cast<void*>(&FlytuneMoeLayerCpu)},
          {"flytune_moe_layer_backward", "CUDA", reinterpret_cast<void*>(&FlytuneMoeLayerBackwardCuda)},
          {"flytune_moe_layer_backward", "ROCM", reinterpret_cast<void*>(&FlytuneMoeLayerBackwardRocm)},
          {"flytune_moe_layer_backward", "cpu", reinterpret_cast<void*>(&FlytuneMoeLayerBackwardCpu)},
          {"flytune_arrange_weights", "CUDA", reinterpret_cast<void*>(&FlytuneArrangeWeightsCuda)},
          {"flytune_arrange_weights", "ROCM", reinterpret_cast<void*>(&FlytuneArrangeWeightsRocm)},
          {"flytune_arrange_weights", "cpu", reinterpret_cast<void*>(&FlytuneArrangeWeightsCpu)}};
}

std::pair<int, int> jax_ffi_api_version() { return {XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR}; }

}  // namespace ft::py
