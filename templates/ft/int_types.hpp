#pragma once
// Fixed-width integer names every flavour uses (no <cstdint> in freestanding
// HIP or NVRTC builds).
namespace ft {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using i32 = int;
using u64 = unsigned long long;
using i64 = long long;

}  // namespace ft
