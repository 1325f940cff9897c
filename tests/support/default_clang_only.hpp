#pragma once
// For CLI tests of what flytune says when nothing builds gfx950: the flytune they start sees only
// the default clang (FLYTUNE_CLANG names it, so no newer clang is searched). Where that cannot
// make gfx950 unbuildable (no default clang, or it or comgr knows gfx950), skip_reason says why.
#include <optional>
#include <string>

#include "generator/target.hpp"
#include "tests/support/scoped_env.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::test {

class DefaultClangOnly {
 public:
  DefaultClangOnly() {
    const Toolchains& tc = toolchains();
    if (!tc.clang.found) skip_reason_ = "no default clang: " + tc.clang.error;
    else if (tc.clang.supports("gfx950") || tc.comgr.lists("gfx950")) skip_reason_ = "the default toolchains build gfx950";
    if (!skip_reason_.empty()) return;
    pin_.emplace("FLYTUNE_CLANG", tc.clang.executable.c_str());
    Toolchains only = tc;
    only.newer_clang = {};
    reason_ = backend_for(*find_target("gfx950"), only).error().message;
  }
  const std::string& skip_reason() const { return skip_reason_; }
  // What flytune says about gfx950 under this pin ("needs comgr from ROCm >= 6.4 or LLVM >= 20; ...").
  const std::string& gfx950_reason() const { return reason_; }

 private:
  std::string skip_reason_, reason_;
  std::optional<ScopedEnv> pin_;
};

}  // namespace ft::test
