// Crash isolation mechanics: a worker that answers, one that dies mid-request,
// and one that hangs (killed by the watchdog); each failure is reported with
// how the worker ended and a restarted worker answers again. The lines are
// carried as they are (their meaning is protocol_test.cpp's).
#include "measure/worker/worker_process.hpp"

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
    *fail*) echo 'failed: '"$line" ;;
    *) echo 'echo: '"$line" ;;
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
  auto ok = w.exchange("ping", 5s);
  ASSERT_TRUE(ok) << ok.error().describe();
  EXPECT_EQ(*ok, "echo: ping");

  auto failed = w.exchange("fail 1", 5s);
  ASSERT_TRUE(failed) << failed.error().describe();
  EXPECT_EQ(*failed, "failed: fail 1");
  EXPECT_TRUE(w.running());  // an answer, whatever it says, leaves the worker up

  EXPECT_FALSE(w.exchange("two\nlines", 5s));  // one request is one line
  EXPECT_TRUE(w.running());

  auto crashed = w.exchange("crash", 5s);
  ASSERT_FALSE(crashed);
  EXPECT_EQ(crashed.error().code, Errc::device);
  EXPECT_NE(crashed.error().message.find("signal 11"), std::string::npos) << crashed.error().message;
  EXPECT_FALSE(w.running());

  ASSERT_TRUE(w.start(exe, "cuda:0"));
  auto hung = w.exchange("hang", 300ms);
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().code, Errc::timeout);
  EXPECT_FALSE(w.running());

  ASSERT_TRUE(w.start(exe, "cuda:0"));
  EXPECT_TRUE(w.exchange("ping", 5s));
}

TEST(WorkerProcess, MissingExecutableIsAnError) {
  WorkerProcess w;
  EXPECT_FALSE(w.start("/nonexistent/flytune", ""));
}

}  // namespace
}  // namespace ft
