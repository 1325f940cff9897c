#pragma once
// fn(i) for i in [0, count) on `threads` threads (0: the machine's cores),
// thread j taking i = j, j + threads, ...: the CPU references' loops
// (reference.cpp, backward_reference.cpp). Each i must write only its own
// outputs; then the results do not depend on the thread count.
#include <algorithm>
#include <thread>
#include <vector>

namespace ft {

template <class Fn>
void parallel_for(long long count, unsigned threads, Fn fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::clamp<long long>(count, 1, threads));
  if (threads == 1) {
    for (long long i = 0; i < count; ++i) fn(i);
    return;
  }
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (long long i = t; i < count; i += threads) fn(i);
    });
}

}  // namespace ft
