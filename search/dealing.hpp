// The pieces by which a search deals work to its GPUs' threads: a queue that
// a GPU stopping mid-item gives the item back to, one thread per GPU, and the
// first error of those threads (search/search.cpp's deal()).
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace ft::dealing {

// A queue of work (variant indices, token buckets) that the GPUs of one model
// take from; a GPU that stops before finishing an item gives it back.
class WorkQueue {
 public:
  explicit WorkQueue(const std::vector<int>& items) : items_(items.begin(), items.end()) {}
  std::optional<int> take() {
    std::lock_guard lock(mu_);
    if (items_.empty()) return std::nullopt;
    const int item = items_.front();
    items_.pop_front();
    return item;
  }
  void give_back(int item) {
    std::lock_guard lock(mu_);
    items_.push_front(item);
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return items_.size();
  }

 private:
  std::mutex mu_;
  std::deque<int> items_;
};

// Runs fn(i) for each index, each on a thread of its own (inline for one).
inline void on_each(const std::vector<std::size_t>& which, const std::function<void(std::size_t)>& fn) {
  if (which.size() == 1) {
    fn(which.front());
    return;
  }
  std::vector<std::jthread> threads;
  for (std::size_t i : which) threads.emplace_back(fn, i);
}

// The first error of several threads; the others are told to stop.
class FirstError {
 public:
  explicit FirstError(std::atomic<bool>& abort) : abort_(abort) {}
  void set(Error e) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::move(e);
    abort_.store(true);
  }
  Status status() {
    std::lock_guard lock(mu_);
    if (error_) return std::unexpected(*error_);
    return {};
  }

 private:
  std::mutex mu_;
  std::optional<Error> error_;
  std::atomic<bool>& abort_;
};

}  // namespace ft::dealing
