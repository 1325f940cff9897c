#pragma once
// The static scale of an fp8 tensor held on a Device, as a calibration pass
// takes it (bench/triton_moe_fp8.py calibrate_h_scale): the absolute max of
// its fp32 values over the format's max (numeric.hpp's fp8_scale_of: an
// all-zero tensor takes 1). The search's workloads (measure/layer_bench) and
// check-export (runtime/check) calibrate a static-scale layer's intermediate
// scale with it from the reference intermediate; the host workloads use the
// same rule on the CPU (measure/workload/reference.hpp calibrated_inter_scale).
#include <cstddef>

#include "device/device.hpp"
#include "generator/device_facts.hpp"  // ft::Elem

namespace ft {

// `count` fp32 values at `values`, read back in chunks of at most 16 MiB.
Result<float> static_scale_of(Device& d, DevicePtr values, std::size_t count, Elem format);

}  // namespace ft
