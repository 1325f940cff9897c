#pragma once
// A progress bar with ETA on stderr for long work. On a terminal it redraws one
// line; otherwise (CI logs, pipes) it prints a line every 10% or 15 seconds.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace ft {

class Progress {
 public:
  // automatic: a redrawn line on a terminal, lines otherwise; lines: always
  // lines (several bars at once, as a search on several GPUs draws them).
  enum class Mode { automatic, lines };
  Progress(std::string what, std::size_t total, bool enabled = true, Mode mode = Mode::automatic);
  ~Progress();
  // Thread-safe.
  void advance(const std::string& item, std::size_t by = 1);
  void finish();

 private:
  void draw(const std::string& item);
  std::string what_;
  std::size_t total_, done_ = 0;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::size_t last_decile_ = 0;
  std::mutex mu_;
};

std::string format_duration(double seconds);  // "42s", "3m05s", "1h02m"

}  // namespace ft
