// Tensor-map copies on the emulator (tests/emu/tma_test.cpp; templates/ft/
// tensor_map.hpp, the ports' tensor_load_2d / tensor_store_2d). The box sits
// at `box_at` bytes into the block's shared memory, an mbarrier at 0. The
// arguments are FT_GRID_CONSTANT: the map is read where the launch put it.
#include "ft/kernels.hpp"

struct TmaProbeArgs {
  ft::TensorMap map;
  unsigned char* out;       // load: the box's bytes as they landed
  const unsigned char* in;  // store: the bytes placed in shared memory, then stored through the map
  int col, row;             // the box's first element in the matrix (may be outside it)
  int box_bytes;            // bytes the load expects (the mbarrier's expect_tx) and the box holds
  int box_at;               // the box's shared address: 1024 aligned, or not (a fault for a swizzle)
};

// One thread issues the load; every thread waits for the mbarrier's phase, then copies the box out.
FT_KERNEL(128, ft_probe_tma_load)(FT_GRID_CONSTANT TmaProbeArgs a) {
  unsigned char* lds = ft::shared_memory();
  ft::u64* bar = reinterpret_cast<ft::u64*>(lds);
  unsigned char* box = lds + a.box_at;
  if (ft::thread_index() == 0) {
    ft::mbarrier_init(bar, 1);
    ft::mbarrier_arrive_expect_tx(bar, ft::u32(a.box_bytes));
    ft::tensor_load_2d(box, &a.map, a.col, a.row, bar);
  }
  ft::barrier();
  ft::mbarrier_wait(bar, 0);
  for (int i = ft::thread_index(); i < a.box_bytes; i += 128) a.out[i] = box[i];
}

// Every thread writes its share of the box; after the fence and the barrier one thread stores it.
FT_KERNEL(128, ft_probe_tma_store)(FT_GRID_CONSTANT TmaProbeArgs a) {
  unsigned char* box = ft::shared_memory() + a.box_at;
  for (int i = ft::thread_index(); i < a.box_bytes; i += 128) box[i] = a.in[i];
  ft::fence_async_proxy();
  ft::barrier();
  if (ft::thread_index() == 0) {
    ft::tensor_store_2d(&a.map, a.col, a.row, box);
    ft::tensor_store_commit();
    ft::tensor_store_wait_read<0>();
  }
}
