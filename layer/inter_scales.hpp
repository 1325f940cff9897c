#pragma once
// The host's view of the fp8 intermediate's scale rule (group or row) and the
// quantise steps' row flag, taken from the device header itself
// (templates/ft/moe_inter_scales.hpp), as device_structs.hpp does for MoeArgs.
#include "templates/ft/moe_inter_scales.hpp"
