// Crash isolation on real hardware: a kernel that writes through an invalid
// address inside the worker process reports a device error and ends that
// worker only; a fresh worker verifies kernels again. Run from the build's
// tests/gpu folder (ctest does), so ../../cli/flytune is the binary under test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "compile/compile.hpp"
#include "device/runtimes.hpp"
#include "measure/worker/protocol.hpp"
#include "measure/worker/worker_process.hpp"

namespace ft {
namespace {

using namespace std::chrono_literals;

std::string write_object(const CodeObject& co, const std::filesystem::path& dir) {
  auto path = dir / (co.kernel_name + ".cubin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(co.binary.data()), std::streamsize(co.binary.size()));
  return path.string();
}

// One request through the worker's pipe, its answer decoded.
Result<protocol::Answer> send(WorkerProcess& w, const protocol::Request& request, std::chrono::milliseconds timeout) {
  const std::string line = FT_TRY(w.exchange(protocol::to_line(protocol::encode(request)), timeout));
  const nlohmann::json message = FT_TRY(protocol::parse_line(line));
  return protocol::decode_answer_to(request, message);
}

TEST(WorkerFault, IllegalAddressEndsOnlyTheWorker) {
  auto dev = open_device("cuda:0");
  if (!dev) GTEST_SKIP() << "skipped: no GPU (" << dev.error().describe() << ")";
  const std::string exe = std::filesystem::absolute("../../cli/flytune").string();
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << "skipped: " << exe << " not built";
  dev->reset();

  const Target& t = *find_target("sm_90a");
  Problem p = *problem_from_preset("tiny");
  Variant v = *default_variant(t, p, StageRole::stage2);
  CompileOptions opt;
  opt.cache_dir = "none";
  auto support = compile(emit_support(t, p.dtype), t, opt);
  ASSERT_TRUE(support) << support.error().describe();
  auto stage = compile(emit_variant(v), t, opt);
  ASSERT_TRUE(stage) << stage.error().describe();
  auto dir = std::filesystem::temp_directory_path() / "flytune-fault-test";
  std::filesystem::create_directories(dir);
  const protocol::Request open = protocol::OpenRequest{p, "sm_90a", write_object(*support, dir), 64};
  const protocol::Request inputs = protocol::InputsRequest{33, 5, 1};
  const protocol::Request verify = protocol::VerifyRequest{{v, write_object(*stage, dir), v.name()}};

  WorkerProcess w;
  auto prime_and_verify = [&] {
    ASSERT_TRUE(w.start(exe, "cuda:0"));
    for (const auto& req : {open, inputs}) {
      auto r = send(w, req, 120s);
      ASSERT_TRUE(r) << r.error().describe();
    }
    auto r = send(w, verify, 120s);
    ASSERT_TRUE(r) << r.error().describe();
    const auto* answer = std::get_if<protocol::VerifyAnswer>(&*r);
    ASSERT_NE(answer, nullptr);
    EXPECT_TRUE(answer->passed) << answer->summary;
  };
  prime_and_verify();

  auto fault = send(w, protocol::FaultRequest{}, 60s);
  ASSERT_FALSE(fault);
  EXPECT_EQ(fault.error().code, Errc::device) << fault.error().describe();
  EXPECT_NE(fault.error().message.find("ILLEGAL_ADDRESS"), std::string::npos) << fault.error().message;
  // The worker ends after a device error; the next request says how.
  auto after = send(w, inputs, 30s);
  EXPECT_FALSE(after);

  prime_and_verify();  // a fresh worker on the same GPU works
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft
