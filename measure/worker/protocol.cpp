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

Result<std::vector<GradKernelRef>> decode_grad_kernels(const Fields& f) {
  const json* a = FT_TRY(f.get("stages"));
  if (!a->is_array() || a->empty()) return f.bad("stages", "must be a non-empty array of backward stages");
  std::vector<GradKernelRef> out;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const Fields k((*a)[i], fmt::format("backward stage {} of {}", i, f.what()));
    FT_CHECK(k.object());
    out.push_back(FT_TRY(decode_grad_kernel(k)));
  }
  return out;
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
            {"max_tokens", r.max_tokens},          {"operation", to_string(r.operation)}};
  }
  json operator()(const InputsRequest& r) const {
    return {{"tokens", r.tokens}, {"seed", r.seed}, {"empty_experts", r.empty_experts}};
  }
  json operator()(const VerifyRequest& r) const { return {{"kernel", encode_kernel(r.kernel)}}; }
  json operator()(const TimeRequest& r) const {
    return {{"kernel", encode_kernel(r.kernel)}, {"warmup", r.warmup}, {"reps", r.reps}, {"flush_l2", r.flush_l2}};
  }
  json operator()(const VerifyLayerRequest& r) const {
    return {{"stage1", encode_kernel(r.stage1)}, {"stage2", encode_kernel(r.stage2)}};
  }
  json operator()(const TimeLayerRequest& r) const {
    return {{"stage1", encode_kernel(r.stage1)}, {"stage2", encode_kernel(r.stage2)}, {"warmup", r.warmup},
            {"reps", r.reps}, {"graph", r.graph}};
  }
  json operator()(const VerifyBackwardRequest& r) const { return {{"stages", encode_grad_kernels(r.stages)}}; }
  json operator()(const TimeBackwardRequest& r) const {
    return {{"stages", encode_grad_kernels(r.stages)}, {"warmup", r.warmup}, {"reps", r.reps}, {"flush_l2", r.flush_l2}};
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
  const std::string operation = FT_TRY(f.text("operation"));
  if (operation == to_string(Operation::backward)) r.operation = Operation::backward;
  else if (operation != to_string(Operation::forward))
    return f.bad("operation", fmt::format("names no operation ('{}'; forward or backward)", shorten(operation)));
  return r;
}

Result<Request> decode_backward(const Fields& f, bool timed) {
  if (!timed) {
    FT_CHECK(f.only({"op", "stages"}));
    return VerifyBackwardRequest{FT_TRY(decode_grad_kernels(f))};
  }
  FT_CHECK(f.only({"op", "stages", "warmup", "reps", "flush_l2"}));
  TimeBackwardRequest r;
  r.stages = FT_TRY(decode_grad_kernels(f));
  r.warmup = FT_TRY(f.integer("warmup"));
  r.reps = FT_TRY(f.integer("reps"));
  r.flush_l2 = FT_TRY(f.boolean("flush_l2"));
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

Result<Request> decode_layer(const Fields& f, bool timed) {
  if (timed) FT_CHECK(f.only({"op", "stage1", "stage2", "warmup", "reps", "graph"}));
  else FT_CHECK(f.only({"op", "stage1", "stage2"}));
  const Fields k1 = FT_TRY(f.nested("stage1", "kernel")), k2 = FT_TRY(f.nested("stage2", "kernel"));
  KernelRef s1 = FT_TRY(decode_kernel(k1));
  KernelRef s2 = FT_TRY(decode_kernel(k2));
  if (!timed) return VerifyLayerRequest{std::move(s1), std::move(s2)};
  TimeLayerRequest r{std::move(s1), std::move(s2)};
  r.warmup = FT_TRY(f.integer("warmup"));
  r.reps = FT_TRY(f.integer("reps"));
  r.graph = FT_TRY(f.boolean("graph"));
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
  json operator()(const LayerTiming& t) const {
    return {{"total", encode_timing(t.total)},   {"align", encode_timing(t.align)},   {"stage1", encode_timing(t.stage1)},
            {"stage2", encode_timing(t.stage2)}, {"reduce", encode_timing(t.reduce)}};
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
Result<LayerTiming> decode_payload<LayerTiming>(const Fields& f) {
  FT_CHECK(f.only({"ok", "total", "align", "stage1", "stage2", "reduce"}));
  LayerTiming t;
  for (auto [key, out] : {std::pair{"total", &t.total}, std::pair{"align", &t.align}, std::pair{"stage1", &t.stage1},
                          std::pair{"stage2", &t.stage2}, std::pair{"reduce", &t.reduce}}) {
    const Fields part = FT_TRY(f.nested(key, "timing"));
    *out = FT_TRY(decode_timing(part));
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

std::string_view to_string(Operation op) { return op == Operation::backward ? "backward" : "forward"; }

std::string_view op_name(const Request& request) {
  static constexpr std::array<std::string_view, std::variant_size_v<Request>> kNames{
      "device",          "open",          "inputs",    "verify", "time", "verify_layer", "time_layer",
      "verify_backward", "time_backward", "telemetry", "fault"};
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
  if (op == "verify_layer") return decode_layer(named, false);
  if (op == "time_layer") return decode_layer(named, true);
  if (op == "verify_backward") return decode_backward(named, false);
  if (op == "time_backward") return decode_backward(named, true);
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
template Result<LayerTiming> decode_answer<LayerTiming>(const json&);
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
