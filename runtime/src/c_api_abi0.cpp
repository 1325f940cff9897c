// The launch calls of the headers before ABI 1 (tests/abi/headers/v1..v6):
// ft_plan_launch, ft_plan_launch_checked and ft_plan_reference without the
// size of the caller's ft_layer_buffers. Those headers appended fields to the
// struct without a size (13 pointers in the first, 21 in the last), so a
// program built against one of them passes a struct whose length the library
// cannot know; these read the 13 pointers every one of them had, and nothing
// past them. This file cannot include flytune_runtime.h: its inline
// ft_plan_launch (which passes the size) has these symbols' names.
#include <cstddef>
#include <cstdint>

struct ft_plan;
struct ft_layer_buffers;  // flytune_runtime.h's; only its first 13 pointers are read here

extern "C" {

int ft_plan_launch_sized(const ft_plan* plan, const ft_layer_buffers* buffers, std::size_t buffers_size, void* stream);
int ft_plan_launch_checked_sized(const ft_plan* plan, const ft_layer_buffers* buffers, std::size_t buffers_size, void* stream,
                                 std::int32_t* bad_ids_out);
int ft_plan_reference_sized(const ft_plan* plan, const ft_layer_buffers* buffers, std::size_t buffers_size, void* y_ref,
                            void* stream);

namespace {
constexpr std::size_t kFirstReleaseBytes = 13 * sizeof(void*);  // x .. y
}

int ft_plan_launch(const ft_plan* plan, const ft_layer_buffers* buffers, void* stream) {
  return ft_plan_launch_sized(plan, buffers, kFirstReleaseBytes, stream);
}

int ft_plan_launch_checked(const ft_plan* plan, const ft_layer_buffers* buffers, void* stream, std::int32_t* bad_ids_out) {
  return ft_plan_launch_checked_sized(plan, buffers, kFirstReleaseBytes, stream, bad_ids_out);
}

int ft_plan_reference(const ft_plan* plan, const ft_layer_buffers* buffers, void* y_ref, void* stream) {
  return ft_plan_reference_sized(plan, buffers, kFirstReleaseBytes, y_ref, stream);
}

}  // extern "C"
