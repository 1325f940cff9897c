#pragma once
// tests/data/tiny_forms.db (the tiny problem searched on the H200, its layer
// winners covering every launch form: persistent, split-K, partials, shuffled
// and tiled weights) exported once per test process into a scratch folder,
// and opened through the C API on the CPU emulator (check::open_on_emulator).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "export/export.hpp"
#include "flytune_runtime.h"
#include "runtime/check/check_export.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft::test {

struct FormsExport {
  ScratchDir scratch;
  std::string dir;
  std::string error;  // the export's, if it failed
  nlohmann::json manifest;
  std::string key() const { return manifest["problems"][0]["key"]; }
};

inline const FormsExport& forms_export() {
  static FormsExport e;
  static bool done = false;
  if (done) return e;
  done = true;
  e.dir = e.scratch.file("export");
  auto s = db::export_winners({std::string(FT_TEST_DATA_DIR) + "/tiny_forms.db", e.dir, {}, {}});
  if (!s) {
    e.error = s.error().describe();
    return e;
  }
  std::ifstream f(e.dir + "/manifest.json");
  e.manifest = nlohmann::json::parse(f);
  return e;
}

// A runtime handle that closes itself.
struct EmulatedRuntime {
  ft_runtime* rt = nullptr;
  std::string error;
  explicit EmulatedRuntime(const std::string& dir) {
    auto r = check::open_on_emulator(dir);
    if (r) rt = *r;
    else error = r.error().describe();
  }
  ~EmulatedRuntime() { ft_runtime_close(rt); }
  EmulatedRuntime(const EmulatedRuntime&) = delete;
  EmulatedRuntime& operator=(const EmulatedRuntime&) = delete;
};

}  // namespace ft::test
