#include "measure/worker/worker_service.hpp"

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "generator/variant.hpp"
#include "device/telemetry.hpp"
#include "layer/operation.hpp"
#include "measure/backward_bench.hpp"
#include "measure/layer_bench.hpp"
#include "measure/worker/worker_device.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

Result<std::vector<std::byte>> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(Errc::io, "cannot read the code object", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

protocol::VerifyAnswer verify_answer(const Comparison& c, int row_length) {
  return {c.passed, c.rel_l2, c.max_abs, c.summary(std::size_t(row_length))};
}

TimingOptions timing_options(int warmup, int reps) {
  TimingOptions to;
  to.warmup = warmup;
  to.reps = reps;
  return to;
}

}  // namespace

struct WorkerService::State {
  DeviceFactory open_device;
  std::unique_ptr<Device> device;
  std::unique_ptr<LayerBench> bench;
  std::unique_ptr<BackwardBench> backward;  // opened for the backward instead
  Problem problem;
  const Target* target = nullptr;
  std::map<std::string, FunctionHandle> functions;  // by code object path + entry
  std::optional<Telemetry> telemetry;

  Result<Device*> dev() {
    if (!device) device = FT_TRY(open_device());
    return device.get();
  }

  // The bench of the operation opened, refusing another's requests.
  Status opened_for(const op::Operation& o) const {
    if (!bench && !backward) return fail(Errc::invalid_input, "no problem open (send 'open' first)");
    const op::Operation& open = backward ? op::moe_backward() : op::moe_forward();
    if (&open != &o)
      return fail(Errc::invalid_input, fmt::format("the problem is open for {}, not {} (open it with operation {})",
                                                   open.name, o.name, o.name));
    return {};
  }
  Result<LayerBench*> opened() {
    FT_CHECK(opened_for(op::moe_forward()));
    return bench.get();
  }
  Result<BackwardBench*> opened_backward() {
    FT_CHECK(opened_for(op::moe_backward()));
    return backward.get();
  }

  // A kernel's function, loaded once per code object and entry.
  Result<FunctionHandle> loaded(const std::string& code_object, const std::string& entry,
                                const std::function<Result<FunctionHandle>(std::span<const std::byte>)>& load) {
    const std::string key = code_object + "#" + entry;
    auto it = functions.find(key);
    if (it == functions.end()) {
      auto bytes = FT_TRY(read_file(code_object));
      it = functions.emplace(key, FT_TRY(load(bytes))).first;
    }
    return it->second;
  }

  Result<FunctionHandle> kernel(const protocol::KernelRef& k) {
    LayerBench* b = FT_TRY(opened());
    return loaded(k.code_object, k.entry, [&](std::span<const std::byte> bytes) {
      return b->load(bytes, k.entry, k.variant.lds_limit());
    });
  }

  // The recipe of a program request and its roles' kernels, loaded by the
  // opened operation's bench (the bench's program checks the recipe: roles,
  // order, target, sizes).
  Result<std::pair<LayerRecipe, RoleKernels>> program(const protocol::ProgramKernels& p) {
    FT_CHECK(opened_for(*p.operation));
    LayerRecipe recipe{target, problem, {}};
    RoleKernels k;
    for (const protocol::KernelRef& s : p.stages) {
      const op::Stage* stage = p.operation->stage(s.variant.role);
      if (!stage) return fail(Errc::invalid_input, fmt::format("{} is no stage of {}", s.variant.name(), p.operation->name));
      k.of(stage->launch) = FT_TRY(kernel(s));
      recipe.stages.push_back(s.variant);
    }
    for (const protocol::GradKernelRef& g : p.grad) {
      BackwardBench* b = FT_TRY(opened_backward());
      k.of(g.role) = FT_TRY(loaded(g.code_object, g.entry, [&](std::span<const std::byte> bytes) {
        return b->load(bytes, g.entry);
      }));
      recipe.grad.push_back({g.role, g.config});
    }
    return std::pair{std::move(recipe), k};
  }

  // The forward program of a request: the whole layer, both stages.
  static Result<std::pair<const Variant*, const Variant*>> layer_stages(const LayerRecipe& r) {
    const Variant *s1 = r.stage(StageRole::stage1), *s2 = r.stage(StageRole::stage2);
    if (!s1 || !s2 || r.stages.size() != 2)
      return fail(Errc::invalid_input, "a moe_forward program is the whole layer: one stage1 and one stage2 variant "
                                       "(a stage alone is verified and timed by 'verify' and 'time')");
    return std::pair{s1, s2};
  }

  Result<protocol::Answer> operator()(const protocol::DeviceRequest& r) {
    if (r.protocol != protocol::kVersion)
      return fail(Errc::invalid_input, fmt::format("the search speaks protocol {}, this worker speaks protocol {}: run a "
                                                   "worker of the same build",
                                                   r.protocol, protocol::kVersion));
    Device* d = FT_TRY(dev());
    return protocol::DeviceAnswer{protocol::kVersion, d->info()};
  }

  Result<protocol::Answer> operator()(const protocol::OpenRequest& r) {
    Device* d = FT_TRY(dev());
    const Target* t = FT_TRY(lookup_target(r.target));
    if (d->info().arch != t->name)
      return fail(Errc::invalid_input,
                  fmt::format("the GPU is {} ({}), the kernels are for {}", d->info().name, d->info().arch, t->name));
    auto support = FT_TRY(read_file(r.support));
    functions.clear();
    bench.reset();
    backward.reset();
    problem = r.problem;
    target = t;
    if (r.operation == &op::moe_backward()) backward = FT_TRY(BackwardBench::create(*d, problem, *target, support));
    else bench = FT_TRY(LayerBench::create(*d, problem, *target, support, r.max_tokens));
    return protocol::Done{};
  }

  Result<protocol::Answer> operator()(const protocol::InputsRequest& r) {
    if (backward) {
      FT_CHECK(backward->set_inputs(r.tokens, r.seed, r.empty_experts));
      return protocol::Done{};
    }
    LayerBench* b = FT_TRY(opened());
    WorkloadOptions wo;
    wo.seed = r.seed;
    wo.empty_experts = r.empty_experts;
    Routed routed = FT_TRY(make_routing(problem, r.tokens, wo));
    FT_CHECK(b->set_inputs(r.tokens, wo.seed, routed.ids, routed.weights));
    return protocol::Done{};
  }

  Result<protocol::Answer> operator()(const protocol::VerifyRequest& r) {
    FunctionHandle f = FT_TRY(kernel(r.kernel));
    Comparison c = FT_TRY(bench->verify_stage(r.kernel.variant, f));
    return verify_answer(c, r.kernel.variant.role == StageRole::stage1 ? problem.inter : problem.hidden);
  }

  Result<protocol::Answer> operator()(const protocol::TimeRequest& r) {
    FunctionHandle f = FT_TRY(kernel(r.kernel));
    TimingOptions to = timing_options(r.warmup, r.reps);
    to.flush_l2 = r.flush_l2;
    return FT_TRY(bench->time_stage(r.kernel.variant, f, to));
  }

  Result<protocol::Answer> operator()(const protocol::VerifyProgramRequest& r) {
    const auto [recipe, k] = FT_TRY(program(r.program));
    if (backward) {
      const BackwardCheck c = FT_TRY(backward->verify(recipe, k));
      const Comparison worst = c.buffers.empty() ? Comparison{} : c.worst();
      return protocol::VerifyAnswer{c.passed(), worst.rel_l2, worst.max_abs, c.summary()};
    }
    const auto [s1, s2] = FT_TRY(layer_stages(recipe));
    Comparison c = FT_TRY(bench->verify_layer(*s1, k.of(Role::stage1), *s2, k.of(Role::stage2)));
    return verify_answer(c, problem.hidden);
  }

  Result<protocol::Answer> operator()(const protocol::TimeProgramRequest& r) {
    const auto [recipe, k] = FT_TRY(program(r.program));
    TimingOptions to = timing_options(r.warmup, r.reps);
    to.flush_l2 = r.flush_l2;
    to.graph = r.graph;
    if (backward) {
      if (r.graph) return fail(Errc::invalid_input, "the moe_backward program is timed by direct launches, not as a graph");
      return ProgramTiming{FT_TRY(backward->time(recipe, k, to)), {}};
    }
    const auto [s1, s2] = FT_TRY(layer_stages(recipe));
    return FT_TRY(bench->time_layer(*s1, k.of(Role::stage1), *s2, k.of(Role::stage2), to));
  }

  Result<protocol::Answer> operator()(const protocol::TelemetryRequest&) {
    Device* d = FT_TRY(dev());
    if (!telemetry) telemetry = Telemetry::open(d->info());
    protocol::TelemetryAnswer a;
    a.reading = telemetry->read();
    if (!telemetry->available()) a.unavailable = telemetry->problem();
    return a;
  }

  // Fault injection for the crash-isolation tests: a launch that writes
  // through an invalid device address, as a broken kernel would.
  Result<protocol::Answer> operator()(const protocol::FaultRequest&) {
    LayerBench* b = FT_TRY(opened());
    FT_CHECK(b->inject_fault());
    return fail(Errc::internal, "the injected fault did not fault");
  }
};

WorkerService::WorkerService(std::string selector)
    : WorkerService(DeviceFactory([selector = std::move(selector)] { return open_worker_device(selector); })) {}

WorkerService::WorkerService(DeviceFactory open) : state_(std::make_unique<State>()) {
  state_->open_device = std::move(open);
}

WorkerService::~WorkerService() = default;

Result<protocol::Answer> WorkerService::handle(const protocol::Request& request) {
  return std::visit(*state_, request);
}

int serve_worker(const std::string& selector, std::istream& in, std::ostream& out) {
  WorkerService service(selector);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto answer = [&]() -> Result<protocol::Answer> {
      const nlohmann::json message = FT_TRY(protocol::parse_line(line));
      const protocol::Request request = FT_TRY(protocol::decode_request(message));
      return service.handle(request);
    }();
    out << protocol::to_line(answer ? protocol::encode(*answer) : protocol::encode_failure(answer.error())) << '\n'
        << std::flush;
    // A device error may leave the GPU context unusable (illegal address, lost
    // context): end here so the search starts a fresh worker.
    if (!answer && answer.error().code == Errc::device) return 3;
  }
  return 0;
}

}  // namespace ft
