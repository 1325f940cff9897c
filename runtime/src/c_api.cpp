// The C API (flytune_runtime.h) over ft::rt::Runtime: handles, status codes
// and the last error message.
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/include/flytune_runtime.h"
#include "runtime/src/runtime_impl.hpp"
#include "tuner/device/runtimes.hpp"

struct ft_runtime {
  std::unique_ptr<ft::rt::Runtime> rt;
  std::string last_error;
};

struct ft_plan {
  ft::rt::Plan plan;
  ft_runtime* owner = nullptr;
};

namespace {

using ft::Errc;

ft_status status_of(const ft::Error& e) {
  switch (e.code) {
    case Errc::invalid_input: return FT_ERR_MANIFEST;
    case Errc::io: return FT_ERR_FILE;
    case Errc::verify: return FT_ERR_HASH;
    case Errc::no_device: return FT_ERR_TARGET;  // device errors are re-coded as Errc::device below
    case Errc::not_found: return FT_ERR_NOT_FOUND;
    case Errc::usage: return FT_ERR_ARGUMENT;
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
  if (rt) rt->last_error = e.describe();
  return status_of(e);
}

int record(ft_runtime* rt, const ft::Status& s) { return s ? FT_OK : record(rt, s.error()); }

ft::DevicePtr ptr(const void* p) { return ft::DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }

ft::rt::LayerBuffers buffers_of(const ft_layer_buffers& b) {
  return {ptr(b.x),     ptr(b.topk_ids),   ptr(b.topk_weights), ptr(b.w1),           ptr(b.w2),
          ptr(b.w1_shuffled), ptr(b.w2_shuffled), ptr(b.inter), ptr(b.y_acc), ptr(b.sorted_ids),
          ptr(b.block_experts), ptr(b.padded_rows), ptr(b.y), ptr(b.w1_tiled), ptr(b.w2_tiled)};
}

// The C enum is the layout number ft::ShuffleArgs::layout and the manifest use.
static_assert(FT_WEIGHT_LAYOUT_PLAIN == int(ft::WeightLayoutKind::plain) &&
              FT_WEIGHT_LAYOUT_SHUFFLED == int(ft::WeightLayoutKind::shuffled) &&
              FT_WEIGHT_LAYOUT_TILED == int(ft::WeightLayoutKind::tiled));

ft::WeightLayoutKind stage_layout(const ft_plan& plan, int stage) {
  return stage == 1 ? plan.plan.bucket->w1_layout : stage == 2 ? plan.plan.bucket->w2_layout : ft::WeightLayoutKind::plain;
}

}  // namespace

namespace ft::rt {
Runtime* runtime_of(::ft_runtime* handle) { return handle ? handle->rt.get() : nullptr; }
::ft_runtime* adopt_runtime(std::unique_ptr<Runtime> runtime) {
  return runtime ? new (std::nothrow) ::ft_runtime{std::move(runtime), {}} : nullptr;
}
}  // namespace ft::rt

extern "C" {

int ft_runtime_open_on(const char* export_dir, const char* device, ft_runtime** out, char* err, size_t errlen) {
  if (!out || !export_dir) {
    copy_message("ft_runtime_open: export_dir and out must not be null", err, errlen);
    return FT_ERR_ARGUMENT;
  }
  *out = nullptr;
  std::string selector = device ? device : "";
  if (selector.empty())
    if (const char* env = std::getenv("FLYTUNE_DEVICE")) selector = env;
  auto opener = [&]() -> ft::Result<std::unique_ptr<ft::Device>> {
    auto d = ft::open_device(selector);
    if (!d) return std::unexpected(ft::Error{Errc::device, d.error().message, d.error().context});
    return d;
  };
  auto rt = ft::rt::Runtime::open(export_dir, opener);
  if (!rt) {
    copy_message(rt.error().describe(), err, errlen);
    return status_of(rt.error());
  }
  *out = new (std::nothrow) ft_runtime{std::move(*rt), {}};
  return *out ? FT_OK : FT_ERR_DEVICE;
}

int ft_runtime_open(const char* export_dir, ft_runtime** out, char* err, size_t errlen) {
  return ft_runtime_open_on(export_dir, nullptr, out, err, errlen);
}

void ft_runtime_close(ft_runtime* rt) { delete rt; }

const char* ft_runtime_last_error(const ft_runtime* rt) { return rt ? rt->last_error.c_str() : "no runtime"; }

const char* ft_runtime_target(const ft_runtime* rt) { return rt ? rt->rt->manifest().target.c_str() : ""; }

int ft_runtime_problem_count(const ft_runtime* rt) { return rt ? int(rt->rt->manifest().problems.size()) : 0; }

const char* ft_runtime_problem_key(const ft_runtime* rt, int index) {
  if (!rt || index < 0 || index >= ft_runtime_problem_count(rt)) return nullptr;
  return rt->rt->manifest().problems[std::size_t(index)].key.c_str();
}

int ft_runtime_select(ft_runtime* rt, const char* problem_key, int tokens, ft_plan** out) {
  if (!rt || !problem_key || !out) return FT_ERR_ARGUMENT;
  *out = nullptr;
  auto plan = rt->rt->select(problem_key, tokens);
  if (!plan) return record(rt, plan.error());
  *out = new (std::nothrow) ft_plan{*plan, rt};
  return *out ? FT_OK : FT_ERR_DEVICE;
}

void ft_plan_free(ft_plan* plan) { delete plan; }
int ft_plan_bucket(const ft_plan* plan) { return plan ? plan->plan.bucket->tokens : 0; }
int ft_plan_tokens(const ft_plan* plan) { return plan ? plan->plan.tokens : 0; }

void ft_plan_shape(const ft_plan* plan, ft_problem_shape* out) {
  if (!plan || !out) return;
  const ft::rt::ProblemEntry& p = *plan->plan.problem;
  *out = {p.experts, p.hidden, p.inter, p.topk, 2, p.dtype.c_str()};
}

int ft_plan_needs_shuffled(const ft_plan* plan, int stage) {
  return plan && stage_layout(*plan, stage) == ft::WeightLayoutKind::shuffled ? 1 : 0;
}

int ft_plan_needs_tiled(const ft_plan* plan, int stage) {
  return plan && stage_layout(*plan, stage) == ft::WeightLayoutKind::tiled ? 1 : 0;
}

void ft_plan_workspace(const ft_plan* plan, ft_workspace_sizes* out) {
  if (!plan || !out) return;
  const ft::rt::WorkspaceSizes w = plan->owner->rt->workspace(plan->plan);
  *out = {w.inter, w.y_acc, w.sorted_ids, w.block_experts, w.padded_rows};
}

int ft_plan_launch(const ft_plan* plan, const ft_layer_buffers* buffers, void* stream) {
  if (!plan || !buffers) return FT_ERR_ARGUMENT;
  return record(plan->owner, plan->owner->rt->launch(plan->plan, buffers_of(*buffers), ft::StreamHandle{stream}));
}

int ft_plan_reference(const ft_plan* plan, const ft_layer_buffers* buffers, void* y_ref, void* stream) {
  if (!plan || !buffers) return FT_ERR_ARGUMENT;
  return record(plan->owner, plan->owner->rt->reference(plan->plan, buffers_of(*buffers), ptr(y_ref), ft::StreamHandle{stream}));
}

int ft_runtime_shuffle_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, void* stream) {
  if (!rt) return FT_ERR_ARGUMENT;
  return record(rt, rt->rt->shuffle_weights(ptr(src), ptr(dst), rows, cols, ft::StreamHandle{stream}));
}

int ft_runtime_arrange_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, int layout, void* stream) {
  if (!rt) return FT_ERR_ARGUMENT;
  if (layout != FT_WEIGHT_LAYOUT_SHUFFLED && layout != FT_WEIGHT_LAYOUT_TILED)
    return record(rt, ft::Error{Errc::usage,
                                "ft_runtime_arrange_weights: layout " + std::to_string(layout) +
                                    " is neither FT_WEIGHT_LAYOUT_SHUFFLED (1) nor FT_WEIGHT_LAYOUT_TILED (2)",
                                {}});
  return record(rt, rt->rt->arrange_weights(ptr(src), ptr(dst), rows, cols, ft::WeightLayoutKind(layout),
                                            ft::StreamHandle{stream}));
}

int ft_runtime_alloc(ft_runtime* rt, size_t bytes, void** out) {
  if (!rt || !out) return FT_ERR_ARGUMENT;
  auto p = rt->rt->device().alloc(bytes);
  if (!p) return record(rt, p.error());
  *out = reinterpret_cast<void*>(std::uintptr_t(*p));
  return FT_OK;
}

int ft_runtime_free(ft_runtime* rt, void* p) { return rt ? record(rt, rt->rt->device().free(ptr(p))) : FT_ERR_ARGUMENT; }

int ft_runtime_upload(ft_runtime* rt, void* dst, const void* src, size_t bytes) {
  return rt ? record(rt, rt->rt->device().copy_to_device(ptr(dst), src, bytes)) : FT_ERR_ARGUMENT;
}

int ft_runtime_download(ft_runtime* rt, void* dst, const void* src, size_t bytes) {
  return rt ? record(rt, rt->rt->device().copy_to_host(dst, ptr(src), bytes)) : FT_ERR_ARGUMENT;
}

int ft_runtime_synchronize(ft_runtime* rt, void* stream) {
  return rt ? record(rt, rt->rt->device().synchronize(ft::StreamHandle{stream})) : FT_ERR_ARGUMENT;
}

int ft_runtime_fill_random(ft_runtime* rt, void* dst, size_t count, uint64_t seed, float scale) {
  return rt ? record(rt, rt->rt->fill_random(ptr(dst), count, seed, scale)) : FT_ERR_ARGUMENT;
}

}  // extern "C"
