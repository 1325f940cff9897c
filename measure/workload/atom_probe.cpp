#include "measure/workload/atom_probe.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "generator/device_facts.hpp"
#include "device/device_buffer.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

// One element of type e at p, through the kernels' own conversions.
float element_to_f32(Elem e, const std::uint8_t* p) {
  if (elem_bytes(e) == 1) return e == Elem::e4m3 ? e4m3_to_f32(*p) : e4m3fnuz_to_f32(*p);
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return e == Elem::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void store_element(Elem e, float v, std::uint8_t* p) {
  switch (e) {
    case Elem::e4m3: *p = f32_to_e4m3(v); return;
    case Elem::e4m3fnuz: *p = f32_to_e4m3fnuz(v); return;
    case Elem::bf16:
    case Elem::f16: {
      const std::uint16_t h = e == Elem::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(p, &h, 2);
      return;
    }
  }
}

float fp8_max(Elem e) { return e == Elem::e4m3 ? 448.0f : 240.0f; }

// The f32 value element i of operand `stream` (1: A, 2: B) is made from.
float operand_value(Elem e, std::uint64_t seed, std::uint64_t stream, std::size_t i, bool exact) {
  const float v = random_normal(seed * 4 + stream, i);
  if (!is_fp8(e)) return exact ? std::clamp(std::nearbyint(v * 1.5f), -3.0f, 3.0f) : v;
  const float sign = random_normal((seed + 1000) * 4 + stream, i) < 0 ? -1.0f : 1.0f;
  if (exact) {
    // Integers in [-3, 3]; A also +-max (saturated from 4 max; at most 4 in a row of
    // 32) and -0 (a +0 on fnuz). With B within 3, |sum| <= 4 * 3 * 448 + 28 * 9 + 8
    // < 2^13: exact in fp32, and within the ~14 bits Hopper's fp8 tensor cores are
    // reported to keep while accumulating (DeepSeek-V3 report), so exact there too.
    if (stream == 1 && i % 9 == 4) return sign * 4.0f * fp8_max(e);
    if (stream == 1 && i % 9 == 7) return -0.0f;
    return std::clamp(std::nearbyint(v * 1.5f), -3.0f, 3.0f);
  }
  if (i % 11 == 3) return sign * 4.0f * fp8_max(e);     // saturates to +-max
  if (i % 7 == 5) return v * std::ldexp(1.0f, -9);       // subnormal range
  return v * fp8_max(e) / 4.0f;
}

}  // namespace

float AtomProbeInputs::a_at(int row, int kk) const {
  return element_to_f32(operand, a.data() + std::size_t(row * k + kk) * std::size_t(elem_bytes(operand)));
}
float AtomProbeInputs::b_at(int col, int kk) const {
  return element_to_f32(operand, b.data() + std::size_t(col * k + kk) * std::size_t(elem_bytes(operand)));
}

AtomProbeInputs make_atom_probe_inputs(const AtomInfo& atom, std::uint64_t seed, bool exact) {
  AtomProbeInputs in;
  in.m = atom.m;
  in.n = atom.warpgroup() ? kWgmmaProbeN : atom.n;
  in.k = atom.k;
  in.operand = atom.operand;
  const std::size_t bytes = std::size_t(elem_bytes(in.operand));
  in.a.resize(std::size_t(in.m * in.k) * bytes);
  in.b.resize(std::size_t(in.n * in.k) * bytes);
  in.c_in.resize(std::size_t(in.m * in.n));
  for (std::size_t i = 0; i < in.a.size() / bytes; ++i)
    store_element(in.operand, operand_value(in.operand, seed, 1, i, exact), in.a.data() + i * bytes);
  for (std::size_t i = 0; i < in.b.size() / bytes; ++i)
    store_element(in.operand, operand_value(in.operand, seed, 2, i, exact), in.b.data() + i * bytes);
  for (std::size_t i = 0; i < in.c_in.size(); ++i) {
    const float v = random_normal(seed * 4 + 3, i);
    in.c_in[i] = exact ? std::clamp(std::nearbyint(v * 4.0f), -8.0f, 8.0f) : v;
  }
  return in;
}

std::vector<float> atom_probe_expected(const AtomProbeInputs& in) {
  std::vector<float> c = in.c_in;
  for (int r = 0; r < in.m; ++r)
    for (int col = 0; col < in.n; ++col) {
      float acc = c[std::size_t(r * in.n + col)];
      for (int kk = 0; kk < in.k; ++kk) acc += in.a_at(r, kk) * in.b_at(col, kk);
      c[std::size_t(r * in.n + col)] = acc;
    }
  return c;
}

std::string atom_probe_entry(const AtomInfo& atom) { return fmt::format("ft_probe_{}", atom.id); }

Result<std::vector<float>> run_atom_probe(Device& d, FunctionHandle probe, const AtomInfo& atom, const AtomProbeInputs& in) {
  struct Args {
    std::uint64_t a, b, c_in, c_out;
  };
  DeviceBuffer a = FT_TRY(DeviceBuffer::allocate(d, in.a.size()));
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(d, in.b.size()));
  DeviceBuffer c_in = FT_TRY(DeviceBuffer::allocate(d, in.c_in.size() * 4));
  DeviceBuffer c_out = FT_TRY(DeviceBuffer::allocate(d, in.c_in.size() * 4));
  FT_CHECK(d.copy_to_device(a.ptr(), in.a.data(), in.a.size()));
  FT_CHECK(d.copy_to_device(b.ptr(), in.b.data(), in.b.size()));
  FT_CHECK(d.copy_to_device(c_in.ptr(), in.c_in.data(), in.c_in.size() * 4));
  FT_CHECK(d.memset_u32(c_out.ptr(), 0xffffffffu, in.c_in.size()));  // NaN: unwritten outputs show
  const Args args{a.ptr(), b.ptr(), c_in.ptr(), c_out.ptr()};
  // A warpgroup atom runs on 128 threads and reads its operands from shared memory.
  const unsigned threads = atom.warpgroup() ? 128u : unsigned(atom.lanes);
  const int shared = atom.warpgroup() ? kWgmmaProbeSharedBytes : 0;
  if (shared > 0) FT_CHECK(d.set_dynamic_shared(probe, shared));
  FT_CHECK(d.launch(probe, Dim3{1, 1, 1}, Dim3{threads, 1, 1}, shared, {}, &args, sizeof args));
  std::vector<float> c(in.c_in.size());
  FT_CHECK(d.copy_to_host(c.data(), c_out.ptr(), c.size() * 4));
  FT_CHECK(d.synchronize());
  return c;
}

double fraction_differing(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return 1.0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
  return double(differ) / double(want.size());
}

}  // namespace ft
