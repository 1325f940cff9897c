#pragma once
// One export of tests/data/h200.db per test process (it compiles the support
// unit with NVRTC when the database lacks it), shared by the export and
// runtime tests. Without NVRTC the tests that need it skip with the reason.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "export/export.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "system/hash.hpp"

namespace ft::test {

inline std::string h200_db() { return std::string(FT_TEST_DATA_DIR) + "/h200.db"; }

struct SharedExport {
  ScratchDir scratch;
  std::string dir;
  std::string skip_reason;  // no compiler for the support unit here
  std::string error;        // any other failure: the tests fail with it
  std::string db_hash_before;
  nlohmann::json manifest;
};

inline const SharedExport& shared_h200_export() {
  static SharedExport e;
  static bool done = false;
  if (done) return e;
  done = true;
  e.dir = e.scratch.file("export");
  e.db_hash_before = xxh3_128_hex(read_bytes(h200_db()));
  auto s = db::export_winners({h200_db(), e.dir, {}, {}});
  if (!s) {
    (s.error().code == Errc::toolchain ? e.skip_reason : e.error) = s.error().describe();
    return e;
  }
  std::ifstream f(s->manifest_path);
  e.manifest = nlohmann::json::parse(f, nullptr, false);
  return e;
}

}  // namespace ft::test
