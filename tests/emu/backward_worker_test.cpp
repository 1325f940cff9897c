// The backward through the worker protocol (measure/worker/protocol.hpp) on
// the CPU emulator: the real `flytune worker --device emu:gfx942` fed JSON
// lines, as a search feeds it. The problem opened for the backward (E = 4,
// H = I = 64, top-2; the gfx942 bf16 program of backward_bench_test.cpp, code
// objects as files), then a table of requests, each with the answer it must
// give: the program as built passes at T = 333 with one expert without tokens
// and at T = 7; with the K-grouped GEMM's broken-atom mutant in both wgrad
// roles it fails on a weight gradient; a timing has the samples asked for;
// a forward request, a stage of another target and an out-of-order recipe are
// refused with one line -- and the worker goes on answering after each.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "compile/compile.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "layer/operation.hpp"
#include "measure/worker/protocol.hpp"
#include "tests/emu/layer_support.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft::emu::test {
namespace {

constexpr const char* kMutant = "ft_mutant_kgrouped_broken_atom";

std::string write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  EXPECT_TRUE(f) << path;
  return path;
}

// One request and what its answer must be.
struct Exchange {
  const char* label;
  protocol::Request request;
  std::function<void(const Result<protocol::Answer>&)> expect;
};

void passes(const Result<protocol::Answer>& a) {
  ASSERT_TRUE(a) << a.error().describe();
  const auto& v = std::get<protocol::VerifyAnswer>(*a);
  EXPECT_TRUE(v.passed) << v.summary;
  EXPECT_LT(v.rel_l2, 8e-3) << v.summary;
}

std::function<void(const Result<protocol::Answer>&)> refused(std::string says) {
  return [says](const Result<protocol::Answer>& a) {
    ASSERT_FALSE(a);
    EXPECT_EQ(a.error().code, Errc::invalid_input);
    EXPECT_NE(a.error().message.find(says), std::string::npos) << a.error().message;
  };
}

// A forward stage kernel: refused before its file is read.
protocol::KernelRef forward_kernel(const Target& t, const Problem& p) {
  const Variant v = *default_variant(t, p, StageRole::stage1);
  return {v, "/nonexistent/" + v.name() + ".so", v.name()};
}

void done(const Result<protocol::Answer>& a) {
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_TRUE(std::holds_alternative<protocol::Done>(*a));
}

TEST(EmuBackwardWorker, VerifiesAndTimesTheBackwardProgramOverJsonLines) {
  const Target& t = target("gfx942");
  Problem p = emu_problem("backward_worker", DType::bf16, 64, 64);
  p.routing = *Routing::parse("uniform");
  ::ft::test::ScratchDir dir;
  CompileOptions co;
  co.backend = Backend::emulate;
  auto support = compile(emit_support(t, p.dtype), t, co);
  ASSERT_TRUE(support) << support.error().describe();
  const std::string support_path = write_file(dir.file("support.so"), support->binary);
  auto mutant = compile_emulated(unit_from_file("kgrouped_mutant.cpp", {kMutant}), t, compile_options());
  ASSERT_TRUE(mutant) << mutant.error().describe();
  const std::string mutant_path = write_file(dir.file("mutant.so"), mutant->binary);

  // The program as built, and with the mutant in the wgrad roles.
  const AtomInfo* atom = find_atom("mfma_f32_16x16x16_bf16");
  std::vector<protocol::GradKernelRef> built, broken;
  for (const op::GradRole& row : op::moe_backward().grad) {
    const bool wgrad = row.gemm == BackwardOp::wgrad;
    const BackwardVariant v = wgrad ? BackwardVariant{&t, atom, 64, 64, 32, 2, 2, 2, row.gemm}
                                    : BackwardVariant{&t, atom, 32, 64, 32, 2, 2, 2, row.gemm};
    auto unit = emit_backward(v);
    ASSERT_TRUE(unit) << unit.error().describe();
    auto obj = compile(*unit, t, co);
    ASSERT_TRUE(obj) << obj.error().describe();
    const std::string path = write_file(dir.file(v.name() + ".so"), obj->binary);
    built.push_back({row.launch, v, path, v.name()});
    broken.push_back(wgrad ? protocol::GradKernelRef{row.launch, v, mutant_path, kMutant} : built.back());
  }
  std::vector<protocol::GradKernelRef> foreign = built, reversed(built.rbegin(), built.rend());
  foreign[0].config.target = find_target("gfx950");
  foreign[0].config.atom = find_atom("mfma_f32_16x16x32_bf16");

  // The program requests of the backward: its operation and these stages.
  const auto program = [](std::vector<protocol::GradKernelRef> stages) {
    return protocol::ProgramKernels{&op::moe_backward(), {}, std::move(stages)};
  };
  const auto verify = [&](std::vector<protocol::GradKernelRef> stages) {
    return protocol::VerifyProgramRequest{program(std::move(stages))};
  };
  protocol::TimeProgramRequest timed{program(built), 1, 3, true, false};
  protocol::TimeProgramRequest graphed = timed;
  graphed.graph = true;
  const std::vector<Exchange> exchanges{
      {"device", protocol::DeviceRequest{}, [](const Result<protocol::Answer>& a) {
         ASSERT_TRUE(a) << a.error().describe();
         EXPECT_EQ(std::get<protocol::DeviceAnswer>(*a).device.arch, "gfx942");
       }},
      {"before open", verify(built), refused("no problem open")},
      {"open", protocol::OpenRequest{p, "gfx942", support_path, 333, &op::moe_backward()}, done},
      {"inputs 333", protocol::InputsRequest{333, 11, 1}, done},
      {"as built", verify(built), passes},
      {"wgrad mutant", verify(broken), [](const Result<protocol::Answer>& a) {
         ASSERT_TRUE(a) << a.error().describe();
         const auto& v = std::get<protocol::VerifyAnswer>(*a);
         EXPECT_FALSE(v.passed) << v.summary;
         EXPECT_TRUE(v.summary.starts_with("dw")) << v.summary;
         EXPECT_GT(v.rel_l2, 8e-3) << v.summary;
       }},
      {"timed", timed, [](const Result<protocol::Answer>& a) {
         ASSERT_TRUE(a) << a.error().describe();
         const auto& pt = std::get<ProgramTiming>(*a);
         // Its parts cross the protocol: the support steps, then each GEMM role.
         ASSERT_EQ(pt.parts.size(), 5u);
         EXPECT_EQ(pt.parts.front().first, "support");
         EXPECT_NE(pt.part("wgrad1"), nullptr);
         EXPECT_EQ(pt.part("wgrad1")->samples, 3);
         const Timing& tm = pt.total;
         EXPECT_EQ(tm.samples, 3);
         EXPECT_GT(tm.median_us, 0.0);
         EXPECT_LE(tm.p10_us, tm.median_us);
         EXPECT_LE(tm.median_us, tm.p90_us);
       }},
      {"graph", graphed, refused("timed by direct launches, not as a graph")},
      {"forward request", protocol::VerifyRequest{forward_kernel(t, p)}, refused("open for moe_backward, not moe_forward")},
      {"forward program", protocol::VerifyProgramRequest{{&op::moe_forward(), {forward_kernel(t, p)}, {}}},
       refused("open for moe_backward, not moe_forward")},
      {"another target", verify(foreign), refused("is for gfx950, the layer for gfx942")},
      {"out of order", verify(reversed), refused("out of the operation's order")},
      {"inputs 7", protocol::InputsRequest{7, 12, 0}, done},
      {"as built at T=7", verify(built), passes},
  };
  std::string lines;
  for (const Exchange& e : exchanges) lines += protocol::to_line(protocol::encode(e.request)) + "\n";
  auto r = ::ft::test::run_flytune({"worker", "--device", "emu:gfx942"}, lines);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> answers;
  for (std::size_t at = 0; at < r.output.size();) {
    const std::size_t nl = r.output.find('\n', at);
    const std::string line = r.output.substr(at, nl - at);
    if (line.starts_with("{")) answers.push_back(line);
    at = nl == std::string::npos ? r.output.size() : nl + 1;
  }
  ASSERT_EQ(answers.size(), exchanges.size()) << r.output;
  for (std::size_t i = 0; i < exchanges.size(); ++i) {
    SCOPED_TRACE(exchanges[i].label);
    auto message = protocol::parse_line(answers[i]);
    ASSERT_TRUE(message) << answers[i];
    exchanges[i].expect(protocol::decode_answer_to(exchanges[i].request, *message));
  }
}

}  // namespace
}  // namespace ft::emu::test
