#include "measure/worker/protocol.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "layer/operation.hpp"

namespace ft::protocol {
namespace {

using json = nlohmann::json;

constexpr std::array<std::pair<Errc, std::string_view>, 13> kErrcNames{{
    {Errc::usage, "usage"},
    {Errc::invalid_input, "invalid_input"},
    {Errc::not_found, "not_found"},
    {Errc::toolchain, "toolchain"},
    {Errc::compile, "compile"},
    {Errc::device, "device"},
    {Errc::no_device, "no_device"},
    {Errc::database, "database"},
    {Errc::io, "io"},
    {Errc::verify, "verify"},
    {Errc::timeout, "timeout"},
    {Errc::interrupted, "interrupted"},
    {Errc::internal, "internal"},
}};

// A double on the wire: JSON has no NaN or infinity (a comparison of an
// overflowing output has an infinite rel_l2), so those travel as text.
json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// The fields of one JSON object of the protocol, read with checks: every
// failure names the message and the field ("malformed time request: \"reps\"
// must be an integer"); nothing here throws.
class Fields {
 public:
  Fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status object() const {
    if (!j_.is_object()) return fail(Errc::invalid_input, fmt::format("malformed {}: not a JSON object", what_));
    return {};
  }
  // Refuses members other than `known` (a newer or foreign message).
  Status only(std::initializer_list<std::string_view> known) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || it.key() == k;
      if (!ok) return bad(it.key(), "is not a field of this message");
    }
    return {};
  }
  Result<const json*> get(std::string_view key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return bad(key, "is missing");
    return &*it;
  }
  Result<int> integer(std::string_view key) const {
    const json* v = FT_TRY(get(key));
    const bool fits = v->is_number_unsigned()  ? v->get<std::uint64_t>() <= std::uint64_t(INT32_MAX)
                      : v->is_number_integer() ? v->get<std::int64_t>() >= INT32_MIN && v->get<std::int64_t>() <= INT32_MAX
                                               : false;
    if (!fits) return bad(key, "must be an integer of 32 bits");
    return v->get<int>();
  }
  Result<std::uint64_t> unsigned64(std::string_view key) const {
    const json* v = FT_TRY(get(key));
    if (v->is_number_unsigned()) return v->get<std::uint64_t>();
    if (v->is_number_integer() && v->get<std::int64_t>() >= 0) return std::uint64_t(v->get<std::int64_t>());
    return bad(key, "must be a non-negative integer");
  }
  Result<double> real(std::string_view key) const {
    const json* v = FT_TRY(get(key));
    if (v->is_number()) return v->get<double>();
    if (v->is_string()) {
      const std::string& s = v->get_ref<const std::string&>();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    return bad(key, "must be a number");
  }
  Result<bool> boolean(std::string_view key) const {
    const json* v = FT_TRY(get(key));
    if (!v->is_boolean()) return bad(key, "must be true or false");
    return v->get<bool>();
  }
  Result<std::string> text(std::string_view key) const {
    const json* v = FT_TRY(get(key));
    if (!v->is_string()) return bad(key, "must be a string");
    return v->get<std::string>();
  }
  // A member that is itself an object, read by the caller.
  Result<Fields> nested(std::string_view key, std::string what) const {
    const json* v = FT_TRY(get(key));
    Fields f(*v, fmt::format("{} ({} of {})", what, key, what_));
    FT_CHECK(f.object());
    return f;
  }
  std::unexpected<Error> bad(std::string_view key, std::string_view why) const {
    return fail(Errc::invalid_input, fmt::format("malformed {}: \"{}\" {}", what_, key, why));
  }
  const json& raw() const { return j_; }
  const std::string& what() const { return what_; }

 private:
  const json& j_;
  std::string what_;
};

// --- pieces shared by several messages ---------------------------------------

json encode_kernel(const KernelRef& k) {
  return {{"variant", k.variant.to_json()}, {"code_object", k.code_object}, {"entry", k.entry}};
}

Result<KernelRef> decode_kernel(const Fields& f) {
  FT_CHECK(f.only({"variant", "code_object", "entry"}));
  KernelRef k;
  const json* v = FT_TRY(f.get("variant"));
  auto variant = Variant::from_json(*v);
  if (!variant) return f.bad("variant", variant.error().message);
  k.variant = std::move(*variant);
  k.code_object = FT_TRY(f.text("code_object"));
  k.entry = FT_TRY(f.text("entry"));
  return k;
}

json encode_grad_kernels(const std::vector<GradKernelRef>& stages) {
  json a = json::array();
  for (const GradKernelRef& k : stages)
    a.push_back({{"role", to_string(k.role)}, {"target", k.config.target ? k.config.target->name : ""},
                 {"config", k.config.to_json()}, {"code_object", k.code_object}, {"entry", k.entry}});
  return a;
}

// A backward stage: its role one of the backward's, its configuration one of its target's.
Result<GradKernelRef> decode_grad_kernel(const Fields& f) {
  FT_CHECK(f.only({"role", "target", "config", "code_object", "entry"}));
  GradKernelRef k;
  const std::string role = FT_TRY(f.text("role"));
  const auto& roles = op::moe_backward().grad;
  const auto it = std::find_if(roles.begin(), roles.end(), [&](const op::GradRole& r) { return to_string(r.launch) == role; });
  if (it != roles.end()) k.role = it->launch;
  else return f.bad("role", fmt::format("names no role of the backward ('{}')", shorten(role)));
  const std::string target = FT_TRY(f.text("target"));
  const Target* t = find_target(target);
  if (!t) return f.bad("target", fmt::format("names no target ('{}')", shorten(target)));
  const json* config = FT_TRY(f.get("config"));
  auto v = BackwardVariant::from_json(*config, *t);
  if (!v) return f.bad("config", v.error().message);
  k.config = *v;
  k.code_object = FT_TRY(f.text("code_object"));
  k.entry = FT_TRY(f.text("entry"));
  return k;
}

// The operation a message names (a row of op::operations()).
Result<const op::Operation*> decode_operation(const Fields& f) {
  const std::string name = FT_TRY(f.text("operation"));
  if (const op::Operation* o = op::find(name)) return o;
  std::string known;
  for (const op::Operation* o : op::operations()) known += fmt::format("{}{}", known.empty() ? "" : ", ", o->name);
  return f.bad("operation", fmt::format("names no operation ('{}'; {})", shorten(name), known));
}

json encode_program(const ProgramKernels& p) {
  json stages = json::array();
  if (p.operation->grad.empty())
    for (const KernelRef& k : p.stages) stages.push_back(encode_kernel(k));
  else
    stages = encode_grad_kernels(p.grad);
  return {{"operation", p.operation->name}, {"stages", std::move(stages)}};
}

// A program's kernels: its stages of the kind of its operation's roles.
Result<ProgramKernels> decode_program(const Fields& f) {
  ProgramKernels p;
  p.operation = FT_TRY(decode_operation(f));
  const bool backward = !p.operation->grad.empty();
  const json* a = FT_TRY(f.get("stages"));
  if (!a->is_array() || a->empty())
    return f.bad("stages", fmt::format("must be a non-empty array of {} stages", p.operation->name));
  for (std::size_t i = 0; i < a->size(); ++i) {
    const Fields k((*a)[i], fmt::format("{} stage {} of {}", p.operation->name, i, f.what()));
    FT_CHECK(k.object());
    if (backward) p.grad.push_back(FT_TRY(decode_grad_kernel(k)));
    else p.stages.push_back(FT_TRY(decode_kernel(k)));
  }
  return p;
}

json encode_problem(const Problem& p) {
  return {{"name", p.name},
          {"experts", p.experts},
          {"hidden", p.hidden},
          {"inter", p.inter},
          {"topk", p.topk},
          {"dtype", p.dtype_spec()},
          {"routing", p.routing.kind == Routing::Kind::replay ? "replay:" + p.routing.replay_file : p.routing.key()}};
}

json encode_timing(const Timing& t) {
  return {{"median_us", number(t.median_us)}, {"p10_us", number(t.p10_us)}, {"p90_us", number(t.p90_us)},
          {"min_us", number(t.min_us)},       {"samples", t.samples}};
}

Result<Timing> decode_timing(const Fields& f) {
  FT_CHECK(f.only({"median_us", "p10_us", "p90_us", "min_us", "samples"}));
  Timing t;
  t.median_us = FT_TRY(f.real("median_us"));
  t.p10_us = FT_TRY(f.real("p10_us"));
  t.p90_us = FT_TRY(f.real("p90_us"));
  t.min_us = FT_TRY(f.real("min_us"));
  t.samples = FT_TRY(f.integer("samples"));
  return t;
}

json encode_device(const DeviceInfo& d) {
  return {{"runtime", d.runtime},
          {"ordinal", d.ordinal},
          {"name", d.name},
          {"arch", d.arch},
          {"compute_units", d.compute_units},
          {"memory_bytes", d.memory_bytes},
          {"l2_bytes", d.l2_bytes},
          {"max_shared_per_block", d.max_shared_per_block},
          {"clock_mhz", d.clock_mhz},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version},
          {"pci_bus_id", d.pci_bus_id}};
}

Result<DeviceInfo> decode_device(const Fields& f) {
  FT_CHECK(f.only({"runtime", "ordinal", "name", "arch", "compute_units", "memory_bytes", "l2_bytes",
                   "max_shared_per_block", "clock_mhz", "driver_version", "runtime_version", "pci_bus_id"}));
  DeviceInfo d;
  d.runtime = FT_TRY(f.text("runtime"));
  d.ordinal = FT_TRY(f.integer("ordinal"));
  d.name = FT_TRY(f.text("name"));
  d.arch = FT_TRY(f.text("arch"));
  d.compute_units = FT_TRY(f.integer("compute_units"));
  d.memory_bytes = std::size_t(FT_TRY(f.unsigned64("memory_bytes")));
  d.l2_bytes = std::size_t(FT_TRY(f.unsigned64("l2_bytes")));
  d.max_shared_per_block = FT_TRY(f.integer("max_shared_per_block"));
  d.clock_mhz = FT_TRY(f.integer("clock_mhz"));
  d.driver_version = FT_TRY(f.text("driver_version"));
  d.runtime_version = FT_TRY(f.text("runtime_version"));
  d.pci_bus_id = FT_TRY(f.text("pci_bus_id"));
  return d;
}

// --- requests -----------------------------------------------------------------

struct RequestEncoder {
  json operator()(const DeviceRequest& r) const { return {{"protocol", r.protocol}}; }
  json operator()(const OpenRequest& r) const {
    return {{"problem", encode_problem(r.problem)}, {"target", r.target},         {"support", r.support},
            {"max_tokens", r.max_tokens},          {"operation", r.operation->name}};
  }
  json operator()(const InputsRequest& r) const {
    return {{"tokens", r.tokens}, {"seed", r.seed}, {"empty_experts", r.empty_experts}};
  }
  json operator()(const VerifyRequest& r) const { return {{"kernel", encode_kernel(r.kernel)}}; }
  json operator()(const TimeRequest& r) const {
    return {{"kernel", encode_kernel(r.kernel)}, {"warmup", r.warmup}, {"reps", r.reps}, {"flush_l2", r.flush_l2}};
  }
  json operator()(const VerifyProgramRequest& r) const { return encode_program(r.program); }
  json operator()(const TimeProgramRequest& r) const {
    json j = encode_program(r.program);
    j.update({{"warmup", r.warmup}, {"reps", r.reps}, {"flush_l2", r.flush_l2}, {"graph", r.graph}});
    return j;
  }
  json operator()(const TelemetryRequest&) const { return json::object(); }
  json operator()(const FaultRequest&) const { return json::object(); }
};

Result<Request> decode_open(const Fields& f) {
  FT_CHECK(f.only({"op", "problem", "target", "support", "max_tokens", "operation"}));
  OpenRequest r;
  const Fields p = FT_TRY(f.nested("problem", "problem"));
  auto problem = problem_from_json_text(p.raw().dump(-1, ' ', false, json::error_handler_t::replace), f.what());
  if (!problem) return f.bad("problem", problem.error().message);
  r.problem = std::move(*problem);
  r.target = FT_TRY(f.text("target"));
  r.support = FT_TRY(f.text("support"));
  r.max_tokens = FT_TRY(f.integer("max_tokens"));
  r.operation = FT_TRY(decode_operation(f));
  return r;
}

Result<Request> decode_program_request(const Fields& f, bool timed) {
  if (!timed) {
    FT_CHECK(f.only({"op", "operation", "stages"}));
    return VerifyProgramRequest{FT_TRY(decode_program(f))};
  }
  FT_CHECK(f.only({"op", "operation", "stages", "warmup", "reps", "flush_l2", "graph"}));
  TimeProgramRequest r;
  r.program = FT_TRY(decode_program(f));
  r.warmup = FT_TRY(f.integer("warmup"));
  r.reps = FT_TRY(f.integer("reps"));
  r.flush_l2 = FT_TRY(f.boolean("flush_l2"));
  r.graph = FT_TRY(f.boolean("graph"));
  return r;
}

Result<Request> decode_inputs(const Fields& f) {
  FT_CHECK(f.only({"op", "tokens", "seed", "empty_experts"}));
  InputsRequest r;
  r.tokens = FT_TRY(f.integer("tokens"));
  r.seed = FT_TRY(f.unsigned64("seed"));
  r.empty_experts = FT_TRY(f.integer("empty_experts"));
  return r;
}

Result<Request> decode_time(const Fields& f) {
  FT_CHECK(f.only({"op", "kernel", "warmup", "reps", "flush_l2"}));
  TimeRequest r;
  const Fields kernel = FT_TRY(f.nested("kernel", "kernel"));
  r.kernel = FT_TRY(decode_kernel(kernel));
  r.warmup = FT_TRY(f.integer("warmup"));
  r.reps = FT_TRY(f.integer("reps"));
  r.flush_l2 = FT_TRY(f.boolean("flush_l2"));
  return r;
}

// A request without fields beyond "op" (telemetry, fault).
template <class R>
Result<Request> decode_plain(const Fields& f) {
  FT_CHECK(f.only({"op"}));
  return R{};
}

Result<Request> decode_device_request(const Fields& f) {
  FT_CHECK(f.only({"op", "protocol"}));
  return DeviceRequest{FT_TRY(f.integer("protocol"))};
}

Result<Request> decode_verify(const Fields& f) {
  FT_CHECK(f.only({"op", "kernel"}));
  const Fields kernel = FT_TRY(f.nested("kernel", "kernel"));
  return VerifyRequest{FT_TRY(decode_kernel(kernel))};
}

// --- answers ------------------------------------------------------------------

struct AnswerEncoder {
  json operator()(const Done&) const { return json::object(); }
  json operator()(const DeviceAnswer& a) const { return {{"protocol", a.protocol}, {"device", encode_device(a.device)}}; }
  json operator()(const VerifyAnswer& a) const {
    return {{"passed", a.passed}, {"rel_l2", number(a.rel_l2)}, {"max_abs", number(a.max_abs)}, {"summary", a.summary}};
  }
  json operator()(const Timing& t) const { return {{"timing", encode_timing(t)}}; }
  json operator()(const ProgramTiming& t) const {
    json parts = json::array();
    for (const auto& [name, part] : t.parts) parts.push_back({{"name", name}, {"timing", encode_timing(part)}});
    return {{"total", encode_timing(t.total)}, {"parts", std::move(parts)}};
  }
  json operator()(const TelemetryAnswer& a) const {
    json j = json::object();
    if (a.reading.sm_clock_mhz) j["sm_clock_mhz"] = *a.reading.sm_clock_mhz;
    if (a.reading.memory_clock_mhz) j["memory_clock_mhz"] = *a.reading.memory_clock_mhz;
    if (a.reading.temperature_c) j["temperature_c"] = number(*a.reading.temperature_c);
    if (a.reading.power_w) j["power_w"] = number(*a.reading.power_w);
    if (!a.unavailable.empty()) j["unavailable"] = a.unavailable;
    return j;
  }
};

// The payload of a successful answer, by type.
template <class A>
Result<A> decode_payload(const Fields& f);

template <>
Result<Done> decode_payload<Done>(const Fields& f) {
  FT_CHECK(f.only({"ok"}));
  return Done{};
}

template <>
Result<DeviceAnswer> decode_payload<DeviceAnswer>(const Fields& f) {
  // The version first: a worker of another build may differ in everything else.
  if (!f.raw().contains("protocol"))
    return fail(Errc::invalid_input, fmt::format("the worker did not say which protocol it speaks (a flytune worker from "
                                                 "before protocol versions?); this flytune speaks protocol {}: run a "
                                                 "worker of the same build",
                                                 kVersion));
  const int version = FT_TRY(f.integer("protocol"));
  if (version != kVersion)
    return fail(Errc::invalid_input, fmt::format("the worker speaks protocol {}, this flytune speaks protocol {}: run a "
                                                 "worker of the same build",
                                                 version, kVersion));
  FT_CHECK(f.only({"ok", "protocol", "device"}));
  DeviceAnswer a;
  const Fields device = FT_TRY(f.nested("device", "device"));
  a.device = FT_TRY(decode_device(device));
  return a;
}

template <>
Result<VerifyAnswer> decode_payload<VerifyAnswer>(const Fields& f) {
  FT_CHECK(f.only({"ok", "passed", "rel_l2", "max_abs", "summary"}));
  VerifyAnswer a;
  a.passed = FT_TRY(f.boolean("passed"));
  a.rel_l2 = FT_TRY(f.real("rel_l2"));
  a.max_abs = FT_TRY(f.real("max_abs"));
  a.summary = FT_TRY(f.text("summary"));
  return a;
}

template <>
Result<Timing> decode_payload<Timing>(const Fields& f) {
  FT_CHECK(f.only({"ok", "timing"}));
  const Fields timing = FT_TRY(f.nested("timing", "timing"));
  return decode_timing(timing);
}

template <>
Result<ProgramTiming> decode_payload<ProgramTiming>(const Fields& f) {
  FT_CHECK(f.only({"ok", "total", "parts"}));
  ProgramTiming t;
  const Fields total = FT_TRY(f.nested("total", "timing"));
  t.total = FT_TRY(decode_timing(total));
  const json* parts = FT_TRY(f.get("parts"));
  if (!parts->is_array()) return f.bad("parts", "must be an array of named timings");
  for (std::size_t i = 0; i < parts->size(); ++i) {
    const Fields part((*parts)[i], fmt::format("part {} of {}", i, f.what()));
    FT_CHECK(part.object());
    FT_CHECK(part.only({"name", "timing"}));
    std::string name = FT_TRY(part.text("name"));
    const Fields timing = FT_TRY(part.nested("timing", "timing"));
    t.parts.emplace_back(std::move(name), FT_TRY(decode_timing(timing)));
  }
  return t;
}

template <>
Result<TelemetryAnswer> decode_payload<TelemetryAnswer>(const Fields& f) {
  FT_CHECK(f.only({"ok", "sm_clock_mhz", "memory_clock_mhz", "temperature_c", "power_w", "unavailable"}));
  TelemetryAnswer a;
  const json& j = f.raw();
  if (j.contains("sm_clock_mhz")) a.reading.sm_clock_mhz = FT_TRY(f.integer("sm_clock_mhz"));
  if (j.contains("memory_clock_mhz")) a.reading.memory_clock_mhz = FT_TRY(f.integer("memory_clock_mhz"));
  if (j.contains("temperature_c")) a.reading.temperature_c = FT_TRY(f.real("temperature_c"));
  if (j.contains("power_w")) a.reading.power_w = FT_TRY(f.real("power_w"));
  if (j.contains("unavailable")) a.unavailable = FT_TRY(f.text("unavailable"));
  return a;
}

// A failure answer as the Error it carries (an error of its own when malformed).
Result<Error> decode_failure(const Fields& f) {
  FT_CHECK(f.only({"ok", "error", "code"}));
  std::string message = FT_TRY(f.text("error"));
  if (message.empty()) return f.bad("error", "is empty (a failure says what failed)");
  const std::string code = FT_TRY(f.text("code"));
  const std::optional<Errc> errc = errc_from_name(code);
  if (!errc) return f.bad("code", fmt::format("names no kind of error ('{}')", shorten(code)));
  return Error{*errc, std::move(message), {}};
}

}  // namespace

std::string_view errc_name(Errc code) {
  for (const auto& [c, name] : kErrcNames)
    if (c == code) return name;
  return "internal";
}

std::optional<Errc> errc_from_name(std::string_view name) {
  for (const auto& [c, n] : kErrcNames)
    if (n == name) return c;
  return std::nullopt;
}

std::string_view op_name(const Request& request) {
  static constexpr std::array<std::string_view, std::variant_size_v<Request>> kNames{
      "device", "open", "inputs", "verify", "time", "verify_program", "time_program", "telemetry", "fault"};
  return kNames[request.index()];
}

json encode(const Request& request) {
  json j = std::visit(RequestEncoder{}, request);
  j["op"] = op_name(request);
  return j;
}

Result<Request> decode_request(const json& message) {
  const Fields f(message, "request");
  FT_CHECK(f.object());
  const std::string op = FT_TRY(f.text("op"));
  const Fields named(message, fmt::format("{} request", shorten(op)));
  if (op == "device") return decode_device_request(named);
  if (op == "open") return decode_open(named);
  if (op == "inputs") return decode_inputs(named);
  if (op == "verify") return decode_verify(named);
  if (op == "time") return decode_time(named);
  if (op == "verify_program") return decode_program_request(named, false);
  if (op == "time_program") return decode_program_request(named, true);
  if (op == "telemetry") return decode_plain<TelemetryRequest>(named);
  if (op == "fault") return decode_plain<FaultRequest>(named);
  return fail(Errc::invalid_input, fmt::format("unknown request '{}'", shorten(op)));
}

json encode(const Answer& answer) {
  json j = std::visit(AnswerEncoder{}, answer);
  j["ok"] = true;
  return j;
}

json encode_failure(const Error& error) {
  return {{"ok", false}, {"error", error.describe()}, {"code", errc_name(error.code)}};
}

template <class A>
Result<A> decode_answer(const json& message) {
  const Fields f(message, "answer");
  FT_CHECK(f.object());
  const bool ok = FT_TRY(f.boolean("ok"));
  if (!ok) return std::unexpected(FT_TRY(decode_failure(f)));
  return decode_payload<A>(f);
}

template Result<Done> decode_answer<Done>(const json&);
template Result<DeviceAnswer> decode_answer<DeviceAnswer>(const json&);
template Result<VerifyAnswer> decode_answer<VerifyAnswer>(const json&);
template Result<Timing> decode_answer<Timing>(const json&);
template Result<ProgramTiming> decode_answer<ProgramTiming>(const json&);
template Result<TelemetryAnswer> decode_answer<TelemetryAnswer>(const json&);

Result<Answer> decode_answer_to(const Request& sent, const json& message) {
  return std::visit(
      [&](const auto& r) -> Result<Answer> {
        using A = typename std::decay_t<decltype(r)>::Answer;
        return Answer(FT_TRY(decode_answer<A>(message)));
      },
      sent);
}

bool is_failure(const json& message) {
  if (!message.is_object()) return false;
  auto ok = message.find("ok");
  return ok != message.end() && ok->is_boolean() && !ok->get<bool>() && decode_failure(Fields(message, "answer")).has_value();
}

std::string to_line(const json& message) {
  // Invalid UTF-8 in a message (a path, a compiler's bytes) is replaced, not thrown.
  return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<json> parse_line(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(Errc::invalid_input, "a message that is not JSON");
  if (!j.is_object()) return fail(Errc::invalid_input, "a message that is not a JSON object");
  return j;
}

}  // namespace ft::protocol
