#pragma once
// Row mapping of the store (internal to store/): each table's columns as
// macros the statements splice in (FT_<TABLE>_FIELDS / _COLUMNS), the row
// readers every query that returns a record shares, and the binders of the
// variant and measurement INSERTs.
#include <cstdint>
#include <string>
#include <vector>

#include "store/sqlite.hpp"
#include "store/store.hpp"

namespace ft::db {

#define FT_RUN_FIELDS(p)                                                                                     \
  p "started_at, " p "ended_at, " p "status, " p "command_line, " p "flytune_version, " p "git_commit, " p \
    "templates_commit, " p "hostname, " p "strategy, " p "options_json"
#define FT_RUN_COLUMNS(p) p "id, " FT_RUN_FIELDS(p)
constexpr int kRunColumnCount = 11;
#define FT_DEVICE_FIELDS(p)                                                                         \
  p "runtime, " p "name, " p "arch, " p "compute_units, " p "memory_bytes, " p "l2_bytes, " p \
    "max_shared_per_block, " p "clock_mhz, " p "driver_version, " p "runtime_version"
#define FT_DEVICE_COLUMNS(p) p "id, " FT_DEVICE_FIELDS(p)
constexpr int kDeviceColumnCount = 11;
#define FT_TOOLCHAIN_FIELDS(p) p "backend, " p "version, " p "path"
#define FT_TOOLCHAIN_COLUMNS(p) p "id, " FT_TOOLCHAIN_FIELDS(p)
constexpr int kToolchainColumnCount = 4;
#define FT_PROBLEM_FIELDS(p) \
  p "key, " p "experts, " p "hidden, " p "inter, " p "topk, " p "dtype, " p "activation, " p "routing"
#define FT_PROBLEM_COLUMNS(p) p "id, " FT_PROBLEM_FIELDS(p)
constexpr int kProblemColumnCount = 9;
#define FT_VARIANT_FIELDS(p)                                                                                \
  p "kernel_name, " p "target, " p "kind, " p "params_json, " p "source_hash, " p "code_object_hash, " p   \
    "toolchain_id, " p "compile_status, " p "compile_log, " p "compile_seconds, " p "vgprs, " p "agprs, " p \
    "sgprs, " p "regs, " p "lds_bytes, " p "scratch_bytes, " p "spills, " p "occupancy, " p                 \
    "matrix_ops_json, " p "created_at, " p "updated_at"
#define FT_VARIANT_COLUMNS(p) p "id, " FT_VARIANT_FIELDS(p)
constexpr int kVariantColumnCount = 22;
#define FT_MEASUREMENT_FIELDS(p)                                                                              \
  p "run_id, " p "variant_id, " p "problem_id, " p "device_id, " p "tokens, " p "phase, " p "status, " p \
    "error_message, " p "median_us, " p "p10_us, " p "p90_us, " p "min_us, " p "samples, " p "rel_l2_err, " p \
    "max_abs_err, " p "sm_clock_mhz, " p "mem_clock_mhz, " p "temperature_c, " p "pci_bus_id, " p "measured_at"
#define FT_MEASUREMENT_COLUMNS(p) p "id, " FT_MEASUREMENT_FIELDS(p)
#define FT_WINNER_COLUMNS(p)                                                                                 \
  p "problem_id, " p "device_id, " p "tokens, " p "kind, " p "variant_id, " p "run_id, " p "median_us, " p \
    "p10_us, " p "p90_us, " p "default_variant_id, " p "speedup_vs_default, " p "chosen_at, " p "pass"
constexpr int kWinnerColumnCount = 13;

// Read a record from the columns that start at `c` (its FT_<TABLE>_COLUMNS).
RunRecord read_run(const sql::Query& q, int c);
DeviceRecord read_device(const sql::Query& q, int c);
ToolchainRecord read_toolchain(const sql::Query& q, int c);
ProblemRecord read_problem(const sql::Query& q, int c);
VariantRecord read_variant(const sql::Query& q, int c);
MeasurementRecord read_measurement(const sql::Query& q, int c);
WinnerRecord read_winner(const sql::Query& q, int c);

// Reads every row of a query with `read`.
template <class T, class Read>
Result<std::vector<T>> collect(sql::Query& q, Read read) {
  std::vector<T> out;
  for (;;) {
    bool row = FT_TRY(q.step());
    if (!row) break;
    out.push_back(read(q));
  }
  return out;
}

// A variant row's columns after nothing: kernel_name .. matrix_ops_json as
// ?1..?19 (the statements add created_at/updated_at after them).
void bind_variant(sql::Query& q, const VariantRecord& v);
// A measurement row's columns as ?1..?20.
void bind_measurement(sql::Query& q, const MeasurementRecord& m, const std::string& measured_at);

// The pid a run's options_json records (0 when it has none).
long pid_of(const nlohmann::json& options);
std::string this_hostname();

}  // namespace ft::db
