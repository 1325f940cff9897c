#include "store/rows.hpp"

#include <unistd.h>

#include <array>

namespace ft::db {
using sql::json_text;
using sql::Query;

long pid_of(const nlohmann::json& options) {
  auto it = options.find("pid");
  return it != options.end() && it->is_number_integer() ? it->get<long>() : 0;
}

std::string this_hostname() {
  std::array<char, 256> host{};
  return gethostname(host.data(), host.size() - 1) == 0 ? std::string(host.data()) : std::string();
}

RunRecord read_run(const Query& q, int c) {
  RunRecord r;
  r.id = q.i64(c + 0);
  r.started_at = q.text(c + 1);
  r.ended_at = q.text(c + 2);
  r.status = parse_run_status(q.text(c + 3)).value_or(RunStatus::failed);
  r.command_line = q.text(c + 4);
  r.flytune_version = q.text(c + 5);
  r.git_commit = q.text(c + 6);
  r.templates_commit = q.text(c + 7);
  r.hostname = q.text(c + 8);
  r.strategy = q.text(c + 9);
  r.options = q.json(c + 10);
  r.pid = pid_of(r.options);
  if (r.options.is_object()) r.process = r.options.value("process", std::string());
  return r;
}


DeviceRecord read_device(const Query& q, int c) {
  DeviceRecord d;
  d.id = q.i64(c + 0);
  d.runtime = q.text(c + 1);
  d.name = q.text(c + 2);
  d.arch = q.text(c + 3);
  d.compute_units = q.i32(c + 4);
  d.memory_bytes = q.i64(c + 5);
  d.l2_bytes = q.i64(c + 6);
  d.max_shared_per_block = q.i32(c + 7);
  d.clock_mhz = q.i32(c + 8);
  d.driver_version = q.text(c + 9);
  d.runtime_version = q.text(c + 10);
  return d;
}


ToolchainRecord read_toolchain(const Query& q, int c) {
  return ToolchainRecord{q.i64(c), q.text(c + 1), q.text(c + 2), q.text(c + 3)};
}


ProblemRecord read_problem(const Query& q, int c) {
  ProblemRecord p;
  p.id = q.i64(c + 0);
  p.key = q.text(c + 1);
  p.experts = q.i32(c + 2);
  p.hidden = q.i32(c + 3);
  p.inter = q.i32(c + 4);
  p.topk = q.i32(c + 5);
  p.dtype = q.text(c + 6);
  p.activation = q.text(c + 7);
  p.routing = q.text(c + 8);
  return p;
}


VariantRecord read_variant(const Query& q, int c) {
  VariantRecord v;
  v.id = q.i64(c + 0);
  v.kernel_name = q.text(c + 1);
  v.target = q.text(c + 2);
  v.kind = q.text(c + 3);
  v.params = q.json(c + 4);
  v.source_hash = q.text(c + 5);
  v.code_object_hash = q.text(c + 6);
  v.toolchain_id = q.i64(c + 7);
  v.compile_status = parse_compile_status(q.text(c + 8)).value_or(CompileStatus::compile_error);
  v.compile_log = q.text(c + 9);
  v.compile_seconds = q.opt_f64(c + 10);
  v.resources.vgprs = q.opt_i32(c + 11);
  v.resources.agprs = q.opt_i32(c + 12);
  v.resources.sgprs = q.opt_i32(c + 13);
  v.resources.regs = q.opt_i32(c + 14);
  v.resources.lds_bytes = q.opt_i32(c + 15);
  v.resources.scratch_bytes = q.opt_i32(c + 16);
  v.resources.spills = q.opt_i32(c + 17);
  v.resources.occupancy = q.opt_i32(c + 18);
  v.matrix_ops = q.json(c + 19);
  v.created_at = q.text(c + 20);
  v.updated_at = q.text(c + 21);
  return v;
}


MeasurementRecord read_measurement(const Query& q, int c) {
  MeasurementRecord m;
  m.id = q.i64(c + 0);
  m.run_id = q.i64(c + 1);
  m.variant_id = q.i64(c + 2);
  m.problem_id = q.i64(c + 3);
  m.device_id = q.i64(c + 4);
  m.tokens = q.i32(c + 5);
  m.phase = q.text(c + 6);
  m.status = parse_measurement_status(q.text(c + 7)).value_or(MeasurementStatus::launch_error);
  m.error_message = q.text(c + 8);
  m.median_us = q.opt_f64(c + 9);
  m.p10_us = q.opt_f64(c + 10);
  m.p90_us = q.opt_f64(c + 11);
  m.min_us = q.opt_f64(c + 12);
  m.samples = q.i32(c + 13);
  m.rel_l2_err = q.opt_f64(c + 14);
  m.max_abs_err = q.opt_f64(c + 15);
  m.sm_clock_mhz = q.opt_i32(c + 16);
  m.mem_clock_mhz = q.opt_i32(c + 17);
  m.temperature_c = q.opt_f64(c + 18);
  m.pci_bus_id = q.text(c + 19);
  m.measured_at = q.text(c + 20);
  return m;
}


WinnerRecord read_winner(const Query& q, int c) {
  WinnerRecord w;
  w.problem_id = q.i64(c + 0);
  w.device_id = q.i64(c + 1);
  w.tokens = q.i32(c + 2);
  w.kind = q.text(c + 3);
  w.variant_id = q.i64(c + 4);
  w.run_id = q.i64(c + 5);
  w.median_us = q.f64(c + 6);
  w.p10_us = q.opt_f64(c + 7);
  w.p90_us = q.opt_f64(c + 8);
  w.default_variant_id = q.opt_i64(c + 9);
  w.speedup_vs_default = q.opt_f64(c + 10);
  w.chosen_at = q.text(c + 11);
  w.pass = parse_pass(q.text(c + 12)).value_or(Pass::forward);  // the column's CHECK allows no other text
  return w;
}

void bind_variant(Query& q, const VariantRecord& v) {
  const Resources& r = v.resources;
  q.bind(1, v.kernel_name);
  q.bind(2, v.target);
  q.bind(3, v.kind);
  q.bind(4, json_text(v.params));
  q.bind(5, v.source_hash);
  q.bind_or_null(6, v.code_object_hash);
  q.bind(7, v.toolchain_id);
  q.bind(8, to_string(v.compile_status));
  q.bind(9, v.compile_log);
  q.bind(10, v.compile_seconds);
  q.bind(11, r.vgprs);
  q.bind(12, r.agprs);
  q.bind(13, r.sgprs);
  q.bind(14, r.regs);
  q.bind(15, r.lds_bytes);
  q.bind(16, r.scratch_bytes);
  q.bind(17, r.spills);
  q.bind(18, r.occupancy);
  q.bind(19, json_text(v.matrix_ops));
}

// A measurement row's columns in the table's order, run_id .. measured_at as ?1..?20.
void bind_measurement(Query& q, const MeasurementRecord& m, const std::string& measured_at) {
  q.bind(1, m.run_id);
  q.bind(2, m.variant_id);
  q.bind(3, m.problem_id);
  q.bind(4, m.device_id);
  q.bind(5, m.tokens);
  q.bind(6, m.phase);
  q.bind(7, to_string(m.status));
  q.bind(8, m.error_message);
  q.bind(9, m.median_us);
  q.bind(10, m.p10_us);
  q.bind(11, m.p90_us);
  q.bind(12, m.min_us);
  q.bind(13, m.samples);
  q.bind(14, m.rel_l2_err);
  q.bind(15, m.max_abs_err);
  q.bind(16, m.sm_clock_mhz);
  q.bind(17, m.mem_clock_mhz);
  q.bind(18, m.temperature_c);
  q.bind(19, m.pci_bus_id);
  q.bind(20, measured_at);
}

}  // namespace ft::db
