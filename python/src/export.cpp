#include "python/src/export.hpp"

#include <atomic>
#include <filesystem>
#include <list>

#include "runtime/src/handles.hpp"
#include "emulate/emu_device.hpp"
#include "generator/target.hpp"

namespace ft::py {
namespace {

[[noreturn]] void raise(const ft_runtime* rt, int status, const std::string& context = {}) {
  const std::string message = ft_runtime_last_error(rt);
  throw Error(status, context.empty() ? message : context + ": " + message);
}

std::mutex g_registry_mutex;
std::map<std::string, std::weak_ptr<Export>> g_registry;
std::atomic<int> g_serial{0};

const char* scales_name(int mode) {
  switch (mode) {
    case FT_SCALES_NONE: return "none";
    case FT_SCALES_PER_TENSOR: return "per-tensor";
    case FT_SCALES_PER_TOKEN: return "per-token";
    case FT_SCALES_BLOCK128: return "block128";
    case FT_SCALES_STATIC: return "static";
    default: return "unknown";
  }
}

// The plan's scale tensors with their shapes, from the runtime (ft_plan_scale_shape:
// the layer program's rule, whose product ft_plan_scale_count is).
std::vector<ScaleTensor> scale_tensors(const ft_plan* p) {
  std::vector<ScaleTensor> out;
  const std::pair<const char*, int> which[] = {
      {"x_scale", FT_SCALE_X}, {"w1_scales", FT_SCALE_W1}, {"w2_scales", FT_SCALE_W2}, {"inter_scale", FT_SCALE_INTER}};
  for (const auto& [name, tensor] : which) {
    std::int64_t dims[3] = {0, 0, 0};
    if (const int rank = ft_plan_scale_shape(p, tensor, dims); rank > 0)
      out.push_back({name, std::vector<long long>(dims, dims + rank)});
  }
  return out;
}

// The export on the CPU emulator of its target: its own host libraries (an
// export of `flytune search --emulate`); launches run on this process's CPU
// on host memory, synchronously.
ft_runtime* open_emulated(const std::string& dir) {
  ft_runtime* probe = nullptr;  // the manifest's target, from the runtime's checks
  if (int st = ft::rt::open_without_device(dir.c_str(), &probe); st != FT_OK) raise(nullptr, st);
  const std::string name = ft_runtime_target(probe);
  ft_runtime_close(probe);
  const Target* target = find_target(name);
  if (!target) throw Error(FT_ERR_TARGET, dir + ": the CPU emulator has no target " + name);
  ft::emu::EmuDeviceOptions options;
  options.host_memory = true;  // XLA's host buffers are the layer's memory
  auto device = ft::emu::EmuDevice::create(*target, options);
  if (!device) throw Error(FT_ERR_DEVICE, dir + ": the CPU emulator: " + device.error().describe());
  ft_runtime* rt = nullptr;
  if (int st = ft::rt::open_with_device(dir.c_str(), std::move(*device), &rt); st != FT_OK) raise(nullptr, st);
  return rt;
}

}  // namespace

WorkspaceLayout workspace_layout(const ft_plan* p) {
  WorkspaceLayout w;
  w.total = ft_plan_workspace_bytes(p);
  const char* name = nullptr;
  std::size_t offset = 0, bytes = 0;
  for (int i = 0; ft_plan_workspace_buffer(p, i, &name, &offset, &bytes); ++i) w.buffers.push_back({name, offset, bytes});
  return w;
}

std::size_t aligned(std::size_t n) { return (n + FT_WORKSPACE_ALIGN - 1) / FT_WORKSPACE_ALIGN * FT_WORKSPACE_ALIGN; }

// The plan's backward at `tokens` and the scratch a launch carves (export.hpp, BackwardInfo).
BackwardInfo backward_info(const ft_runtime* rt, const ft_plan* p, int tokens) {
  BackwardInfo b;
  const std::size_t workspace = ft_plan_backward_workspace_bytes(p, tokens);
  if (!ft_plan_has_backward(p) || workspace == 0) {
    b.why = ft_runtime_last_error(rt);
    return b;
  }
  b.available = true;
  b.bucket = ft_plan_backward_bucket(p);
  b.dw16 = ft_plan_backward_takes_dw16(p) != 0;
  ft_problem_shape s{};
  ft_plan_shape(p, &s);
  const std::size_t pairs = std::size_t(tokens) * std::size_t(s.topk);
  const std::size_t element = std::size_t(s.element_bytes);
  const std::pair<const char*, std::size_t> parts[] = {{"saved_gate_up", pairs * 2 * std::size_t(s.inter) * element},
                                                       {"saved_inter", pairs * std::size_t(s.inter) * element},
                                                       {"workspace", workspace}};
  for (const auto& [name, bytes] : parts) {
    b.scratch.buffers.push_back({name, b.scratch.total, bytes});
    b.scratch.total += aligned(bytes);
  }
  return b;
}

// One ft_runtime on one device and the plans it has built, by (problem, T):
// at most kPlanCachePlans of them, the least recently used freed first (a
// server sees a new T on most calls; a plan is host memory only and a launch
// copies what it needs, so freeing one after its launch is safe).
struct Export::Runtime {
  using PlanKey = std::pair<std::string, int>;
  ft_runtime* rt = nullptr;
  std::mutex mutex;  // guards plans, order and calls that set rt's last error
  std::list<std::pair<PlanKey, ft_plan*>> order;  // most recently used first
  std::map<PlanKey, decltype(order)::iterator> plans;
  ft_plan* find(const PlanKey& key) {
    auto it = plans.find(key);
    if (it == plans.end()) return nullptr;
    order.splice(order.begin(), order, it->second);
    return it->second->second;
  }
  ft_plan* insert(const PlanKey& key, ft_plan* p) {
    order.emplace_front(key, p);
    plans[key] = order.begin();
    while (order.size() > std::size_t(kPlanCachePlans)) {
      ft_plan_free(order.back().second);
      plans.erase(order.back().first);
      order.pop_back();
    }
    return p;
  }
  ~Runtime() {
    for (auto& [k, p] : order) ft_plan_free(p);
    ft_runtime_close(rt);
  }
};

std::shared_ptr<Export> Export::open(const std::string& dir, const std::string& device) {
  std::shared_ptr<Export> e(new Export());
  e->dir_ = dir;
  auto r = std::make_unique<Runtime>();
  char err[1024] = "";
  if (device == "none") {
    if (int st = ft::rt::open_without_device(dir.c_str(), &r->rt); st != FT_OK) raise(nullptr, st);
    e->device_ = "none";
  } else if (device == kEmulate) {
    r->rt = open_emulated(dir);
    e->device_ = kEmulate;
  } else {
    if (int st = ft_runtime_open_on(dir.c_str(), device.c_str(), &r->rt, err, sizeof err); st != FT_OK)
      throw Error(st, err);
    e->device_ = ft::rt::device_selector_of(r->rt);
  }
  e->target_ = ft_runtime_target(r->rt);
  for (int i = 0; i < ft_runtime_problem_count(r->rt); ++i) {
    ProblemInfo p;
    p.key = ft_runtime_problem_key(r->rt, i);
    for (int b = 0; b < ft_runtime_bucket_count(r->rt, i); ++b) p.buckets.push_back(ft_runtime_bucket_tokens(r->rt, i, b));
    // The shape, from a plan at the smallest bucket (the runtime's own reading of the manifest).
    ft_plan* plan = nullptr;
    if (int st = ft_runtime_select(r->rt, p.key.c_str(), p.buckets.empty() ? 1 : p.buckets.front(), &plan); st != FT_OK)
      raise(r->rt, st, p.key);
    ft_problem_shape s{};
    ft_plan_shape(plan, &s);
    r->insert({p.key, ft_plan_tokens(plan)}, plan);
    p.experts = s.experts, p.hidden = s.hidden, p.inter = s.inter, p.topk = s.topk, p.dtype = s.dtype;
    p.element_bytes = s.element_bytes, p.scales = scales_name(ft_plan_scales(plan)), p.scale_tensors = scale_tensors(plan);
    p.has_backward = ft_plan_has_backward(plan) != 0;
    e->problems_.push_back(std::move(p));
  }
  e->runtimes_[e->device_] = std::move(r);
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(dir, ec).string();
  e->key_ = (ec ? dir : canonical) + "#" + std::to_string(++g_serial);
  std::lock_guard lock(g_registry_mutex);
  for (auto it = g_registry.begin(); it != g_registry.end();) it = it->second.expired() ? g_registry.erase(it) : std::next(it);
  g_registry[e->key_] = e;
  return e;
}

Export::~Export() = default;

std::shared_ptr<Export> find_export(const std::string& key) {
  std::lock_guard lock(g_registry_mutex);
  auto it = g_registry.find(key);
  return it == g_registry.end() ? nullptr : it->second.lock();
}

Export::Runtime& Export::runtime_for(const std::string& selector) {
  std::lock_guard lock(mutex_);
  auto it = runtimes_.find(selector);
  if (it == runtimes_.end())
    throw Error(FT_ERR_DEVICE, "the export " + dir_ + " is not open on " + selector + " (open on " + device_ +
                                   "; flytune.load(..., devices=[...]) or Export.open_on('" + selector + "'))");
  return *it->second;
}

ft_plan* Export::plan(Runtime& r, const std::string& problem, int tokens) {
  // Callers hold r.mutex and use the plan before their next call of plan().
  if (ft_plan* hit = r.find({problem, tokens})) return hit;
  ft_plan* p = nullptr;
  if (int st = ft_runtime_select(r.rt, problem.c_str(), tokens, &p); st != FT_OK) raise(r.rt, st);
  return r.insert({problem, tokens}, p);
}

int Export::cached_plans(const std::string& selector) {
  Runtime& r = runtime_for(selector);
  std::lock_guard lock(r.mutex);
  return int(r.plans.size());
}

std::string Export::find_problem(int experts, int hidden, int inter, int topk, const std::string& dtype, int tokens,
                                 const std::string& scales) {
  const std::string mode = scales.empty() ? "none" : scales;
  for (const ProblemInfo& p : problems_)
    if (p.experts == experts && p.hidden == hidden && p.inter == inter && p.topk == topk && p.dtype == dtype &&
        p.scales == mode)
      return p.key;
  // Ask the runtime for the key these shapes would have: its answer names what the export serves
  // (keys spell an fp8 problem's type e4m3:<mode> in either e4m3 flavour).
  const std::string spec = mode == "none" ? dtype : "e4m3:" + mode;
  const std::string key = "moe_e" + std::to_string(experts) + "_h" + std::to_string(hidden) + "_i" + std::to_string(inter) +
                          "_k" + std::to_string(topk) + "_" + spec + "_swiglu_uniform";
  Runtime& r = runtime_for(device_);
  std::lock_guard lock(r.mutex);
  (void)plan(r, key, tokens < 1 ? 1 : tokens);  // throws the runtime's error
  return key;
}

PlanInfo Export::plan_info(const std::string& problem, int tokens) {
  Runtime& r = runtime_for(device_);
  std::lock_guard lock(r.mutex);
  ft_plan* p = plan(r, problem, tokens);
  PlanInfo info;
  info.problem = problem;
  info.tokens = ft_plan_tokens(p);
  info.bucket = ft_plan_bucket(p);
  info.w1_shuffled = ft_plan_needs_shuffled(p, 1), info.w2_shuffled = ft_plan_needs_shuffled(p, 2);
  info.w1_tiled = ft_plan_needs_tiled(p, 1), info.w2_tiled = ft_plan_needs_tiled(p, 2);
  info.w1 = !info.w1_shuffled && !info.w1_tiled, info.w2 = !info.w2_shuffled && !info.w2_tiled;
  info.workspace = workspace_layout(p);
  ft_problem_shape s{};
  ft_plan_shape(p, &s);
  info.element_bytes = s.element_bytes, info.dtype = s.dtype;
  info.scales = scales_name(ft_plan_scales(p)), info.scale_tensors = scale_tensors(p);
  const int coverage = ft_plan_coverage(p);
  info.coverage = coverage == FT_COVERAGE_ABOVE_LARGEST ? "above_largest" : coverage == FT_COVERAGE_MISSING_BUCKET ? "missing_bucket" : "tuned";
  info.coverage_note = ft_plan_coverage_note(p);
  info.backward = backward_info(r.rt, p, info.tokens);
  return info;
}

std::vector<std::string> Export::weights_read(const std::string& problem) {
  bool need[6] = {false, false, false, false, false, false};
  for (const ProblemInfo& p : problems_) {
    if (p.key != problem) continue;
    for (int t : p.buckets) {
      const PlanInfo i = plan_info(problem, t);
      need[0] |= i.w1, need[1] |= i.w2, need[2] |= i.w1_shuffled, need[3] |= i.w2_shuffled;
      need[4] |= i.w1_tiled, need[5] |= i.w2_tiled;
    }
    std::vector<std::string> out;
    const char* names[6] = {"w1", "w2", "w1_shuffled", "w2_shuffled", "w1_tiled", "w2_tiled"};
    for (int k = 0; k < 6; ++k)
      if (need[k]) out.push_back(names[k]);
    return out;
  }
  (void)plan_info(problem, 1);  // the runtime's answer for an unknown problem
  return {};
}

std::vector<std::string> Export::weight_copies(const std::string& problem) {
  std::vector<std::string> out;
  for (std::string& name : weights_read(problem))
    if (name != "w1" && name != "w2") out.push_back(std::move(name));
  return out;
}

void Export::open_on(const std::string& selector) {
  {
    std::lock_guard lock(mutex_);
    if (runtimes_.count(selector)) return;
  }
  auto r = std::make_unique<Runtime>();
  char err[1024] = "";
  if (int st = ft_runtime_open_on(dir_.c_str(), selector.c_str(), &r->rt, err, sizeof err); st != FT_OK) throw Error(st, err);
  std::lock_guard lock(mutex_);
  runtimes_.emplace(selector, std::move(r));
}

bool Export::is_open_on(const std::string& selector) {
  std::lock_guard lock(mutex_);
  return runtimes_.count(selector) > 0;
}

void Export::launch(const std::string& selector, const std::string& problem, int tokens, const LayerCall& c, void* stream) {
  Runtime& r = runtime_for(selector);
  std::lock_guard lock(r.mutex);
  ft_plan* p = plan(r, problem, tokens);
  const std::size_t total = ft_plan_workspace_bytes(p);
  if (c.workspace_bytes < total)
    throw Error(FT_ERR_ARGUMENT, problem + " at T=" + std::to_string(tokens) + ": the workspace holds " +
                                     std::to_string(c.workspace_bytes) + " bytes, the plan needs " + std::to_string(total));
  auto ptr = [](std::uintptr_t v) { return reinterpret_cast<const void*>(v); };
  ft_layer_buffers b{};
  b.x = ptr(c.x);
  b.topk_ids = static_cast<const int32_t*>(ptr(c.topk_ids));
  b.topk_weights = static_cast<const float*>(ptr(c.topk_weights));
  b.w1 = ptr(c.w1), b.w2 = ptr(c.w2);
  b.w1_shuffled = ptr(c.w1_shuffled), b.w2_shuffled = ptr(c.w2_shuffled);
  b.w1_tiled = ptr(c.w1_tiled), b.w2_tiled = ptr(c.w2_tiled);
  b.workspace = reinterpret_cast<void*>(c.workspace);  // the runtime places every workspace buffer in it
  b.workspace_bytes = c.workspace_bytes;
  b.y = reinterpret_cast<void*>(c.y);
  b.x_scale = static_cast<const float*>(ptr(c.x_scale));
  b.w1_scales = static_cast<const float*>(ptr(c.w1_scales)), b.w2_scales = static_cast<const float*>(ptr(c.w2_scales));
  b.inter_scale = static_cast<const float*>(ptr(c.inter_scale));
  if (int st = ft_plan_launch(p, &b, stream); st != FT_OK) raise(r.rt, st, problem + " at T=" + std::to_string(tokens));
}

void Export::launch_backward(const std::string& selector, const std::string& problem, int tokens, const GradCall& c,
                             void* stream) {
  Runtime& r = runtime_for(selector);
  std::lock_guard lock(r.mutex);
  ft_plan* p = plan(r, problem, tokens);
  const std::string context = problem + " at T=" + std::to_string(tokens) + ": backward";
  const BackwardInfo b = backward_info(r.rt, p, tokens);
  if (!b.available) throw Error(FT_ERR_NOT_FOUND, context + ": " + b.why);
  if (!c.scratch || c.scratch_bytes < b.scratch.total)
    throw Error(FT_ERR_ARGUMENT, context + ": the scratch holds " + std::to_string(c.scratch_bytes) + " bytes, it needs " +
                                     std::to_string(b.scratch.total));
  auto ptr = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  ft_layer_grads g{};
  g.x = ptr(c.x);
  g.topk_ids = static_cast<const int32_t*>(ptr(c.topk_ids));
  g.topk_weights = static_cast<const float*>(ptr(c.topk_weights));
  g.w1 = ptr(c.w1), g.w2 = ptr(c.w2), g.dy = ptr(c.dy);
  g.saved_gate_up = ptr(c.scratch + b.scratch.buffers[0].offset);
  g.saved_inter = ptr(c.scratch + b.scratch.buffers[1].offset);
  g.dx = static_cast<float*>(ptr(c.dx)), g.dw1 = static_cast<float*>(ptr(c.dw1)), g.dw2 = static_cast<float*>(ptr(c.dw2));
  g.d_topk_weights = static_cast<float*>(ptr(c.d_topk_weights));
  g.dw1_16 = ptr(c.dw1_16), g.dw2_16 = ptr(c.dw2_16);
  g.workspace = ptr(c.scratch + b.scratch.buffers[2].offset);
  g.workspace_bytes = b.scratch.buffers[2].bytes;
  // The forward keeps no saved tensors: recompute them, then the backward on the same stream.
  if (int st = ft_plan_backward_saved(p, &g, stream); st != FT_OK) raise(r.rt, st, context);
  if (int st = ft_plan_backward_launch(p, &g, stream); st != FT_OK) raise(r.rt, st, context);
}

void Export::arrange(const std::string& selector, std::uintptr_t src, std::uintptr_t dst, int rows, int cols, int layout,
                     void* stream, int element_bytes) {
  Runtime& r = runtime_for(selector);
  std::lock_guard lock(r.mutex);
  if (int st = ft_runtime_arrange_weights_of(r.rt, reinterpret_cast<const void*>(src), reinterpret_cast<void*>(dst), rows,
                                             cols, element_bytes, layout, stream);
      st != FT_OK)
    raise(r.rt, st);
}

std::size_t fp8_ocp_to_fnuz(std::uintptr_t codes, std::size_t count, std::uintptr_t scales, std::size_t scale_count) {
  std::size_t nans = 0;
  if (int st = ft_fp8_ocp_to_fnuz(reinterpret_cast<std::uint8_t*>(codes), count, reinterpret_cast<float*>(scales),
                                  scale_count, &nans);
      st != FT_OK)
    raise(nullptr, st);
  return nans;
}

}  // namespace ft::py
