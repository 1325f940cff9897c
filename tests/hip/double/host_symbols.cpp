// Linked into each test program that opens the HIP test double: the double
// takes flytune's libraries from the program that opens it (the program
// exports its symbols), and these references keep the archive members it
// calls linked in, whether or not the program's own tests call them.
#include "compile/analyze/amdgpu_metadata.hpp"
#include "emulate/emu_device.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/space.hpp"

extern const void* const ft_hip_double_keep[];
__attribute__((used)) const void* const ft_hip_double_keep[] = {
    reinterpret_cast<const void*>(&ft::emu::EmuDevice::create),
    reinterpret_cast<const void*>(&ft::enumerate_space),
    reinterpret_cast<const void*>(&ft::backward_space),  // backward_gemm.o: the backward's names and units
    reinterpret_cast<const void*>(&ft::read_amdgpu_code_object_metadata),
};
