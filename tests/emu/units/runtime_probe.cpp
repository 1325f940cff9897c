// Emulator runtime probes (tests/emu/runtime_test.cpp): LDS and barriers,
// barrier divergence, the wave exchange, global atomics. Emulation only.
#include "ft/kernels.hpp"

struct ProbeArgs {
  int* out;
  int n;     // threads per block the launch uses
  int mode;
  long long pad;
};

// Four rounds of: every thread writes its slot, barrier, reads its neighbour's.
// Without a working barrier (or with blocks sharing LDS) neighbours read stale values.
FT_KERNEL(1024, ft_probe_lds_rotate)(ProbeArgs a) {
  int* lds = reinterpret_cast<int*>(ft::shared_memory());
  const int tid = ft::thread_index(), n = a.n, b = ft::block_index_x() + 7 * ft::block_index_y();
  for (int r = 0; r < 4; ++r) {
    lds[tid] = b * 100000 + r * 1000 + tid;
    ft::barrier();
    a.out[(b * 4 + r) * n + tid] = lds[(tid + 1) % n];
    ft::barrier();
  }
}

// The upper half of the block returns before a barrier the lower half waits at.
FT_KERNEL(1024, ft_probe_divergent)(ProbeArgs a) {
  const int tid = ft::thread_index();
  if (tid >= a.n / 2) return;
  ft::barrier();
  a.out[tid] = 1;
}

// Every lane learns every lane's value of its wave; out = the sum and the first lane's value.
FT_KERNEL(1024, ft_probe_wave_sum)(ProbeArgs a) {
  const int tid = ft::thread_index();
  int mine[2] = {tid * 3 + 1, a.mode};
  int all[ft::kWaveSize][2];
  ft::emu::wave_all_gather<ft::kWaveSize>(mine, sizeof mine, all);
  int sum = 0;
  for (int l = 0; l < ft::kWaveSize; ++l) sum += all[l][0];
  a.out[2 * tid] = sum;
  a.out[2 * tid + 1] = all[0][0];
}

// Blocks on several threads add into one counter.
FT_KERNEL(256, ft_probe_atomic)(ProbeArgs a) { ft::atomic_add(a.out, 1); }

// Uses LDS without writing it first: reads the poison.
FT_KERNEL(64, ft_probe_lds_poison)(ProbeArgs a) { a.out[ft::thread_index()] = reinterpret_cast<int*>(ft::shared_memory())[0]; }

// Thread 0 hands a value per round to every other thread through a "full"
// mbarrier and waits on an "empty" one before overwriting it (the protocol of
// the warp-specialised Hopper GEMM). A wait that returned early reads a stale
// or poisoned value.
FT_KERNEL(256, ft_probe_mbarrier_handoff)(ProbeArgs a) {
  ft::u64* bars = reinterpret_cast<ft::u64*>(ft::shared_memory());  // [0] full, [1] empty
  int* data = reinterpret_cast<int*>(ft::shared_memory() + 64);
  const int tid = ft::thread_index(), n = a.n;
  if (tid == 0) {
    ft::mbarrier_init(&bars[0], 1);
    ft::mbarrier_init(&bars[1], n - 1);
  }
  ft::barrier();
  for (int r = 0; r < 3; ++r) {
    if (tid == 0) {
      if (r > 0) ft::mbarrier_wait(&bars[1], (r - 1) & 1);
      data[0] = 1000 + r;
      ft::mbarrier_arrive(&bars[0]);
    } else {
      ft::mbarrier_wait(&bars[0], r & 1);
      a.out[r * n + tid] = data[0];
      ft::mbarrier_arrive(&bars[1]);
    }
  }
}

// A wait whose phase can never complete (one arrival of the two expected).
FT_KERNEL(64, ft_probe_mbarrier_deadlock)(ProbeArgs a) {
  ft::u64* bar = reinterpret_cast<ft::u64*>(ft::shared_memory());
  ft::mbarrier_init(bar, 2);
  ft::mbarrier_arrive(bar);
  ft::mbarrier_wait(bar, 0);
  a.out[0] = 1;
}
