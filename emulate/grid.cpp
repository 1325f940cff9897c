#include "emulate/grid.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#define FT_EMU_ABI_ONLY
#include "templates/ft/port_emu.hpp"

namespace ft::emu {
namespace {

enum class LaneState { ready, at_barrier, at_exchange, faulted, done };

struct Lane {
  LaneContext ctx{};
  FiberContext fiber;
  LaneState state = LaneState::ready;
  unsigned wait_gen = 0;
};

struct WaveSync {
  int arrived = 0;
  unsigned gen = 0;
  unsigned bytes = 0;
  std::vector<unsigned char> buf[2];  // alternate generations: one sync per exchange suffices
};

struct BlockState {
  const GridLaunch* launch = nullptr;
  std::vector<Lane> lanes;
  FiberContext scheduler;
  int barrier_arrived = 0;
  unsigned barrier_gen = 0;
  int exchange_lanes = 0;  // wave width of the exchanges in this block (0: none yet)
  std::vector<WaveSync> waves;
  std::string fault;       // a misuse a lane reported
};

thread_local BlockState* tl_block = nullptr;
thread_local int tl_lane = 0;

// Parks the calling lane and returns to the block's scheduler.
void yield_to_scheduler(BlockState& b, Lane& lane) { fiber_switch(lane.fiber, b.scheduler, b.launch->fibers); }

[[noreturn]] void lane_fault(BlockState& b, Lane& lane, std::string what) {
  if (b.fault.empty()) b.fault = std::move(what);
  lane.state = LaneState::faulted;
  yield_to_scheduler(b, lane);
  std::abort();  // a faulted lane is never resumed
}

const LaneContext* rt_current() { return &tl_block->lanes[tl_lane].ctx; }

void rt_barrier() {
  BlockState& b = *tl_block;
  Lane& lane = b.lanes[tl_lane];
  if (++b.barrier_arrived == int(b.lanes.size())) {
    b.barrier_arrived = 0;
    ++b.barrier_gen;  // releases the waiting lanes; the last one runs on
    return;
  }
  lane.state = LaneState::at_barrier;
  lane.wait_gen = b.barrier_gen;
  yield_to_scheduler(b, lane);
}

void rt_wave_exchange(int lanes, const void* mine, unsigned bytes, void* all) {
  BlockState& b = *tl_block;
  const int me = tl_lane;
  Lane& lane = b.lanes[me];
  const int threads = int(b.lanes.size());
  if (lanes <= 0 || (b.exchange_lanes != 0 && b.exchange_lanes != lanes))
    lane_fault(b, lane, fmt::format("wave exchanges of {} and {} lanes in one block", b.exchange_lanes, lanes));
  if (b.exchange_lanes == 0) {
    b.exchange_lanes = lanes;
    b.waves.assign(std::size_t((threads + lanes - 1) / lanes), WaveSync{});
  }
  const int w = me / lanes;
  if ((w + 1) * lanes > threads)
    lane_fault(b, lane, fmt::format("thread {} is in a partial wave: a wave exchange needs all {} lanes, the block has {} threads",
                                    me, lanes, threads));
  WaveSync& wave = b.waves[std::size_t(w)];
  if (wave.arrived == 0) {
    wave.bytes = bytes;
  } else if (wave.bytes != bytes) {
    lane_fault(b, lane, fmt::format("lanes of wave {} exchange different sizes ({} and {} bytes)", w, wave.bytes, bytes));
  }
  const unsigned gen = wave.gen;
  std::vector<unsigned char>& buf = wave.buf[gen & 1u];
  if (buf.size() < std::size_t(lanes) * bytes) buf.resize(std::size_t(lanes) * bytes);
  std::memcpy(buf.data() + std::size_t(me % lanes) * bytes, mine, bytes);
  if (++wave.arrived == lanes) {
    wave.arrived = 0;
    ++wave.gen;
  } else {
    lane.state = LaneState::at_exchange;
    lane.wait_gen = gen;
    yield_to_scheduler(b, lane);
  }
  std::memcpy(all, buf.data(), std::size_t(lanes) * bytes);
}

void rt_yield() {
  BlockState& b = *tl_block;
  Lane& lane = b.lanes[tl_lane];
  lane.state = LaneState::ready;  // runnable again as soon as the others had their turn
  yield_to_scheduler(b, lane);
}

void rt_fault(const char* what) {
  BlockState& b = *tl_block;
  lane_fault(b, b.lanes[tl_lane], what);
}

const Runtime kRuntime{kAbiVersion, &rt_current, &rt_barrier, &rt_wave_exchange, &rt_yield, &rt_fault};

void lane_main(void* p) {
  Lane& lane = *static_cast<Lane*>(p);
  BlockState& b = *tl_block;
  b.launch->entry(b.launch->args);
  lane.state = LaneState::done;
  yield_to_scheduler(b, lane);
  std::abort();  // a finished lane is never resumed
}

bool runnable(const BlockState& b, const Lane& l) {
  switch (l.state) {
    case LaneState::ready: return true;
    case LaneState::at_barrier: return b.barrier_gen != l.wait_gen;
    case LaneState::at_exchange: return b.waves[std::size_t(l.ctx.thread / b.exchange_lanes)].gen != l.wait_gen;
    default: return false;
  }
}

// "0-63, 128-191" for the threads in state `s`.
std::string thread_ranges(const BlockState& b, LaneState s) {
  std::string out;
  const int n = int(b.lanes.size());
  for (int i = 0; i < n;) {
    if (b.lanes[std::size_t(i)].state != s) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < n && b.lanes[std::size_t(j + 1)].state == s) ++j;
    if (!out.empty()) out += ", ";
    out += i == j ? fmt::format("{}", i) : fmt::format("{}-{}", i, j);
    i = j + 1;
  }
  return out;
}

std::string describe_deadlock(const BlockState& b) {
  std::vector<std::string> parts;
  const std::pair<LaneState, const char*> kinds[] = {{LaneState::at_barrier, "wait at a block barrier"},
                                                      {LaneState::at_exchange, "wait at a wave exchange"},
                                                      {LaneState::done, "have exited"}};
  for (const auto& [state, what] : kinds) {
    const auto count = std::count_if(b.lanes.begin(), b.lanes.end(), [&](const Lane& l) { return l.state == state; });
    if (count > 0) parts.push_back(fmt::format("{} thread{} {} ({})", count, count == 1 ? "" : "s", what, thread_ranges(b, state)));
  }
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
  return text;
}

class StackPool {
 public:
  Result<std::vector<FiberStack>> take(std::size_t count, std::size_t bytes) {
    std::vector<FiberStack> out;
    {
      std::lock_guard lock(mutex_);
      while (!free_.empty() && out.size() < count) {
        if (free_.back().usable() >= bytes) out.push_back(std::move(free_.back()));
        free_.pop_back();
      }
    }
    while (out.size() < count) out.push_back(FT_TRY(FiberStack::allocate(bytes)));
    return out;
  }
  void give(std::vector<FiberStack>& stacks) {
    std::lock_guard lock(mutex_);
    for (auto& s : stacks) free_.push_back(std::move(s));
    stacks.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<FiberStack> free_;
};

StackPool& stack_pool() {
  static StackPool pool;
  return pool;
}

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};

// One block in flight on a worker: its lanes, their stacks, its LDS, and
// where its scheduler stands.
struct Slot {
  std::unique_ptr<BlockState> block;
  std::vector<FiberStack> stacks;
  std::unique_ptr<unsigned char, AlignedFree> lds;
  long long id = -1;  // -1: empty
  int live = 0;       // lanes not yet done
  int next_lane = 0;
};

// Runs blocks taken from `next` until none remain or one fails: one at a
// time, or GridLaunch::interleave of them at once, switching between them in
// seeded random bursts of lane steps.
class Worker {
 public:
  explicit Worker(const GridLaunch& launch) : launch_(launch) {}

  Status run(std::atomic<long long>& next, long long total, std::atomic<bool>& stop) {
    slots_.resize(std::size_t(std::max(1, launch_.interleave)));
    Status status = allocate();
    if (status) status = slots_.size() == 1 ? run_in_turn(next, total, stop) : run_interleaved(next, total, stop);
    for (Slot& s : slots_) stack_pool().give(s.stacks);
    return status;
  }

 private:
  Status allocate() {
    lds_size_ = std::size_t(std::max(launch_.dynamic_lds, 16) + 15) / 16 * 16;
    for (Slot& s : slots_) {
      s.stacks = FT_TRY(stack_pool().take(std::size_t(launch_.block_threads), launch_.lane_stack_bytes));
      s.lds.reset(static_cast<unsigned char*>(std::aligned_alloc(64, lds_size_)));
      if (!s.lds) return fail(Errc::internal, "cannot allocate the emulated LDS");
    }
    return {};
  }

  Status run_in_turn(std::atomic<long long>& next, long long total, std::atomic<bool>& stop) {
    Slot& s = slots_[0];
    while (!stop.load(std::memory_order_relaxed)) {
      const long long id = next.fetch_add(1);
      if (id >= total) break;
      start(s, id);
      while (s.id >= 0) {
        if (Status st = step(s); !st) {
          stop = true;
          return st;
        }
      }
    }
    return {};
  }

  Status run_interleaved(std::atomic<long long>& next, long long total, std::atomic<bool>& stop) {
    std::mt19937_64 rng(launch_.schedule_seed);
    auto refill = [&](Slot& s) {
      const long long id = stop.load(std::memory_order_relaxed) ? total : next.fetch_add(1);
      if (id < total) start(s, id);
    };
    for (Slot& s : slots_) refill(s);
    std::vector<Slot*> busy;
    const int burst = 8 * launch_.block_threads;
    while (true) {
      busy.clear();
      for (Slot& s : slots_)
        if (s.id >= 0) busy.push_back(&s);
      if (busy.empty()) return {};
      Slot& s = *busy[std::size_t(rng() % busy.size())];
      for (int n = int(rng() % std::uint64_t(burst)) + 1; n > 0 && s.id >= 0; --n) {
        if (Status st = step(s); !st) {
          stop = true;
          return st;
        }
      }
      if (s.id < 0) refill(s);
    }
  }

  void start(Slot& s, long long id) {
    const unsigned gx = launch_.grid[0], gy = launch_.grid[1];
    const int bx = int(id % gx), by = int(id / gx % gy), bz = int(id / gx / gy);
    // LDS holds garbage when a block starts on hardware; NaN bytes make reads before writes show.
    std::memset(s.lds.get(), 0xff, lds_size_);
    s.block = std::make_unique<BlockState>();
    BlockState& b = *s.block;
    b.launch = &launch_;
    const int n = launch_.block_threads;
    b.lanes.resize(std::size_t(n));
    for (int i = 0; i < n; ++i) {
      Lane& l = b.lanes[std::size_t(i)];
      l.ctx = LaneContext{i, {bx, by, bz}, s.lds.get()};
      fiber_prepare(l.fiber, s.stacks[std::size_t(i)], &lane_main, &l, launch_.fibers);
    }
    s.id = id;
    s.live = n;
    s.next_lane = 0;
  }

  // Runs the slot's next runnable lane until it waits or ends; the slot is
  // empty again (id -1) when its block is done.
  Status step(Slot& s) {
    BlockState& b = *s.block;
    const int n = int(b.lanes.size());
    const auto where = [&] {
      const LaneContext& c = b.lanes[0].ctx;
      return fmt::format("block ({},{},{})", c.block[0], c.block[1], c.block[2]);
    };
    int i = s.next_lane;
    for (int scanned = 0; !runnable(b, b.lanes[std::size_t(i)]); i = (i + 1) % n)
      if (++scanned == n) {
        s.id = -1;
        return fail(Errc::device, fmt::format("barrier divergence in {}: {}: {}", launch_.kernel, where(), describe_deadlock(b)));
      }
    Lane& lane = b.lanes[std::size_t(i)];
    lane.state = LaneState::ready;
    tl_block = &b;
    tl_lane = i;
    fiber_switch(b.scheduler, lane.fiber, launch_.fibers);
    tl_block = nullptr;
    if (!b.fault.empty()) {
      s.id = -1;
      return fail(Errc::device, fmt::format("{}: {}: {}", launch_.kernel, where(), b.fault));
    }
    if (lane.state == LaneState::done && --s.live == 0) s.id = -1;
    s.next_lane = (i + 1) % n;
    return {};
  }

  const GridLaunch& launch_;
  std::vector<Slot> slots_;
  std::size_t lds_size_ = 0;
};

}  // namespace

const Runtime* runtime_table() { return &kRuntime; }

Status run_grid(const GridLaunch& launch) {
  if (!launch.entry) return fail(Errc::internal, "no entry point", launch.kernel);
  if (launch.block_threads <= 0) return fail(Errc::invalid_input, "a block needs at least one thread", launch.kernel);
  if (launch.fibers == FiberSwitch::fast && !fast_fiber_switch_available())
    return fail(Errc::invalid_input, "the fast fiber switch is not available on this architecture; use ucontext");
  const long long total = (long long)launch.grid[0] * launch.grid[1] * launch.grid[2];
  if (total == 0) return {};
  std::atomic<long long> next{0};
  std::atomic<bool> stop{false};
  const int workers = int(std::clamp<long long>(launch.workers, 1, total));
  if (workers == 1) return Worker(launch).run(next, total, stop);

  std::vector<Status> results(static_cast<std::size_t>(workers));
  {
    std::vector<std::jthread> threads;
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] { results[std::size_t(w)] = Worker(launch).run(next, total, stop); });
  }
  for (auto& r : results)
    if (!r) return r;
  return {};
}

}  // namespace ft::emu
