// The C API (flytune_runtime.h) over ft::rt::Runtime: handles, status codes
// and the last error message. Every entry point runs inside `guarded`, so no
// C++ exception (a bad allocation, a library's throw) reaches the C caller.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <span>

#include "runtime/include/flytune_runtime.h"
#include "runtime/src/c_api_operations.hpp"
#include "runtime/src/c_structs.hpp"
#include "runtime/src/handles.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "generator/fp8_checkpoint.hpp"
#include "device/runtimes.hpp"
#include "device/device_buffer.hpp"

// A runtime may be shared by threads (docs/EXPORT.md, "The runtime's
// promises"): the handle holds nothing a call writes. The last error is the
// calling thread's (below), and ft_plan_launch_checked's bad-id word is the
// call's own.
struct ft_runtime {
  std::unique_ptr<ft::rt::Runtime> rt;
  std::uint64_t serial = next_serial();  // tells this handle from an earlier one at the same address
  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }
};

struct ft_plan {
  ft::rt::Plan plan;
  ft_runtime* owner = nullptr;
};

namespace {

using ft::Errc;
using ft::rt::buffers_of;
using ft::rt::grads_of;
using ft::rt::with_size_note;

// The message of this thread's last failing call: of calls without a runtime
// handle, and of calls on a handle (with the handle it was on). Per thread, so
// threads sharing a runtime never read or overwrite each other's.
thread_local std::string g_last_error;
struct HandleError {
  const ft_runtime* rt = nullptr;
  std::uint64_t serial = 0;
  std::string message;
};
thread_local HandleError g_handle_error;

ft_status status_of(const ft::Error& e) {
  switch (e.code) {
    case Errc::invalid_input: return FT_ERR_MANIFEST;
    case Errc::io: return FT_ERR_FILE;
    case Errc::verify: return FT_ERR_HASH;
    case Errc::no_device: return FT_ERR_TARGET;  // device errors are re-coded as Errc::device below
    case Errc::not_found: return FT_ERR_NOT_FOUND;
    case Errc::usage: return FT_ERR_ARGUMENT;
    case Errc::internal: return FT_ERR_INTERNAL;
    default: return FT_ERR_DEVICE;
  }
}

void copy_message(const std::string& msg, char* err, size_t errlen) {
  if (!err || errlen == 0) return;
  const size_t n = std::min(msg.size(), errlen - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

int record(ft_runtime* rt, const ft::Error& e) {
  if (rt)
    g_handle_error = {rt, rt->serial, e.describe()};
  else
    g_last_error = e.describe();
  return status_of(e);
}

int record(ft_runtime* rt, const ft::Status& s) { return s ? FT_OK : record(rt, s.error()); }

int bad_argument(ft_runtime* rt, const char* function, const char* what) {
  return record(rt, ft::Error{Errc::usage, std::string(function) + ": " + what, {}});
}

// Runs an entry point's body; an exception becomes FT_ERR_INTERNAL with its message.
template <class F>
int guarded(ft_runtime* rt, const char* function, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return record(rt, ft::Error{Errc::internal, std::string(function) + ": out of host memory", {}});
  } catch (const std::exception& e) {
    return record(rt, ft::Error{Errc::internal, std::string(function) + ": " + e.what(), {}});
  } catch (...) {
    return record(rt, ft::Error{Errc::internal, std::string(function) + ": an unexpected failure", {}});
  }
}

ft::DevicePtr ptr(const void* p) { return ft::DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }

// The C enums are ft::Scales and FillArgs::elem.
static_assert(FT_SCALES_NONE == int(ft::Scales::none) && FT_SCALES_PER_TENSOR == int(ft::Scales::per_tensor) &&
              FT_SCALES_PER_TOKEN == int(ft::Scales::per_token) && FT_SCALES_BLOCK128 == int(ft::Scales::block128) &&
              FT_SCALES_STATIC == int(ft::Scales::static_tensor));
static_assert(FT_FILL_BF16 == 0 && FT_FILL_F16 == 1 && FT_FILL_FP8_CODES == 2 && FT_FILL_F32_SCALES == 3,
              "ft::FillArgs::elem (templates/ft/moe_args.hpp)");

static_assert(FT_WORKSPACE_ALIGN == ft::kWorkspaceAlign, "the C header states the layer program's workspace alignment");

// The C enum is the layout number ft::ShuffleArgs::layout and the manifest use.
static_assert(FT_WEIGHT_LAYOUT_PLAIN == int(ft::WeightLayout::plain) &&
              FT_WEIGHT_LAYOUT_SHUFFLED == int(ft::WeightLayout::shuffled) &&
              FT_WEIGHT_LAYOUT_TILED == int(ft::WeightLayout::tiled));

ft::WeightLayout stage_layout(const ft_plan& plan, int stage) {
  const ft::LayerRecipe& r = plan.plan.bucket->recipe;
  const ft::Variant* v = stage == 1 ? r.stage(ft::StageRole::stage1) : stage == 2 ? r.stage(ft::StageRole::stage2) : nullptr;
  return v ? v->contract().weights : ft::WeightLayout::plain;
}

}  // namespace

namespace ft::rt {
Runtime* runtime_of(::ft_runtime* handle) { return handle ? handle->rt.get() : nullptr; }
const Plan* plan_of(const ::ft_plan* handle) { return handle ? &handle->plan : nullptr; }
::ft_runtime* adopt_runtime(std::unique_ptr<Runtime> runtime) {
  return runtime ? new (std::nothrow) ::ft_runtime{std::move(runtime)} : nullptr;
}

int open_without_device(const char* export_dir, ::ft_runtime** out) {
  return guarded(nullptr, "ft_runtime_open", [&]() -> int {
    if (!out || !export_dir) return bad_argument(nullptr, "ft_runtime_open", "export_dir and out must not be null");
    *out = nullptr;
    auto rt = Runtime::open_without_device(export_dir);
    if (!rt) return record(nullptr, rt.error());
    *out = new ::ft_runtime{std::move(*rt)};
    return FT_OK;
  });
}

int open_with_device(const char* export_dir, std::unique_ptr<Device> device, ::ft_runtime** out) {
  return guarded(nullptr, "ft_runtime_open", [&]() -> int {
    if (!out || !export_dir || !device) return bad_argument(nullptr, "ft_runtime_open", "export_dir, device and out must not be null");
    *out = nullptr;
    auto rt = Runtime::open(export_dir, [&]() -> Result<std::unique_ptr<Device>> { return std::move(device); });
    if (!rt) return record(nullptr, rt.error());
    *out = new ::ft_runtime{std::move(*rt)};
    return FT_OK;
  });
}

std::string device_selector_of(const ::ft_runtime* rt) {
  if (!rt || !rt->rt->has_device()) return "none";
  const DeviceInfo& d = rt->rt->device().info();
  return d.runtime + ":" + std::to_string(d.ordinal);
}
}  // namespace ft::rt

namespace {

// The plan of `operation` within a plan (PlanOperation::plan_of); null where it has none.
const ft::rt::OperationPlan* operation_plan(const ft::op::Operation& operation, const ft_plan* plan) {
  const ft::rt::PlanOperation* row = ft::rt::plan_operation(operation);
  return plan && row ? row->plan_of(plan->plan) : nullptr;
}

// The bucket serving `operation` at the plan's T (ft_plan_bucket, ft_plan_backward_bucket); 0 without one.
int operation_bucket(const ft::op::Operation& operation, const ft_plan* plan) {
  const ft::rt::OperationPlan* p = operation_plan(operation, plan);
  return p ? p->bucket->tokens : 0;
}

// A launch of `operation` on the caller's C struct of `size` bytes
// (ft_plan_launch_sized, ft_plan_backward_launch_sized): its row's call name
// on every error, its buffers argument's name when it is null.
int launch_operation(const ft::op::Operation& operation, const ft_plan* plan, const void* buffers, std::size_t size,
                     void* stream) {
  ft_runtime* rt = plan ? plan->owner : nullptr;
  const ft::rt::PlanOperation* row = ft::rt::plan_operation(operation);
  const char* function = row ? row->launch : "ft_plan_launch";
  return guarded(rt, function, [&]() -> int {
    if (!row)
      return record(rt, ft::Error{Errc::internal, std::string(operation.name) + ": the C API has no launch of it", {}});
    if (!plan || !buffers)
      return bad_argument(rt, function, (std::string("plan and ") + row->buffers + " must not be null").c_str());
    return record(rt, row->launch_sized(*rt->rt, plan->plan, buffers, size, ft::StreamHandle{stream}));
  });
}

}  // namespace

extern "C" {

int ft_runtime_open_on(const char* export_dir, const char* device, ft_runtime** out, char* err, size_t errlen) {
  const int st = guarded(nullptr, "ft_runtime_open", [&]() -> int {
    if (!out || !export_dir) return bad_argument(nullptr, "ft_runtime_open", "export_dir and out must not be null");
    *out = nullptr;
    std::string selector = device ? device : "";
    if (selector.empty())
      if (const char* env = std::getenv("FLYTUNE_DEVICE")) selector = env;
    auto opener = [&]() -> ft::Result<std::unique_ptr<ft::Device>> {
      // No device named: the first GPU of the export's target, where the
      // machine has GPUs of several (Runtime::open refuses a wrong one).
      std::string target;
      if (selector.empty())
        if (auto m = ft::rt::read_manifest(export_dir)) target = m->target;
      auto d = ft::open_device(selector, target);
      if (!d) return std::unexpected(ft::Error{Errc::device, d.error().message, d.error().context});
      return d;
    };
    auto rt = ft::rt::Runtime::open(export_dir, opener);
    if (!rt) return record(nullptr, rt.error());
    *out = new ft_runtime{std::move(*rt)};
    return FT_OK;
  });
  if (st != FT_OK) copy_message(g_last_error, err, errlen);
  return st;
}

int ft_runtime_open(const char* export_dir, ft_runtime** out, char* err, size_t errlen) {
  return ft_runtime_open_on(export_dir, nullptr, out, err, errlen);
}

void ft_runtime_close(ft_runtime* rt) { delete rt; }

const char* ft_runtime_last_error(const ft_runtime* rt) {
  if (!rt) return g_last_error.c_str();
  return g_handle_error.rt == rt && g_handle_error.serial == rt->serial ? g_handle_error.message.c_str() : "";
}

const char* ft_runtime_target(const ft_runtime* rt) { return rt ? rt->rt->manifest().target.c_str() : ""; }

int ft_runtime_problem_count(const ft_runtime* rt) { return rt ? int(rt->rt->manifest().problems.size()) : 0; }

const char* ft_runtime_problem_key(const ft_runtime* rt, int index) {
  if (!rt || index < 0 || index >= ft_runtime_problem_count(rt)) return nullptr;
  return rt->rt->manifest().problems[std::size_t(index)].key.c_str();
}

int ft_runtime_bucket_count(const ft_runtime* rt, int problem_index) {
  if (!rt || problem_index < 0 || problem_index >= ft_runtime_problem_count(rt)) return 0;
  return int(rt->rt->manifest().problems[std::size_t(problem_index)].buckets.size());
}

int ft_runtime_bucket_tokens(const ft_runtime* rt, int problem_index, int bucket_index) {
  if (bucket_index < 0 || bucket_index >= ft_runtime_bucket_count(rt, problem_index)) return 0;
  return rt->rt->manifest().problems[std::size_t(problem_index)].buckets[std::size_t(bucket_index)].tokens;
}

int ft_runtime_select(ft_runtime* rt, const char* problem_key, int tokens, ft_plan** out) {
  return guarded(rt, "ft_runtime_select", [&]() -> int {
    if (!rt || !problem_key || !out) return bad_argument(rt, "ft_runtime_select", "rt, problem_key and out must not be null");
    *out = nullptr;
    auto plan = rt->rt->select(problem_key, tokens);
    if (!plan) return record(rt, plan.error());
    *out = new ft_plan{std::move(*plan), rt};
    return FT_OK;
  });
}

void ft_plan_free(ft_plan* plan) { delete plan; }
int ft_plan_bucket(const ft_plan* plan) { return operation_bucket(ft::op::moe_forward(), plan); }
int ft_plan_tokens(const ft_plan* plan) { return plan ? plan->plan.tokens : 0; }
int ft_plan_coverage(const ft_plan* plan) { return plan ? int(plan->plan.coverage.coverage) : -1; }
const char* ft_plan_coverage_note(const ft_plan* plan) { return plan ? plan->plan.coverage.note.c_str() : ""; }

void ft_plan_shape(const ft_plan* plan, ft_problem_shape* out) {
  if (!plan || !out) return;
  const ft::Problem& p = plan->plan.problem->problem;
  const char* dtype = p.dtype == ft::DType::f16 ? "f16" : "bf16";
  if (p.fp8()) dtype = plan->owner->rt->manifest().target_info->fp8 == ft::Fp8Flavour::fnuz ? "e4m3fnuz" : "e4m3";
  *out = {p.experts, p.hidden, p.inter, p.topk, p.element_bytes(), dtype};
}

int ft_plan_scales(const ft_plan* plan) { return plan ? int(plan->plan.problem->problem.scales) : FT_SCALES_NONE; }

namespace {
ft::ScaleShape plan_scale_shape(const ft_plan* plan, int which) {
  if (!plan) return {};
  const ft::Problem& p = plan->plan.problem->problem;
  switch (which) {
    case FT_SCALE_X: return ft::scale_shape(p, ft::Buf::x_scale);
    case FT_SCALE_W1: return ft::scale_shape(p, ft::Buf::w1_scales);
    case FT_SCALE_W2: return ft::scale_shape(p, ft::Buf::w2_scales);
    case FT_SCALE_INTER: return ft::scale_shape(p, ft::Buf::inter_scale);
    default: return {};
  }
}
}  // namespace

size_t ft_plan_scale_count(const ft_plan* plan, int which) { return std::size_t(plan_scale_shape(plan, which).count()); }

int ft_plan_scale_shape(const ft_plan* plan, int which, int64_t dims[3]) {
  const ft::ScaleShape s = plan_scale_shape(plan, which);
  if (dims)
    for (int i = 0; i < 3; ++i) dims[i] = i < s.rank ? s.dims[std::size_t(i)] : 0;
  return s.rank;
}

int ft_plan_needs_shuffled(const ft_plan* plan, int stage) {
  return plan && stage_layout(*plan, stage) == ft::WeightLayout::shuffled ? 1 : 0;
}

int ft_plan_needs_tiled(const ft_plan* plan, int stage) {
  return plan && stage_layout(*plan, stage) == ft::WeightLayout::tiled ? 1 : 0;
}

void ft_plan_workspace(const ft_plan* plan, ft_workspace_sizes* out) {
  if (!plan || !out) return;
  const ft::rt::WorkspaceSizes w = plan->owner->rt->workspace(plan->plan);
  *out = {w.inter, w.y_acc, w.sorted_ids, w.block_experts, w.padded_rows};
}

size_t ft_plan_workspace_bytes(const ft_plan* plan) {
  return plan ? std::size_t(plan->owner->rt->workspace_placement(plan->plan).total) : 0;
}

int ft_plan_workspace_buffer(const ft_plan* plan, int index, const char** name, size_t* offset, size_t* bytes) {
  if (!plan || index < 0) return 0;
  const ft::WorkspacePlacement w = plan->owner->rt->workspace_placement(plan->plan);
  int seen = 0;
  for (std::size_t i = 0; i < ft::kBufCount; ++i) {
    const ft::Buf b = ft::Buf(i);
    if (!ft::is_workspace(b) || !plan->plan.program.bytes[i]) continue;
    if (seen++ != index) continue;
    if (name) *name = ft::to_string(b).data();  // the names are string literals
    if (offset) *offset = std::size_t(w.offset[i]);
    if (bytes) *bytes = std::size_t(plan->plan.program.bytes[i]);
    return 1;
  }
  return 0;
}

uint32_t ft_runtime_abi_version(void) { return FT_RUNTIME_ABI_VERSION; }

int ft_plan_launch_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* stream) {
  return launch_operation(ft::op::moe_forward(), plan, buffers, buffers_size, stream);
}

int ft_plan_launch_checked_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* stream,
                                 int32_t* bad_ids_out) {
  ft_runtime* rt = plan ? plan->owner : nullptr;
  return guarded(rt, "ft_plan_launch_checked", [&]() -> int {
    if (!plan || !buffers) return bad_argument(rt, "ft_plan_launch_checked", "plan and buffers must not be null");
    auto sized = buffers_of(buffers, buffers_size);
    if (!sized) return record(rt, sized.error());
    ft::rt::LayerBuffers b = *sized;
    if (!rt->rt->has_device()) return record(rt, rt->rt->launch(plan->plan, b, ft::StreamHandle{stream}));
    ft::Device& dev = rt->rt->device();
    ft::DeviceBuffer word;  // this call's bad-id count, when the caller gives none
    if (!b.bad_ids) {
      auto w = ft::DeviceBuffer::allocate(dev, 4);
      if (!w) return record(rt, w.error());
      word = std::move(*w);
      b.bad_ids = word.ptr();
    }
    const ft::StreamHandle s{stream};
    if (int st = record(rt, with_size_note(rt->rt->launch(plan->plan, b, s), buffers_size)); st != FT_OK) return st;
    if (int st = record(rt, dev.synchronize(s)); st != FT_OK) return st;
    std::int32_t bad = 0;
    if (int st = record(rt, dev.copy_to_host(&bad, b.bad_ids, 4)); st != FT_OK) return st;
    if (bad_ids_out) *bad_ids_out = bad;
    if (bad != 0)
      return record(rt, ft::Error{Errc::usage,
                                  std::to_string(bad) + " routing ids (topk_ids) lie outside [-1, " +
                                      std::to_string(plan->plan.problem->problem.experts) +
                                      "); those slots were left out of the layer",
                                  plan->plan.problem->key});
    return FT_OK;
  });
}

int ft_plan_reference_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* y_ref,
                            void* stream) {
  ft_runtime* rt = plan ? plan->owner : nullptr;
  return guarded(rt, "ft_plan_reference", [&]() -> int {
    if (!plan || !buffers) return bad_argument(rt, "ft_plan_reference", "plan and buffers must not be null");
    auto b = buffers_of(buffers, buffers_size);
    if (!b) return record(rt, b.error());
    return record(rt, with_size_note(rt->rt->reference(plan->plan, *b, ptr(y_ref), ft::StreamHandle{stream}), buffers_size));
  });
}

int ft_plan_has_backward(const ft_plan* plan) { return operation_plan(ft::op::moe_backward(), plan) ? 1 : 0; }

int ft_plan_backward_bucket(const ft_plan* plan) { return operation_bucket(ft::op::moe_backward(), plan); }

int ft_plan_backward_takes_dw16(const ft_plan* plan) {
  return ft_plan_has_backward(plan) && ft::rt::takes_dw16(*plan->plan.backward) ? 1 : 0;
}

size_t ft_plan_backward_workspace_bytes(const ft_plan* plan, int tokens) {
  ft_runtime* rt = plan ? plan->owner : nullptr;
  std::size_t bytes = 0;
  guarded(rt, "ft_plan_backward_workspace_bytes", [&]() -> int {
    if (!plan) return bad_argument(rt, "ft_plan_backward_workspace_bytes", "plan must not be null");
    auto b = rt->rt->backward_workspace_bytes(plan->plan, tokens);
    if (!b) return record(rt, b.error());
    bytes = std::size_t(*b);
    return FT_OK;
  });
  return bytes;
}

int ft_plan_backward_launch_sized(const ft_plan* plan, const ft_layer_grads* grads, size_t grads_size, void* stream) {
  return launch_operation(ft::op::moe_backward(), plan, grads, grads_size, stream);
}

int ft_plan_backward_saved_sized(const ft_plan* plan, const ft_layer_grads* grads, size_t grads_size, void* stream) {
  ft_runtime* rt = plan ? plan->owner : nullptr;
  return guarded(rt, "ft_plan_backward_saved", [&]() -> int {
    if (!plan || !grads) return bad_argument(rt, "ft_plan_backward_saved", "plan and grads must not be null");
    auto g = grads_of(grads, grads_size);
    if (!g) return record(rt, g.error());
    return record(rt, rt->rt->backward_saved(plan->plan, *g, ft::StreamHandle{stream}));
  });
}

int ft_runtime_shuffle_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, void* stream) {
  return ft_runtime_arrange_weights(rt, src, dst, rows, cols, FT_WEIGHT_LAYOUT_SHUFFLED, stream);
}

int ft_runtime_arrange_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, int layout, void* stream) {
  return ft_runtime_arrange_weights_of(rt, src, dst, rows, cols, 2, layout, stream);
}

int ft_runtime_arrange_weights_of(ft_runtime* rt, const void* src, void* dst, int rows, int cols, int element_bytes, int layout,
                                  void* stream) {
  return guarded(rt, "ft_runtime_arrange_weights", [&]() -> int {
    if (!rt) return bad_argument(rt, "ft_runtime_arrange_weights", "rt must not be null");
    if (layout != FT_WEIGHT_LAYOUT_SHUFFLED && layout != FT_WEIGHT_LAYOUT_TILED)
      return bad_argument(rt, "ft_runtime_arrange_weights",
                          ("layout " + std::to_string(layout) +
                           " is neither FT_WEIGHT_LAYOUT_SHUFFLED (1) nor FT_WEIGHT_LAYOUT_TILED (2)").c_str());
    return record(rt, rt->rt->arrange_weights(ptr(src), ptr(dst), rows, cols, ft::WeightLayout(layout),
                                              ft::StreamHandle{stream}, element_bytes));
  });
}

int ft_runtime_alloc(ft_runtime* rt, size_t bytes, void** out) {
  return guarded(rt, "ft_runtime_alloc", [&]() -> int {
    if (!rt || !out) return bad_argument(rt, "ft_runtime_alloc", "rt and out must not be null");
    auto p = rt->rt->device().alloc(bytes);
    if (!p) return record(rt, p.error());
    *out = reinterpret_cast<void*>(std::uintptr_t(*p));
    return FT_OK;
  });
}

// The helpers below share one shape: a null runtime is an argument error,
// anything else is the device's answer.
#define FT_DEVICE_CALL(name, call)                                             \
  return guarded(rt, name, [&]() -> int {                                      \
    if (!rt) return bad_argument(rt, name, "rt must not be null");             \
    return record(rt, call);                                                   \
  })

int ft_runtime_free(ft_runtime* rt, void* p) { FT_DEVICE_CALL("ft_runtime_free", rt->rt->device().free(ptr(p))); }

int ft_runtime_upload(ft_runtime* rt, void* dst, const void* src, size_t bytes) {
  FT_DEVICE_CALL("ft_runtime_upload", rt->rt->device().copy_to_device(ptr(dst), src, bytes));
}

int ft_runtime_download(ft_runtime* rt, void* dst, const void* src, size_t bytes) {
  FT_DEVICE_CALL("ft_runtime_download", rt->rt->device().copy_to_host(dst, ptr(src), bytes));
}

int ft_runtime_synchronize(ft_runtime* rt, void* stream) {
  FT_DEVICE_CALL("ft_runtime_synchronize", rt->rt->device().synchronize(ft::StreamHandle{stream}));
}

int ft_runtime_fill_random(ft_runtime* rt, void* dst, size_t count, uint64_t seed, float scale) {
  FT_DEVICE_CALL("ft_runtime_fill_random", rt->rt->fill_random(ptr(dst), count, seed, scale));
}

int ft_runtime_fill_random_as(ft_runtime* rt, void* dst, size_t count, uint64_t seed, float scale, int kind, int group) {
  if (kind < 0) return bad_argument(rt, "ft_runtime_fill_random_as", ("kind " + std::to_string(kind) + " < 0").c_str());
  FT_DEVICE_CALL("ft_runtime_fill_random_as", rt->rt->fill_random(ptr(dst), count, seed, scale, kind, group));
}

#undef FT_DEVICE_CALL

int ft_fp8_ocp_to_fnuz(uint8_t* codes, size_t count, float* scales, size_t scale_count, size_t* nans_out) {
  return guarded(nullptr, "ft_fp8_ocp_to_fnuz", [&]() -> int {
    if ((!codes && count) || (!scales && scale_count))
      return bad_argument(nullptr, "ft_fp8_ocp_to_fnuz", "codes and scales must not be null");
    auto converted = ft::convert_ocp_to_fnuz(std::span<const std::uint8_t>(codes, count), std::span<const float>(scales, scale_count));
    if (!converted) return record(nullptr, ft::Error{Errc::usage, "ft_fp8_ocp_to_fnuz: " + converted.error().message, {}});
    std::copy(converted->bytes.begin(), converted->bytes.end(), codes);
    std::copy(converted->scales.begin(), converted->scales.end(), scales);
    if (nans_out) *nans_out = converted->nans;
    return FT_OK;
  });
}

}  // extern "C"
