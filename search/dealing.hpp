#pragma once
// Dealing a search's work to its GPUs (internal to search/): a queue the GPUs
// of one model take items from, the GPUs' workers and contexts, a thread per
// GPU and the first error among them. search.cpp deals verification and the
// token buckets through deal().
#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "search/measurer.hpp"
#include "search/steps.hpp"

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

// One GPU of the search: its worker and, once its model is known, the context its steps run in.
struct Gpu {
  std::unique_ptr<Measurer> m;
  DeviceInfo info;
  std::size_t model = 0;
  std::optional<GpuContext> ctx;
  std::vector<int> buckets;   // searched here
  std::size_t verified = 0;   // variants verified here
};

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

// Runs fn(i) for each index, each on a thread of its own (inline for one).
void on_each(const std::vector<std::size_t>& which, const std::function<void(std::size_t)>& fn);

// Deals `queue` to the GPUs `which`, one thread each, until it is empty or the
// search stops (interrupted() or an error). setup(gpu) runs once per GPU and
// round; work(gpu, item) is false when the GPU stopped before finishing the
// item, which goes back to the queue. A GPU whose worker died leaves its share
// to the others; when none is left, the work left is an error. The first
// error stops the others (abort).
Status deal(std::vector<Gpu>& gpus, const std::vector<std::size_t>& which, WorkQueue& queue, std::atomic<bool>& abort,
            const std::function<Status(Gpu&)>& setup, const std::function<Result<bool>(Gpu&, int)>& work);

}  // namespace ft::dealing
