#include "tuner/worker/worker_service.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "generator/variant.hpp"
#include "tuner/device/telemetry.hpp"
#include "tuner/layer/layer_bench.hpp"
#include "tuner/worker/worker_device.hpp"
#include "tuner/workload/workload.hpp"

namespace ft {
namespace {

std::string errc_name(Errc c) {
  switch (c) {
    case Errc::device: return "device";
    case Errc::no_device: return "no_device";
    case Errc::verify: return "verify";
    case Errc::timeout: return "timeout";
    case Errc::invalid_input: return "invalid_input";
    case Errc::io: return "io";
    default: return "error";
  }
}

nlohmann::json error_json(const Error& e) {
  return {{"ok", false}, {"error", e.describe()}, {"code", errc_name(e.code)}};
}

Result<std::vector<std::byte>> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(Errc::io, "cannot read the code object", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

nlohmann::json timing_json(const Timing& t) {
  return {{"median_us", t.median_us}, {"p10_us", t.p10_us}, {"p90_us", t.p90_us}, {"min_us", t.min_us}, {"samples", t.samples}};
}

nlohmann::json device_json(const DeviceInfo& d) {
  return {{"runtime", d.runtime},         {"ordinal", d.ordinal},
          {"name", d.name},               {"arch", d.arch},
          {"compute_units", d.compute_units}, {"memory_bytes", d.memory_bytes},
          {"l2_bytes", d.l2_bytes},       {"max_shared_per_block", d.max_shared_per_block},
          {"clock_mhz", d.clock_mhz},     {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version}, {"pci_bus_id", d.pci_bus_id}};
}

}  // namespace

struct WorkerService::State {
  std::string selector;
  std::unique_ptr<Device> device;
  std::unique_ptr<LayerBench> bench;
  Problem problem;
  const Target* target = nullptr;
  std::map<std::string, FunctionHandle> functions;  // by code object path + entry
  std::optional<Telemetry> telemetry;

  Result<Device*> dev() {
    if (!device) device = FT_TRY(open_worker_device(selector));
    return device.get();
  }

  Result<std::pair<Variant, FunctionHandle>> kernel(const nlohmann::json& spec) {
    if (!bench) return fail(Errc::invalid_input, "no problem open (send 'open' first)");
    Variant v = FT_TRY(Variant::from_json(spec.at("variant")));
    const std::string path = spec.at("code_object").get<std::string>(), entry = spec.at("entry").get<std::string>();
    const std::string key = path + "#" + entry;
    auto it = functions.find(key);
    if (it == functions.end()) {
      auto bytes = FT_TRY(read_file(path));
      FunctionHandle f = FT_TRY(bench->load(bytes, entry, v.lds_bytes()));
      it = functions.emplace(key, f).first;
    }
    return std::pair{v, it->second};
  }

  Result<nlohmann::json> dispatch(const nlohmann::json& req) {
    const std::string op = req.at("op").get<std::string>();
    if (op == "device") {
      Device* d = FT_TRY(dev());
      return nlohmann::json{{"device", device_json(d->info())}};
    }
    if (op == "open") {
      Device* d = FT_TRY(dev());
      problem = FT_TRY(problem_from_json_text(req.at("problem").dump(), "worker request"));
      target = FT_TRY(lookup_target(req.at("target").get<std::string>()));
      if (d->info().arch != target->name)
        return fail(Errc::invalid_input, fmt::format("the GPU is {} ({}), the kernels are for {}", d->info().name,
                                                     d->info().arch, target->name));
      auto support = FT_TRY(read_file(req.at("support").get<std::string>()));
      functions.clear();
      bench.reset();
      bench = FT_TRY(LayerBench::create(*d, problem, *target, support, req.at("max_tokens").get<int>()));
      return nlohmann::json::object();
    }
    if (op == "inputs") {
      if (!bench) return fail(Errc::invalid_input, "no problem open (send 'open' first)");
      const int tokens = req.at("tokens").get<int>();
      WorkloadOptions wo;
      wo.seed = req.at("seed").get<std::uint64_t>();
      wo.empty_experts = req.value("empty_experts", 0);
      Routed r = FT_TRY(make_routing(problem, tokens, wo));
      FT_CHECK(bench->set_inputs(tokens, wo.seed, r.ids, r.weights));
      return nlohmann::json::object();
    }
    if (op == "verify") {
      auto [v, f] = FT_TRY(kernel(req));
      Comparison c = FT_TRY(bench->verify_stage(v, f));
      return nlohmann::json{{"passed", c.passed}, {"rel_l2", c.rel_l2}, {"max_abs", c.max_abs},
                            {"summary", c.summary(v.role == StageRole::stage1 ? problem.inter : problem.hidden)}};
    }
    if (op == "time") {
      auto [v, f] = FT_TRY(kernel(req));
      TimingOptions to;
      to.warmup = req.value("warmup", 3);
      to.reps = req.value("reps", 20);
      to.flush_l2 = req.value("flush_l2", true);
      Timing t = FT_TRY(bench->time_stage(v, f, to));
      return timing_json(t);
    }
    if (op == "verify_layer" || op == "time_layer") {
      auto [v1, f1] = FT_TRY(kernel(req.at("stage1")));
      auto [v2, f2] = FT_TRY(kernel(req.at("stage2")));
      if (op == "verify_layer") {
        Comparison c = FT_TRY(bench->verify_layer(v1, f1, v2, f2));
        return nlohmann::json{{"passed", c.passed}, {"rel_l2", c.rel_l2}, {"max_abs", c.max_abs}, {"summary", c.summary(problem.hidden)}};
      }
      TimingOptions to;
      to.warmup = req.value("warmup", 3);
      to.reps = req.value("reps", 20);
      to.graph = req.value("graph", false);
      LayerTiming t = FT_TRY(bench->time_layer(v1, f1, v2, f2, to));
      return nlohmann::json{{"total", timing_json(t.total)},   {"align", timing_json(t.align)},
                            {"stage1", timing_json(t.stage1)}, {"stage2", timing_json(t.stage2)},
                            {"reduce", timing_json(t.reduce)}};
    }
    if (op == "fault") {
      // Fault injection for the crash-isolation tests: a launch that writes
      // through an invalid device address, as a broken kernel would.
      if (!bench) return fail(Errc::invalid_input, "no problem open (send 'open' first)");
      FT_CHECK(bench->inject_fault());
      return fail(Errc::internal, "the injected fault did not fault");
    }
    if (op == "telemetry") {
      Device* d = FT_TRY(dev());
      if (!telemetry) telemetry = Telemetry::open(d->info());
      TelemetryReading t = telemetry->read();
      nlohmann::json j = nlohmann::json::object();
      if (t.sm_clock_mhz) j["sm_clock_mhz"] = *t.sm_clock_mhz;
      if (t.memory_clock_mhz) j["mem_clock_mhz"] = *t.memory_clock_mhz;
      if (t.temperature_c) j["temperature_c"] = *t.temperature_c;
      if (!telemetry->available()) j["unavailable"] = telemetry->problem();
      return j;
    }
    return fail(Errc::invalid_input, fmt::format("unknown worker request '{}'", op));
  }
};

WorkerService::WorkerService(std::string selector) : state_(std::make_unique<State>()) { state_->selector = std::move(selector); }
WorkerService::~WorkerService() = default;

nlohmann::json WorkerService::handle(const nlohmann::json& req) {
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
    return error_json(Error{Errc::invalid_input, "a request is a JSON object with a string \"op\"", {}});
  auto r = [&]() -> Result<nlohmann::json> {
    // nlohmann's at()/get() throw on missing or mistyped fields; the protocol
    // edge turns that into an error answer instead of a dead worker.
    try {
      return state_->dispatch(req);
    } catch (const nlohmann::json::exception& e) {
      return fail(Errc::invalid_input, fmt::format("malformed request: {}", e.what()));
    }
  }();
  if (!r) return error_json(r.error());
  nlohmann::json out = *r;
  out["ok"] = true;
  return out;
}

int serve_worker(const std::string& selector, std::istream& in, std::ostream& out) {
  WorkerService service(selector);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto req = nlohmann::json::parse(line, nullptr, false);
    nlohmann::json answer = req.is_discarded() ? error_json(Error{Errc::invalid_input, "request is not JSON", {}}) : service.handle(req);
    out << answer.dump() << '\n' << std::flush;
    // A device error may leave the GPU context unusable (illegal address, lost
    // context): end here so the search starts a fresh worker.
    if (answer.value("code", "") == "device") return 3;
  }
  return 0;
}

}  // namespace ft
