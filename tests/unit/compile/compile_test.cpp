#include "compile/compile.hpp"

#include <elf.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/scoped_env.hpp"

#include "tests/unit/compile/test_kernels.hpp"
#include "compile/analyze/elf_image.hpp"
#include "compile/backends.hpp"
#include "system/hash.hpp"
#include "compile/emu_compile.hpp"

namespace ft {
namespace {

using test::amd_headers;
using test::amd_mfma_kernel;
using test::nvidia_headers;
using test::nvidia_mma_kernel;
using test::options_for;
using test::ScratchDir;

// A linked AMDGPU code object (shared object) that defines the entry point.
void expect_amd_code_object(const CodeObject& co, const std::string& entry) {
  auto image = ElfImage::parse(co.binary);
  ASSERT_TRUE(image) << image.error().describe();
  EXPECT_EQ(image->machine(), kElfMachineAmdgpu);
  EXPECT_EQ(image->type(), ET_DYN);
  EXPECT_NE(image->symbol(entry), nullptr);
  EXPECT_NE(image->symbol(entry + ".kd"), nullptr);  // the kernel descriptor the runtime launches
  EXPECT_NE(image->section(".text"), nullptr);
  EXPECT_NE(image->section(".note"), nullptr);
  EXPECT_EQ(co.hash, xxh3_128_hex(co.binary));
  EXPECT_EQ(co.hash.size(), 32u);
  EXPECT_EQ(co.cache_key.size(), 32u);
}

TEST(Compile, ComgrBuildsGfx90a) {
  FT_REQUIRE_BACKEND(Backend::comgr, "gfx90a");
  auto headers = amd_headers();
  auto co = compile(amd_mfma_kernel("ft_test_comgr_mfma"), *find_target("gfx90a"), options_for(Backend::comgr, headers));
  ASSERT_TRUE(co) << co.error().describe();
  EXPECT_EQ(co->backend, Backend::comgr);
  EXPECT_EQ(co->target, "gfx90a");
  EXPECT_EQ(co->kernel_name, "ft_test_comgr_mfma");
  EXPECT_TRUE(co->toolchain_version.starts_with("comgr ")) << co->toolchain_version;
  EXPECT_FALSE(co->from_cache);
  EXPECT_GT(co->compile_seconds, 0);
  expect_amd_code_object(*co, "ft_test_comgr_mfma");
}

TEST(Compile, ClangBuildsGfx942) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  auto headers = amd_headers();
  auto co = compile(amd_mfma_kernel("ft_test_clang_mfma"), *find_target("gfx942"), options_for(Backend::clang, headers));
  ASSERT_TRUE(co) << co.error().describe();
  EXPECT_EQ(co->backend, Backend::clang);
  EXPECT_TRUE(co->toolchain_version.starts_with("clang ")) << co->toolchain_version;
  expect_amd_code_object(*co, "ft_test_clang_mfma");
  // The code object is built for the ISA asked for (EF_AMDGPU_MACH_AMDGCN_GFX942 = 0x4c).
  EXPECT_EQ(ElfImage::parse(co->binary)->flags() & 0xff, 0x4cu);
}

TEST(Compile, NvrtcBuildsSm90aCubinWithPtxAndReport) {
  FT_REQUIRE_BACKEND(Backend::nvrtc, "sm_90a");
  auto headers = nvidia_headers();
  auto co = compile(nvidia_mma_kernel("ft_test_nvrtc_mma"), *find_target("sm_90a"), options_for(Backend::nvrtc, headers));
  ASSERT_TRUE(co) << co.error().describe();
  EXPECT_EQ(co->backend, Backend::nvrtc);
  EXPECT_TRUE(co->toolchain_version.starts_with("nvrtc ")) << co->toolchain_version;
  auto image = ElfImage::parse(co->binary);
  ASSERT_TRUE(image) << image.error().describe();
  EXPECT_EQ(image->machine(), kElfMachineCuda);
  EXPECT_NE(image->symbol("ft_test_nvrtc_mma"), nullptr);
  EXPECT_NE(co->ptx.find(".entry ft_test_nvrtc_mma"), std::string::npos);
  EXPECT_NE(co->ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  EXPECT_NE(co->log.find("Compiling entry function 'ft_test_nvrtc_mma' for 'sm_90a'"), std::string::npos) << co->log;
  EXPECT_NE(co->log.find("Used "), std::string::npos) << co->log;
}

TEST(Compile, DefinesReachTheSource) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  auto headers = amd_headers();
  KernelSource src{"ft_test_define",
                   "#include \"ft/port.hpp\"\n#ifndef FT_TEST_FLAG\n#error FT_TEST_FLAG not defined\n#endif\n"
                   "FT_GLOBAL void ft_test_define(int* p) { p[0] = FT_TEST_FLAG; }\n",
                   {"ft_test_define"}};
  auto opts = options_for(Backend::clang, headers);
  EXPECT_FALSE(compile(src, *find_target("gfx942"), opts));
  opts.defines = {"FT_TEST_FLAG=7"};
  auto co = compile(src, *find_target("gfx942"), opts);
  EXPECT_TRUE(co) << co.error().describe();
}

// The wave size reaches the templates from the target's row: every backend's
// arguments, and the emulator's flags, define FT_WAVE_SIZE (port.hpp's ft::kWaveSize).
TEST(Compile, EveryBackendPassesTheRowsWaveSize) {
  for (const Target& t : all_targets()) {
    const std::string want = fmt::format("-DFT_WAVE_SIZE={}", t.wave_size);
    const std::vector<Backend> backends =
        t.is_amd() ? std::vector<Backend>{Backend::comgr, Backend::clang} : std::vector<Backend>{Backend::nvrtc};
    for (Backend b : backends) {
      const auto args = detail::backend_arguments(b, t, 3, {}, {});
      EXPECT_NE(std::find(args.begin(), args.end(), want), args.end()) << t.name << " " << to_string(b);
    }
    const auto flags = emu::emulation_flags(t, {});
    EXPECT_NE(std::find(flags.begin(), flags.end(), want), flags.end()) << t.name << " (emulated)";
  }
}

// ... and the embedded port header reads it: a unit over the real templates sees
// the row's wave size, and one compiled without the macro stops at its #error.
TEST(Compile, TheTemplatesWaveSizeIsTheRows) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  const Target& t = *find_target("gfx942");
  KernelSource src{"ft_test_wave",
                   fmt::format("#include \"ft/port.hpp\"\nstatic_assert(ft::kWaveSize == {}, \"the row's wave size\");\n"
                               "FT_KERNEL(64, ft_test_wave)(int* p) {{ p[0] = ft::kWaveSize; }}\n",
                               t.wave_size),
                   {"ft_test_wave"}};
  CompileOptions opts;
  opts.backend = Backend::clang;
  opts.cache_dir = "none";
  auto co = compile(src, t, opts);
  EXPECT_TRUE(co) << co.error().describe();
  opts.extra_flags = {"-UFT_WAVE_SIZE"};
  auto without = compile(src, t, opts);
  ASSERT_FALSE(without);
  EXPECT_NE(without.error().message.find("define FT_WAVE_SIZE"), std::string::npos) << without.error().message;
}

// A syntax error is the source's fault: Errc::compile, the compiler's first
// error line in the summary and its full log after it.
class SyntaxError : public ::testing::TestWithParam<std::pair<Backend, const char*>> {};

TEST_P(SyntaxError, ReportsTheCompilersMessage) {
  auto [backend, target] = GetParam();
  FT_REQUIRE_BACKEND(backend, target);
  auto headers = backend == Backend::nvrtc ? nvidia_headers() : amd_headers();
  std::string include = backend == Backend::nvrtc ? "ft/mma.hpp" : "ft/port.hpp";
  KernelSource src{"ft_test_broken", "#include \"" + include + "\"\nextern \"C\" void ft_test_broken(int* p) { p[0] = 1 }\n",
                   {"ft_test_broken"}};
  auto co = compile(src, *find_target(target), options_for(backend, headers));
  ASSERT_FALSE(co);
  EXPECT_EQ(co.error().code, Errc::compile);
  EXPECT_EQ(co.error().context, std::string(target) + ": ft_test_broken");
  std::string first_line = co.error().message.substr(0, co.error().message.find('\n'));
  EXPECT_TRUE(first_line.starts_with(std::string(to_string(backend)) + " failed: ")) << first_line;
  EXPECT_NE(first_line.find("error"), std::string::npos) << first_line;
  EXPECT_NE(first_line.find("ft_test_broken"), std::string::npos) << first_line;  // names the file
  EXPECT_NE(co.error().message.find("expected"), std::string::npos) << co.error().message;  // "expected ';'" / "expected a \";\""
  EXPECT_EQ(co.error().message.find("/tmp/"), std::string::npos) << "private temporary paths leak: " << co.error().message;
}

INSTANTIATE_TEST_SUITE_P(Backends, SyntaxError,
                         ::testing::Values(std::pair{Backend::comgr, "gfx90a"}, std::pair{Backend::clang, "gfx942"},
                                           std::pair{Backend::nvrtc, "sm_90a"}),
                         [](const auto& info) { return std::string(to_string(info.param.first)); });

TEST(Compile, MissingEntryPointIsAnError) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  auto headers = amd_headers();
  auto src = amd_mfma_kernel("ft_test_entry");
  src.entry_points.push_back("ft_test_not_there");
  auto co = compile(src, *find_target("gfx942"), options_for(Backend::clang, headers));
  ASSERT_FALSE(co);
  EXPECT_NE(co.error().message.find("ft_test_not_there"), std::string::npos);
}

// gfx950 needs comgr from ROCm >= 6.4 or LLVM >= 20; where neither is present
// compile() returns exactly backend_for's reason. This machine's toolchains without the
// newer clang (as on a Debian 12 machine without the LLVM folder).
TEST(Compile, Gfx950GivesTheToolchainReason) {
  const Target& gfx950 = *find_target("gfx950");
  Toolchains without_newer = toolchains();
  without_newer.newer_clang = {};
  auto expected = backend_for(gfx950, without_newer);
  if (expected) GTEST_SKIP() << "the default toolchains here build gfx950 (" << to_string(*expected) << ")";
  auto headers = amd_headers();
  CompileOptions opts;
  opts.headers = headers;
  opts.cache_dir = "none";
  opts.toolchains = &without_newer;
  auto co = compile(amd_mfma_kernel("ft_test_gfx950"), gfx950, opts);
  ASSERT_FALSE(co);
  EXPECT_EQ(co.error().code, Errc::toolchain);
  EXPECT_EQ(co.error().describe(), expected.error().describe());
  EXPECT_TRUE(co.error().message.starts_with("needs comgr from ROCm >= 6.4 or LLVM >= 20; found ")) << co.error().message;
}

TEST(Compile, Gfx950ReasonWithAKnownToolchainSet) {
  Toolchains tc;
  tc.clang.found = true;
  tc.clang.major = 19;
  tc.clang.amdgcn_cpus = {"gfx90a", "gfx942"};
  auto headers = amd_headers();
  CompileOptions opts;
  opts.headers = headers;
  opts.cache_dir = "none";
  opts.toolchains = &tc;
  auto co = compile(amd_mfma_kernel("ft_test_gfx950"), *find_target("gfx950"), opts);
  ASSERT_FALSE(co);
  EXPECT_EQ(co.error().describe(), "gfx950: needs comgr from ROCm >= 6.4 or LLVM >= 20; found no comgr and clang 19 (up to gfx942)");
}

TEST(Compile, ForcedBackendThatCannotBuildTheTarget) {
  Toolchains tc;
  tc.clang.found = true;
  tc.clang.major = 19;
  tc.clang.amdgcn_cpus = {"gfx942"};
  tc.comgr.found = true;
  tc.comgr.major = 2;
  tc.comgr.minor = 4;
  tc.comgr.isas = {"amdgcn-amd-amdhsa--gfx90a"};
  CompileOptions opts;
  opts.toolchains = &tc;
  opts.backend = Backend::comgr;
  auto b = choose_backend(*find_target("gfx942"), opts);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, Errc::toolchain);
  EXPECT_EQ(b.error().describe(), "gfx942: backend comgr cannot build it: comgr 2.4 does not list the ISA");
  opts.backend = Backend::nvrtc;
  EXPECT_EQ(choose_backend(*find_target("gfx942"), opts).error().message,
            "backend nvrtc cannot build it: NVRTC builds NVIDIA targets only");
  opts.backend = Backend::clang;
  EXPECT_EQ(*choose_backend(*find_target("gfx942"), opts), Backend::clang);
  opts.backend.reset();
  EXPECT_EQ(*choose_backend(*find_target("gfx90a"), opts), Backend::comgr);
}

TEST(Compile, CodeObjectExtension) {
  EXPECT_EQ(code_object_extension(Backend::comgr), ".hsaco");
  EXPECT_EQ(code_object_extension(Backend::clang), ".hsaco");
  EXPECT_EQ(code_object_extension(Backend::nvrtc), ".cubin");
}

using test::ScopedEnv;

TEST(Compile, DefaultCacheDirFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv flytune("FLYTUNE_CACHE_DIR", "/tmp/ftc");
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(default_cache_dir(), "/tmp/ftc");
  }
  {
    ScopedEnv flytune("FLYTUNE_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(default_cache_dir(), "/tmp/xdg/flytune");
  }
  {
    ScopedEnv flytune("FLYTUNE_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(default_cache_dir(), "/home/someone/.cache/flytune");
  }
}

TEST(Compile, DefaultHeadersAreTheEmbeddedTemplates) {
  CompileOptions opts;
  EXPECT_EQ(opts.headers.data(), CompileOptions::default_headers().data());
  EXPECT_EQ(opts.headers.size(), CompileOptions::default_headers().size());
}

}  // namespace
}  // namespace ft
