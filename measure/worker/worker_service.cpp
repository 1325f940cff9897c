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

#include "device/telemetry.hpp"
#include "layer/operation.hpp"
#include "measure/program_bench.hpp"
#include "measure/worker/worker_device.hpp"

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

TimingOptions timing_options(int warmup, int reps, bool flush_l2, bool graph) {
  TimingOptions to;
  to.warmup = warmup;
  to.reps = reps;
  to.flush_l2 = flush_l2;
  to.graph = graph;
  return to;
}

// The stage requests' program: a forward stage alone (a one-stage recipe of moe_forward).
protocol::ProgramKernels stage_alone(const protocol::KernelRef& k) { return {&op::moe_forward(), {k}, {}}; }

}  // namespace

struct WorkerService::State {
  DeviceFactory open_device;
  std::unique_ptr<Device> device;
  std::unique_ptr<ProgramBench> bench;  // the opened operation's (open_program_bench)
  std::map<std::string, FunctionHandle> functions;  // by code object path + entry
  std::optional<Telemetry> telemetry;

  Result<Device*> dev() {
    if (!device) device = FT_TRY(open_device());
    return device.get();
  }

  Result<ProgramBench*> opened() {
    if (!bench) return fail(Errc::invalid_input, "no problem open (send 'open' first)");
    return bench.get();
  }
  // The bench, refusing another operation's requests.
  Result<ProgramBench*> opened_for(const op::Operation& o) {
    ProgramBench* b = FT_TRY(opened());
    const op::Operation& open = b->operation();
    if (&open != &o)
      return fail(Errc::invalid_input, fmt::format("the problem is open for {}, not {} (open it with operation {})",
                                                   open.name, o.name, o.name));
    return b;
  }

  // A kernel's function, loaded by the bench once per code object and entry.
  Result<FunctionHandle> loaded(ProgramBench& b, const std::string& code_object, const std::string& entry, int lds_bytes) {
    const std::string key = code_object + "#" + entry;
    auto it = functions.find(key);
    if (it == functions.end()) {
      auto bytes = FT_TRY(read_file(code_object));
      it = functions.emplace(key, FT_TRY(b.load(bytes, entry, lds_bytes))).first;
    }
    return it->second;
  }

  // The recipe of a program request and its roles' kernels, loaded by the
  // opened operation's bench (the bench's program checks the recipe: roles,
  // order, target, sizes).
  Result<LoadedProgram> program(const protocol::ProgramKernels& p) {
    ProgramBench* b = FT_TRY(opened_for(*p.operation));
    LoadedProgram out{LayerRecipe{&b->target(), b->problem(), {}}, {}};
    for (const protocol::KernelRef& s : p.stages) {
      const op::Stage* stage = p.operation->stage(s.variant.role);
      if (!stage) return fail(Errc::invalid_input, fmt::format("{} is no stage of {}", s.variant.name(), p.operation->name));
      out.kernels.of(stage->launch) = FT_TRY(loaded(*b, s.code_object, s.entry, s.variant.lds_limit()));
      out.recipe.stages.push_back(s.variant);
    }
    for (const protocol::GradKernelRef& g : p.grad) {
      if (!p.operation->grad_role(g.role))
        return fail(Errc::invalid_input, fmt::format("{} is no role of {}", to_string(g.role), p.operation->name));
      out.kernels.of(g.role) = FT_TRY(loaded(*b, g.code_object, g.entry, 0));
      out.recipe.grad.push_back({g.role, g.config});
    }
    return out;
  }

  Result<ProgramCheck> verify(const protocol::ProgramKernels& k) {
    const LoadedProgram p = FT_TRY(program(k));
    return bench->verify(p);
  }
  Result<ProgramTiming> time(const protocol::ProgramKernels& k, const TimingOptions& to) {
    const LoadedProgram p = FT_TRY(program(k));
    return bench->time(p, to);
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
    bench = FT_TRY(open_program_bench(*r.operation, *d, r.problem, *t, support, r.max_tokens));
    return protocol::Done{};
  }

  Result<protocol::Answer> operator()(const protocol::InputsRequest& r) {
    ProgramBench* b = FT_TRY(opened());
    FT_CHECK(b->set_inputs(r.tokens, r.seed, r.empty_experts));
    return protocol::Done{};
  }

  Result<protocol::Answer> operator()(const protocol::VerifyRequest& r) { return FT_TRY(verify(stage_alone(r.kernel))); }

  Result<protocol::Answer> operator()(const protocol::TimeRequest& r) {
    return FT_TRY(time(stage_alone(r.kernel), timing_options(r.warmup, r.reps, r.flush_l2, false))).total;
  }

  Result<protocol::Answer> operator()(const protocol::VerifyProgramRequest& r) { return FT_TRY(verify(r.program)); }

  Result<protocol::Answer> operator()(const protocol::TimeProgramRequest& r) {
    return FT_TRY(time(r.program, timing_options(r.warmup, r.reps, r.flush_l2, r.graph)));
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
    ProgramBench* b = FT_TRY(opened());
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
