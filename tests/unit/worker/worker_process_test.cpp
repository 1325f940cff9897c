// Crash isolation mechanics: a worker that answers, one that dies mid-request,
// and one that hangs (killed by the watchdog); each failure is reported with
// how the worker ended and a restarted worker answers again.
#include "tuner/worker/worker_process.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace ft {
namespace {

using namespace std::chrono_literals;

// A stand-in worker: a shell script that behaves per request text.
std::string write_fake_worker() {
  auto path = std::filesystem::temp_directory_path() / "flytune-fake-worker.sh";
  std::ofstream(path) << R"(#!/bin/sh
while read line; do
  case "$line" in
    *crash*) kill -SEGV $$ ;;
    *hang*) sleep 30 ;;
    *fail*) echo '{"ok": false, "error": "kernel verify failed", "code": "verify"}' ;;
    *) echo '{"ok": true, "echo": 1}' ;;
  esac
done
)";
  chmod(path.c_str(), 0755);
  return path.string();
}

TEST(WorkerProcess, AnswersFailsDiesHangsAndRestarts) {
  const std::string exe = write_fake_worker();
  WorkerProcess w;
  ASSERT_TRUE(w.start(exe, "cuda:0"));
  auto ok = w.request({{"op", "ping"}}, 5s);
  ASSERT_TRUE(ok) << ok.error().describe();
  EXPECT_EQ((*ok)["echo"], 1);

  auto failed = w.request({{"op", "fail"}}, 5s);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, Errc::verify);
  EXPECT_TRUE(w.running());  // a reported failure leaves the worker up

  auto crashed = w.request({{"op", "crash"}}, 5s);
  ASSERT_FALSE(crashed);
  EXPECT_EQ(crashed.error().code, Errc::device);
  EXPECT_NE(crashed.error().message.find("signal 11"), std::string::npos) << crashed.error().message;
  EXPECT_FALSE(w.running());

  ASSERT_TRUE(w.start(exe, "cuda:0"));
  auto hung = w.request({{"op", "hang"}}, 300ms);
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().code, Errc::timeout);
  EXPECT_FALSE(w.running());

  ASSERT_TRUE(w.start(exe, "cuda:0"));
  EXPECT_TRUE(w.request({{"op", "ping"}}, 5s));
}

TEST(WorkerProcess, MissingExecutableIsAnError) {
  WorkerProcess w;
  EXPECT_FALSE(w.start("/nonexistent/flytune", ""));
}

}  // namespace
}  // namespace ft
