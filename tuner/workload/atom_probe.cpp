#include "tuner/workload/atom_probe.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tuner/layer/device_buffer.hpp"
#include "tuner/workload/half.hpp"
#include "tuner/workload/workload.hpp"

namespace ft {

AtomProbeInputs make_atom_probe_inputs(const AtomInfo& atom, std::uint64_t seed, bool exact) {
  AtomProbeInputs in;
  in.m = atom.m;
  in.n = atom.warpgroup() ? kWgmmaProbeN : atom.n;
  in.k = atom.k;
  in.dtype = atom.dtype;
  auto value = [&](std::uint64_t stream, std::size_t i, float range) {
    const float v = random_normal(seed * 4 + stream, i);
    return exact ? std::clamp(std::nearbyint(v * range / 2.0f), -range, range) : v;
  };
  in.a.resize(std::size_t(in.m * in.k));
  in.b.resize(std::size_t(in.n * in.k));
  in.c_in.resize(std::size_t(in.m * in.n));
  for (std::size_t i = 0; i < in.a.size(); ++i) in.a[i] = f32_to_half(in.dtype, value(1, i, 3.0f));
  for (std::size_t i = 0; i < in.b.size(); ++i) in.b[i] = f32_to_half(in.dtype, value(2, i, 3.0f));
  for (std::size_t i = 0; i < in.c_in.size(); ++i) in.c_in[i] = value(3, i, 8.0f);
  return in;
}

std::vector<float> atom_probe_expected(const AtomProbeInputs& in) {
  std::vector<float> c = in.c_in;
  for (int r = 0; r < in.m; ++r)
    for (int col = 0; col < in.n; ++col) {
      float acc = c[std::size_t(r * in.n + col)];
      for (int kk = 0; kk < in.k; ++kk)
        acc += half_to_f32(in.dtype, in.a[std::size_t(r * in.k + kk)]) * half_to_f32(in.dtype, in.b[std::size_t(col * in.k + kk)]);
      c[std::size_t(r * in.n + col)] = acc;
    }
  return c;
}

std::string atom_probe_entry(const AtomInfo& atom) { return fmt::format("ft_probe_{}", atom.id); }

Result<std::vector<float>> run_atom_probe(Device& d, FunctionHandle probe, const AtomInfo& atom, const AtomProbeInputs& in) {
  struct Args {
    std::uint64_t a, b, c_in, c_out;
  };
  DeviceBuffer a = FT_TRY(DeviceBuffer::allocate(d, in.a.size() * 2));
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(d, in.b.size() * 2));
  DeviceBuffer c_in = FT_TRY(DeviceBuffer::allocate(d, in.c_in.size() * 4));
  DeviceBuffer c_out = FT_TRY(DeviceBuffer::allocate(d, in.c_in.size() * 4));
  FT_CHECK(d.copy_to_device(a.ptr(), in.a.data(), in.a.size() * 2));
  FT_CHECK(d.copy_to_device(b.ptr(), in.b.data(), in.b.size() * 2));
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

}  // namespace ft
