#pragma once
// KernelSource lives in the generator (the emitter produces it); compilers consume it.
#include "generator/kernel_source.hpp"
