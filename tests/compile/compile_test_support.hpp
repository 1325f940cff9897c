#pragma once
// Shared pieces of the compile suite: the backend each target is built with
// here, a cache folder per test under the build tree, and the checks that a
// code object's matrix instructions are the ones its atom names.
#include <cstdlib>
#include <map>
#include <ostream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "generator/atoms.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "compile/compile.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::test {

// The backend the issue asks each target to be built with in CI; gfx950 has
// none here (nullopt: whatever backend_for finds, if anything).
struct TargetBackend {
  const char* target;
  std::optional<Backend> backend;
};

inline std::string param_name(const TargetBackend& tb) {
  return tb.backend ? fmt::format("{}_{}", tb.target, to_string(*tb.backend)) : std::string(tb.target);
}
// Readable parameter values in test names and failure messages.
inline void PrintTo(const TargetBackend& tb, std::ostream* os) { *os << param_name(tb); }

// Why `backend` cannot build `target` on this machine, or "" when it can.
inline std::string missing_toolchain(Backend backend, const Target& target) {
  const Toolchains& tc = toolchains();
  switch (backend) {
    case Backend::comgr:
      if (!tc.comgr.found) return "comgr not found: " + tc.comgr.error;
      if (!tc.comgr.lists(target.name)) return fmt::format("the loaded comgr does not list {}", target.name);
      return "";
    case Backend::clang:
      if (!tc.clang.found) return "clang not found: " + tc.clang.error;
      if (!tc.clang_for(target.name)) return fmt::format("no clang here knows {}: {}", target.name,
                                                           backend_for(target).error().message);
      return "";
    case Backend::nvrtc:
      if (!tc.nvrtc.found) return "NVRTC not found: " + tc.nvrtc.error;
      return "";
    case Backend::emulate:  // the host compiler (tests/emu), not a GPU toolchain
      return "";
  }
  return "unknown backend";
}

// Whether the environment says `target` must build here: FLYTUNE_EXPECT_TARGETS lists targets
// whose toolchain CI prepared (scripts/test.sh sets gfx950 once scripts/setup-llvm.sh made the
// LLVM folder), so that a lost toolchain fails instead of passing as a skip.
inline bool toolchain_expected(const Target& target) {
  const char* v = std::getenv("FLYTUNE_EXPECT_TARGETS");
  if (!v) return false;
  std::string list = std::string(",") + v + ",";
  return list.find(fmt::format(",{},", target.name)) != std::string::npos;
}

// Skips the test with the reason where nothing here builds `target` (gfx950 without LLVM >= 20),
// fails instead where the environment expects it to build.
#define FT_SKIP_UNLESS_BUILDABLE(target)                                                              \
  do {                                                                                                \
    if (auto backend_ = ::ft::backend_for(target); !backend_) {                                       \
      if (::ft::test::toolchain_expected(target))                                                     \
        FAIL() << "FLYTUNE_EXPECT_TARGETS lists " << (target).name                                    \
               << " but nothing here builds it: " << backend_.error().describe();                     \
      GTEST_SKIP() << "not compiled here: " << backend_.error().describe();                           \
    }                                                                                                 \
  } while (0)

// Compile options writing to this test's own cache folder in the build tree.
inline CompileOptions compile_options_for(const std::string& test_name, std::optional<Backend> backend) {
  CompileOptions o;
  o.backend = backend;
  o.cache_dir = std::string(FT_COMPILE_TEST_CACHE) + "/" + test_name;
  return o;
}

// DefaultSpace's cache folder for the default Mixtral space of `tb` (its covering sample and its whole space):
// tests compiling the same variants with the same toolchain (ClangVersions' clang-19 half) share that folder
// rather than compiling them again, and scripts/test.sh's gfx950 record reads it.
inline std::string default_space_cache(const TargetBackend& tb) { return "Mixtral_DefaultSpace_" + param_name(tb); }

inline std::string current_test_id() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string id = fmt::format("{}.{}", info->test_suite_name(), info->name());
  for (char& c : id)
    if (c == '/') c = '_';
  return id;
}

inline Problem mixtral(DType dtype = DType::bf16) {
  Problem p = *problem_from_preset("mixtral-8x7b");
  p.dtype = dtype;
  return p;
}

// Empty when `matrix_ops` holds only the instruction `atom` asks for on
// `target`, at least once; otherwise what is wrong. AMD: the exact mnemonic
// LLVM's disassembler prints. NVIDIA: PTX opcodes of the atom's shape and type
// (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, or
// wgmma.mma_async.sync.aligned.m64n<N>k16.f32.bf16.bf16).
inline std::string check_matrix_ops(const std::map<std::string, int>& matrix_ops, const AtomInfo& atom,
                                    const Target& target) {
  std::string listed;
  for (const auto& [m, n] : matrix_ops) listed += fmt::format(" {}={}", m, n);
  if (matrix_ops.empty()) return "no matrix instructions at all";
  if (target.is_amd()) {
    std::string want(atom.mnemonic_on(target));
    if (want.empty()) return fmt::format("atom {} names no mnemonic for {}", atom.id, target.name);
    auto it = matrix_ops.find(want);
    if (it == matrix_ops.end() || it->second <= 0) return fmt::format("no {} in the disassembly; found{}", want, listed);
    if (matrix_ops.size() != 1) return fmt::format("other matrix instructions besides {}:{}", want, listed);
    return "";
  }
  // wgmma: any N (the variant's weight matrices x tile_n), f32 accumulation, no C type suffix.
  std::string shape = atom.warpgroup() ? fmt::format("wgmma.mma_async.sync.aligned.m{}n", atom.m)
                                       : fmt::format("mma.sync.aligned.m{}n{}k{}.", atom.m, atom.n, atom.k);
  std::string types = atom.warpgroup() ? fmt::format("k{0}.f32.{1}.{1}", atom.k, to_string(atom.dtype))
                                       : fmt::format(".f32.{0}.{0}.f32", to_string(atom.dtype));
  int count = 0;
  for (const auto& [op, n] : matrix_ops) {
    if (!op.starts_with(shape) || !op.ends_with(types))
      return fmt::format("matrix instruction {} is not the atom's {}*{}; found{}", op, shape, types, listed);
    count += n;
  }
  return count > 0 ? "" : fmt::format("zero matrix instructions:{}", listed);
}

}  // namespace ft::test
