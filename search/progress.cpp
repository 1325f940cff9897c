#include "search/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace ft {

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", int(s) / 60, int(s) % 60);
  return fmt::format("{}h{:02d}m", int(s) / 3600, (int(s) % 3600) / 60);
}

Progress::Progress(std::string what, std::size_t total, bool enabled, Mode mode)
    : what_(std::move(what)), total_(total), enabled_(enabled), tty_(mode == Mode::automatic && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::advance(const std::string& item, std::size_t by) {
  std::lock_guard lock(mu_);
  done_ += by;
  draw(item);
}

namespace {
void put(const std::string& text) { std::fputs(text.c_str(), stderr); }
}  // namespace

void Progress::draw(const std::string& item) {
  if (!enabled_ || total_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = double(done_) / double(total_);
  const std::string eta = done_ > 0 && done_ < total_ ? format_duration(elapsed / frac * (1 - frac)) : "-";
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
    const int width = 28, filled = int(frac * width);
    std::string shown = item.size() > 48 ? item.substr(0, 45) + "..." : item;
    // fputs, not fmt::print: a closed stderr (`2>&1 | head`) must not throw
    // out of a compile thread.
    put(fmt::format("\r\033[K{} [{}{}] {}/{} {:.0f}% ETA {} {}", what_, std::string(filled, '#'),
               std::string(width - filled, '.'), done_, total_, frac * 100, eta, shown));
  } else {
    const std::size_t decile = done_ * 10 / total_;
    if (decile == last_decile_ && now - last_draw_ < std::chrono::seconds(15) && done_ < total_) return;
    last_decile_ = decile;
    put(fmt::format("{}: {}/{} ({:.0f}%), elapsed {}, ETA {}\n", what_, done_, total_, frac * 100,
                    format_duration(elapsed), eta));
  }
  last_draw_ = now;
  std::fflush(stderr);
}

void Progress::finish() {
  std::lock_guard lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (enabled_ && tty_ && total_ > 0) put("\n");
}

}  // namespace ft
