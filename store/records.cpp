// The store's enums and the records' constructors (store/store.hpp).
#include <ctime>

#include <fmt/format.h>

#include "generator/version.hpp"
#include "store/rows.hpp"
#include "system/subprocess.hpp"

namespace ft::db {

// ---- Enums -------------------------------------------------------------------

std::string_view to_string(RunStatus s) {
  switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::interrupted: return "interrupted";
    case RunStatus::failed: return "failed";
  }
  return "failed";
}

std::string_view to_string(CompileStatus s) { return s == CompileStatus::ok ? "ok" : "compile_error"; }

std::string_view to_string(MeasurementStatus s) {
  switch (s) {
    case MeasurementStatus::ok: return "ok";
    case MeasurementStatus::compile_error: return "compile_error";
    case MeasurementStatus::verify_failed: return "verify_failed";
    case MeasurementStatus::launch_error: return "launch_error";
    case MeasurementStatus::timeout: return "timeout";
    case MeasurementStatus::skipped: return "skipped";
  }
  return "launch_error";
}

Result<RunStatus> parse_run_status(std::string_view s) {
  for (RunStatus v : {RunStatus::running, RunStatus::finished, RunStatus::interrupted, RunStatus::failed})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input, "unknown run status; expected running, finished, interrupted or failed",
              std::string(s));
}

Result<CompileStatus> parse_compile_status(std::string_view s) {
  for (CompileStatus v : {CompileStatus::ok, CompileStatus::compile_error})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input, "unknown compile status; expected ok or compile_error", std::string(s));
}

Result<MeasurementStatus> parse_measurement_status(std::string_view s) {
  for (MeasurementStatus v : {MeasurementStatus::ok, MeasurementStatus::compile_error, MeasurementStatus::verify_failed,
                              MeasurementStatus::launch_error, MeasurementStatus::timeout, MeasurementStatus::skipped})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input,
              "unknown measurement status; expected ok, compile_error, verify_failed, launch_error, timeout or skipped",
              std::string(s));
}

std::string utc_now() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

// ---- Records -----------------------------------------------------------------

RunRecord RunRecord::for_this_build(std::string command_line, std::string strategy, nlohmann::json options) {
  RunRecord r;
  r.command_line = std::move(command_line);
  r.strategy = std::move(strategy);
  r.options = std::move(options);
  r.flytune_version = FLYTUNE_VERSION;
  r.git_commit = FLYTUNE_GIT_COMMIT;
  r.templates_commit = FLYTUNE_TEMPLATES_COMMIT;
  r.hostname = this_hostname();
  r.pid = long(getpid());
  r.process = own_process_name();
  return r;
}

DeviceRecord DeviceRecord::from(const DeviceInfo& info) {
  DeviceRecord d;
  d.runtime = info.runtime;
  d.name = info.name;
  d.arch = info.arch;
  d.compute_units = info.compute_units;
  d.memory_bytes = static_cast<std::int64_t>(info.memory_bytes);
  d.l2_bytes = static_cast<std::int64_t>(info.l2_bytes);
  d.max_shared_per_block = info.max_shared_per_block;
  d.clock_mhz = info.clock_mhz;
  d.driver_version = info.driver_version;
  d.runtime_version = info.runtime_version;
  return d;
}

DeviceRecord DeviceRecord::compile_only(std::string_view target) {
  DeviceRecord d;
  d.runtime = "none";
  d.name = "compile-only";
  d.arch = std::string(target);
  return d;
}

std::string ToolchainRecord::label() const {
  if (version.empty()) return backend;
  if (version == backend || version.starts_with(backend + " ")) return version;
  return backend + " " + version;
}

ProblemRecord ProblemRecord::from(const Problem& p) {
  ProblemRecord r;
  r.key = p.key();
  r.experts = p.experts;
  r.hidden = p.hidden;
  r.inter = p.inter;
  r.topk = p.topk;
  r.dtype = p.dtype_spec();  // "e4m3:per-token" for fp8: the scales are part of the element type
  r.activation = std::string(to_string(p.activation));
  r.routing = p.routing.key();
  return r;
}

Result<Problem> ProblemRecord::to_problem() const {
  Problem p;
  p.name = key;
  p.experts = experts;
  p.hidden = hidden;
  p.inter = inter;
  p.topk = topk;
  const DTypeSpec spec = FT_TRY(parse_dtype_spec(dtype));  // "e4m3:per-token": the scales ride in the dtype
  p.dtype = spec.dtype;
  p.scales = spec.scales;
  if (activation != to_string(p.activation))
    return fail(Errc::invalid_input, fmt::format("problem {}: activation \"{}\" is not one this build implements", key, activation));
  p.routing = FT_TRY(Routing::parse(routing));
  FT_CHECK(p.validate());
  return p;
}

}  // namespace ft::db
