#pragma once
// Helpers shared by the store's unit tests and the `flytune db` CLI tests:
// a scratch folder, a file snapshot (bytes + mtime) to prove a refused file
// was not touched, raw SQLite for crafting foreign files, and a small sample
// database with every table filled.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "store/store.hpp"

namespace ft::test {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "flytune-db-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The measurements of a database (of one run), read only; none, with a
// failure, where it cannot be read.
inline std::vector<db::MeasurementRecord> measurements(const std::string& path, std::optional<std::int64_t> run = {}) {
  auto s = db::Store::open(path, db::OpenMode::read_only);
  EXPECT_TRUE(s) << s.error().describe();
  if (!s) return {};
  db::MeasurementFilter f;
  f.run_id = run;
  auto m = s->measurements(f);
  EXPECT_TRUE(m) << m.error().describe();
  return m ? *m : std::vector<db::MeasurementRecord>{};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Bytes and modification time, to compare before and after.
struct FileSnapshot {
  std::string bytes;
  long long mtime_ns = 0;
  bool operator==(const FileSnapshot&) const = default;

  static FileSnapshot of(const std::string& path) {
    FileSnapshot s;
    s.bytes = read_bytes(path);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) s.mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
    return s;
  }
};

// Runs SQL on a file with plain SQLite (no flytune checks), for crafting
// foreign, newer or damaged files.
inline void raw_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

struct SampleIds {
  std::int64_t run = 0, device = 0, toolchain = 0, problem = 0, variant_fast = 0, variant_slow = 0, variant_broken = 0;
};

inline db::VariantRecord sample_variant(std::int64_t toolchain, const std::string& name, int tile_n) {
  db::VariantRecord v;
  v.kernel_name = name;
  v.target = "sm_90a";
  v.kind = "moe1";
  v.params = {{"tile_m", 64}, {"tile_n", tile_n}, {"tile_k", 32}, {"stages", 2}};
  v.source_hash = "src-" + name;
  v.code_object_hash = "co-" + name;
  v.toolchain_id = toolchain;
  v.compile_seconds = 1.25;
  v.resources.regs = 128;
  v.resources.lds_bytes = 49152;
  v.resources.spills = 0;
  v.resources.occupancy = 2;
  v.matrix_ops = {{"HGMMA", 16}};
  return v;
}

inline db::MeasurementRecord sample_measurement(const SampleIds& ids, std::int64_t variant, int tokens, double us) {
  db::MeasurementRecord m;
  m.run_id = ids.run;
  m.variant_id = variant;
  m.problem_id = ids.problem;
  m.device_id = ids.device;
  m.tokens = tokens;
  m.phase = "short";
  m.median_us = us;
  m.p10_us = us * 0.98;
  m.p90_us = us * 1.03;
  m.min_us = us * 0.97;
  m.samples = 50;
  m.rel_l2_err = 1e-3;
  m.max_abs_err = 0.01;
  m.sm_clock_mhz = 1980;
  m.pci_bus_id = "0000:19:00.0";
  return m;
}

// A small database: one finished run on an H200, three variants (one broken),
// measurements at T = 1 and 16, and winners for both buckets.
inline SampleIds fill_sample(db::Store& store) {
  SampleIds ids;
  auto run = db::RunRecord::for_this_build("flytune search --problem mixtral-8x7b", "halving", {{"tokens", "1,16"}});
  ids.run = store.begin_run(run).value();
  DeviceInfo info;
  info.runtime = "cuda";
  info.name = "NVIDIA H200";
  info.arch = "sm_90a";
  info.compute_units = 132;
  info.memory_bytes = 150'000'000'000;
  info.l2_bytes = 52'428'800;
  info.driver_version = "580.95.05";
  info.runtime_version = "13.0";
  ids.device = store.upsert_device(db::DeviceRecord::from(info)).value();
  ids.toolchain = store.upsert_toolchain({0, "nvrtc", "13.0", "libnvrtc.so.13"}).value();
  db::ProblemRecord p{0, "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform", 8, 4096, 14336, 2, "bf16", "swiglu", "uniform"};
  ids.problem = store.upsert_problem(p).value();
  ids.variant_fast = store.upsert_variant(sample_variant(ids.toolchain, "ft_sm_90a_moe1_bf16_m64n128k32_w4_wgmma_s2", 128)).value();
  ids.variant_slow = store.upsert_variant(sample_variant(ids.toolchain, "ft_sm_90a_moe1_bf16_m64n64k32_w4_wgmma_s2", 64)).value();
  auto broken = sample_variant(ids.toolchain, "ft_sm_90a_moe1_bf16_m128n256k64_w4_wgmma_s4", 256);
  broken.compile_status = db::CompileStatus::compile_error;
  broken.code_object_hash.clear();
  broken.compile_log = "ptxas error: entry function uses too much shared data";
  broken.resources = {};
  ids.variant_broken = store.upsert_variant(broken).value();

  for (int tokens : {1, 16}) {
    EXPECT_TRUE(store.add_measurement(sample_measurement(ids, ids.variant_fast, tokens, 100.0 + tokens)));
    EXPECT_TRUE(store.add_measurement(sample_measurement(ids, ids.variant_slow, tokens, 150.0 + tokens)));
    auto failed = sample_measurement(ids, ids.variant_broken, tokens, 0);
    failed.status = db::MeasurementStatus::compile_error;
    failed.median_us = failed.p10_us = failed.p90_us = failed.min_us = std::nullopt;
    failed.samples = 0;
    failed.error_message = "compile failed";
    EXPECT_TRUE(store.add_measurement(failed));
    db::WinnerRecord w;
    w.problem_id = ids.problem;
    w.device_id = ids.device;
    w.tokens = tokens;
    w.kind = "moe1";
    w.variant_id = ids.variant_fast;
    w.run_id = ids.run;
    w.median_us = 100.0 + tokens;
    w.p10_us = (100.0 + tokens) * 0.98;
    w.p90_us = (100.0 + tokens) * 1.03;
    w.default_variant_id = ids.variant_slow;
    w.speedup_vs_default = (150.0 + tokens) / (100.0 + tokens);
    EXPECT_TRUE(store.set_winner(w));
  }
  EXPECT_TRUE(store.end_run(ids.run, db::RunStatus::finished));
  return ids;
}

}  // namespace ft::test
