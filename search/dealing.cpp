#include "search/dealing.hpp"

#include <thread>

#include <fmt/format.h>

#include "search/search.hpp"

namespace ft::dealing {

void on_each(const std::vector<std::size_t>& which, const std::function<void(std::size_t)>& fn) {
  if (which.size() == 1) {
    fn(which.front());
    return;
  }
  std::vector<std::jthread> threads;
  for (std::size_t i : which) threads.emplace_back(fn, i);
}

Status deal(std::vector<Gpu>& gpus, const std::vector<std::size_t>& which, WorkQueue& queue, std::atomic<bool>& abort,
            const std::function<Status(Gpu&)>& setup, const std::function<Result<bool>(Gpu&, int)>& work) {
  FirstError first(abort);
  std::size_t alive_before = which.size() + 1;
  for (;;) {
    std::vector<std::size_t> alive;
    for (std::size_t i : which)
      if (!gpus[i].m->dead()) alive.push_back(i);
    if (alive.empty())
      return fail(Errc::device, fmt::format("no GPU's worker is left running; {} item(s) of work were not done", queue.size()));
    if (alive.size() >= alive_before) return fail(Errc::internal, "work was given back without a GPU stopping");
    alive_before = alive.size();
    on_each(alive, [&](std::size_t i) {
      Gpu& gpu = gpus[i];
      if (auto st = setup(gpu); !st) {
        if (!gpu.m->stopped()) first.set(with_context(st.error(), gpu.m->label()));
        return;
      }
      while (!gpu.m->stopped()) {
        const std::optional<int> item = queue.take();
        if (!item) return;
        auto done = work(gpu, *item);
        if (!done) {
          first.set(with_context(done.error(), gpu.m->label()));
          return;
        }
        if (!*done) {
          queue.give_back(*item);
          return;
        }
      }
    });
    FT_CHECK(first.status());
    if (interrupted() || queue.size() == 0) return {};
  }
}

}  // namespace ft::dealing
