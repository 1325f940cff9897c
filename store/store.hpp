#pragma once
// The SQLite store: every result flytune produces, with its provenance.
//
// One Store is one connection; use it from one thread at a time. Several Stores
// (threads or processes) may share a file: WAL mode lets readers run beside
// the writer, and a busy timeout makes writers wait their turn. Each write
// method is its own transaction, committed before it returns, so a crash loses
// at most the call in flight. Schema and table meanings: docs/DB.md.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/kind.hpp"
#include "store/migrations.hpp"
#include "base/error.hpp"
#include "generator/problem.hpp"
#include "device/device.hpp"

namespace ft::db {

enum class OpenMode {
  create,     // read-write; a missing or empty file becomes a new database; an older schema is migrated
  existing,   // read-write; the database must exist; an older schema is migrated
  read_only,  // the database must exist with this build's schema; nothing is ever written
};

enum class RunStatus { running, finished, interrupted, failed };
enum class CompileStatus { ok, compile_error };
enum class MeasurementStatus { ok, compile_error, verify_failed, launch_error, timeout, skipped };

std::string_view to_string(RunStatus s);
std::string_view to_string(CompileStatus s);
std::string_view to_string(MeasurementStatus s);
Result<RunStatus> parse_run_status(std::string_view s);
Result<CompileStatus> parse_compile_status(std::string_view s);
Result<MeasurementStatus> parse_measurement_status(std::string_view s);

// Current UTC time as stored: "2025-01-31T12:00:00.123Z".
std::string utc_now();

// Record structs mirror the tables (docs/DB.md). `id` is 0 until stored;
// timestamps the store fills in are left empty by callers.

struct RunRecord {
  std::int64_t id = 0;
  std::string started_at;
  std::string ended_at;  // empty while running
  RunStatus status = RunStatus::running;
  std::string command_line;
  std::string flytune_version;
  std::string git_commit;
  std::string templates_commit;
  std::string hostname;
  std::string strategy;
  nlohmann::json options = nlohmann::json::object();
  long pid = 0;         // the process that ran it (stored as options_json.pid); 0 if unknown
  std::string process;  // its name, /proc/PID/comm (options_json.process): tells a reused pid

  // A run of this build on this host: version, commits, hostname and pid filled in.
  static RunRecord for_this_build(std::string command_line, std::string strategy,
                                  nlohmann::json options = nlohmann::json::object());
};

struct DeviceRecord {
  std::int64_t id = 0;
  std::string runtime;  // "cuda", "hip", or "none" for compile-only results
  std::string name;
  std::string arch;     // flytune target name
  int compute_units = 0;
  std::int64_t memory_bytes = 0;
  std::int64_t l2_bytes = 0;
  int max_shared_per_block = 0;
  int clock_mhz = 0;
  std::string driver_version;
  std::string runtime_version;

  static DeviceRecord from(const DeviceInfo& info);
  // The pseudo device of dry-run (compile-only) results for a target.
  static DeviceRecord compile_only(std::string_view target);
};

struct ToolchainRecord {
  std::int64_t id = 0;
  std::string backend;  // "comgr", "clang" or "nvrtc"
  std::string version;  // as the compiler reports it; flytune stores "nvrtc 13.0", "clang 19.1.7"
  std::string path;     // library or executable it came from

  // "nvrtc 13.0": the backend once, whether or not the version repeats it.
  std::string label() const;
};

struct ProblemRecord {
  std::int64_t id = 0;
  std::string key;  // Problem::key()
  int experts = 0;
  int hidden = 0;
  int inter = 0;
  int topk = 0;
  std::string dtype;       // Problem::dtype_spec(): "bf16", "f16", or "e4m3:<scales>" for fp8
  std::string activation;
  std::string routing;  // Routing::key()

  static ProblemRecord from(const Problem& p);
  // The problem a row names: dtype, activation and routing parsed, the shape
  // validated; a row this build cannot read (a dtype it refuses) is an error.
  Result<Problem> to_problem() const;
};

// Compile-time resources; empty where the target has no such thing (AGPRs on
// NVIDIA) or the analysis could not read it.
struct Resources {
  std::optional<int> vgprs, agprs, sgprs, regs;
  std::optional<int> lds_bytes, scratch_bytes, spills, occupancy;
};

struct VariantRecord {
  std::int64_t id = 0;
  std::string kernel_name;
  std::string target;
  std::string kind;  // "moe1", "moe2", "align", "reduce", ...
  nlohmann::json params = nlohmann::json::object();
  std::string source_hash;
  std::string code_object_hash;  // empty when compilation failed
  std::int64_t toolchain_id = 0;
  CompileStatus compile_status = CompileStatus::ok;
  std::string compile_log;
  std::optional<double> compile_seconds;
  Resources resources;
  nlohmann::json matrix_ops = nlohmann::json::object();  // instruction counts, e.g. {"v_mfma_f32_16x16x16_bf16": 64}
  std::string created_at;
  std::string updated_at;
};

// What a measurement measures; resume looks results up by it.
struct MeasurementKey {
  std::int64_t variant_id = 0;
  std::int64_t problem_id = 0;
  std::int64_t device_id = 0;
  int tokens = 0;
};

struct MeasurementRecord {
  std::int64_t id = 0;
  std::int64_t run_id = 0;
  std::int64_t variant_id = 0;
  std::int64_t problem_id = 0;
  std::int64_t device_id = 0;
  int tokens = 0;
  std::string phase;  // "short", "long", "ab", ...
  MeasurementStatus status = MeasurementStatus::ok;
  std::string error_message;
  std::optional<double> median_us, p10_us, p90_us, min_us;
  int samples = 0;
  std::optional<double> rel_l2_err, max_abs_err;
  std::optional<int> sm_clock_mhz, mem_clock_mhz;
  std::optional<double> temperature_c;
  std::string pci_bus_id;  // the physical GPU it ran on
  std::string measured_at;

  MeasurementKey key() const { return {variant_id, problem_id, device_id, tokens}; }
};

struct WinnerRecord {
  std::int64_t problem_id = 0;
  std::int64_t device_id = 0;
  int tokens = 0;
  std::string kind;  // "moe1", "moe2", "layer", ...
  std::int64_t variant_id = 0;
  std::int64_t run_id = 0;
  double median_us = 0;
  std::optional<double> p10_us, p90_us;
  std::optional<std::int64_t> default_variant_id;
  std::optional<double> speedup_vs_default;  // default time / winner time
  std::string chosen_at;
  Pass pass = Pass::forward;  // part of the key: a bucket has a forward and a backward layer winner
};

// A winner with everything it refers to, for the db command, report and export.
struct WinnerRow {
  WinnerRecord winner;
  ProblemRecord problem;
  DeviceRecord device;
  VariantRecord variant;
  ToolchainRecord toolchain;
};

// Filters: an empty field matches everything.
struct WinnerFilter {
  std::optional<std::string> problem_key;
  std::optional<std::int64_t> device_id;
  std::optional<std::string> arch;
  std::optional<int> tokens;
  std::optional<std::string> kind;
  // Forward unless asked: the readers of the forward's winners (export,
  // report, model-check) never see a backward one; nullopt: every pass.
  std::optional<Pass> pass = Pass::forward;
};

struct VariantFilter {
  std::optional<std::string> kernel_name;
  std::optional<std::string> target;
  std::optional<std::string> kind;
  std::optional<CompileStatus> status;
  std::optional<std::int64_t> toolchain_id;
  int limit = 0;  // 0: no limit
};

struct MeasurementFilter {
  std::optional<std::int64_t> run_id;
  std::optional<std::int64_t> variant_id;
  std::optional<std::int64_t> problem_id;
  std::optional<std::int64_t> device_id;
  std::optional<int> tokens;
  std::optional<MeasurementStatus> status;
  bool latest_only = false;  // only the newest row of each key
  int limit = 0;             // 0: no limit
};

struct MeasurementCount {
  std::int64_t run_id = 0;
  std::string status;
  std::int64_t count = 0;
};

struct VariantCount {
  std::string target;
  std::string kind;
  std::string status;  // compile_status
  std::int64_t count = 0;
};

struct AppliedMigration {
  int version = 0;
  std::string name;
  std::string applied_at;
};

struct SchemaInfo {
  int version = 0;    // PRAGMA user_version
  int supported = 0;  // schema_version() of this build
  std::uint32_t application_id = 0;
  std::string journal_mode;
  std::vector<AppliedMigration> migrations;
  std::vector<std::pair<std::string, std::int64_t>> table_rows;  // table name, row count
};

// A run left `running` by a process that no longer exists on this host (killed,
// or its output pipe closed); opening the database read-write closes it.
struct StaleRun {
  std::int64_t id = 0;
  long pid = 0;
  std::string ended_at;  // its last measurement's time, or its start
};

class Store {
 public:
  // Opens (and in create mode creates or migrates) a database. Refuses, with
  // one clear error and without writing a byte: a file that is not SQLite, an
  // SQLite file of another application, a corrupt file, a newer schema.
  // Read-write: runs of this host whose process is gone are marked
  // `interrupted` (stale_runs() lists them, for the caller to report).
  // Read-only: works on files this user cannot write (another user's WAL
  // database), opening them immutable when no -wal/-shm can be created.
  static Result<Store> open(const std::string& path, OpenMode mode = OpenMode::create);

  // The runs this open found left running by a dead process and closed.
  const std::vector<StaleRun>& stale_runs() const;

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  const std::string& path() const;
  bool read_only() const;

  // Runs: begin_run stores status 'running' and started_at = now.
  Result<std::int64_t> begin_run(const RunRecord& run);
  Status end_run(std::int64_t run_id, RunStatus status);

  // Upserts return the row id; an identical identity finds the existing row.
  Result<std::int64_t> upsert_device(const DeviceRecord& d);
  Result<std::int64_t> upsert_toolchain(const ToolchainRecord& t);
  Result<std::int64_t> upsert_problem(const ProblemRecord& p);
  // By (kernel_name, target, toolchain_id); a repeat updates everything the
  // compile produced (hashes, status, log, resources) and keeps created_at.
  Result<std::int64_t> upsert_variant(const VariantRecord& v);
  // Content-addressed: storing the same hash twice keeps the first copy.
  Status put_code_object(std::string_view hash, std::string_view format, std::span<const std::byte> bytes);

  // Appends one measurement (history is kept); committed before it returns.
  Result<std::int64_t> add_measurement(const MeasurementRecord& m);
  // Inserts or replaces the winner of (problem, device, tokens, kind, pass).
  Status set_winner(const WinnerRecord& w);

  // Runs `body` in one write transaction (BEGIN IMMEDIATE ... COMMIT): an
  // error from `body` or from COMMIT rolls back everything it wrote. The write
  // methods above join it instead of committing one by one.
  Status transaction(const std::function<Status()>& body);

  // Copies of rows from another flytune database (db merge), ids re-keyed by
  // the caller. import_run: a run with the same start time, host, command line
  // and options is the same run (its id is returned); otherwise it is inserted
  // with every field kept (status, ended_at). import_variant: an existing
  // (kernel_name, target, toolchain_id) row is kept as it is; otherwise the row
  // is inserted with its timestamps. import_measurement: a row equal in every
  // column but id is the same measurement; otherwise it is appended.
  Result<std::int64_t> import_run(const RunRecord& run);
  Result<std::int64_t> import_variant(const VariantRecord& v);
  Result<std::int64_t> import_measurement(const MeasurementRecord& m);

  // The newest measurement of a key, for resume; nullopt if never measured.
  Result<std::optional<MeasurementRecord>> latest_measurement(const MeasurementKey& key);

  Result<std::vector<RunRecord>> list_runs();
  Result<std::vector<DeviceRecord>> devices();
  Result<std::vector<ToolchainRecord>> toolchains();
  Result<std::vector<ProblemRecord>> problems();
  Result<std::optional<VariantRecord>> variant(std::int64_t id);
  Result<std::vector<VariantRecord>> variants(const VariantFilter& filter = {});
  Result<std::vector<MeasurementRecord>> measurements(const MeasurementFilter& filter = {});
  // Ordered by problem key, device, pass, kind, tokens.
  Result<std::vector<WinnerRow>> winners(const WinnerFilter& filter = {});
  Result<std::optional<std::vector<std::byte>>> code_object(std::string_view hash);
  // Its format ("hsaco" or "cubin"); nullopt if no such code object.
  Result<std::optional<std::string>> code_object_format(std::string_view hash);

  // Statistics: measurements per run and status; variants per target, kind and compile status.
  Result<std::vector<MeasurementCount>> measurement_counts();
  Result<std::vector<VariantCount>> variant_counts();

  // Writes a compact, self-contained copy to `out_path` (which must not exist):
  // one file in rollback-journal mode, with everything committed so far,
  // including what still sits in the -wal file. Use it to keep, share or check
  // in a database; copying flytune.db alone with cp can miss recent results.
  Status snapshot(const std::string& out_path);

  Result<SchemaInfo> schema_info();
  // The schema as CREATE statements from sqlite_master, sorted by type and
  // name, each ending in ";\n" (the golden file tests/data/schema_vN.sql).
  Result<std::string> schema_sql();

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::db
