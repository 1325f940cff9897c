#include "tests/hip/double/emulated_gpu.hpp"

#include <elf.h>

#include <algorithm>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include <hip/hip_runtime_api.h>

#include "compile/emu_compile.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "generator/problem.hpp"
#include "generator/space.hpp"

namespace ft::hip_double {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kGiB = std::size_t(1) << 30;

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto at = text.find(sep);
    if (at != 0) out.emplace_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

// "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" -> "gfx942".
std::string target_of(std::string_view triple) {
  const auto at = triple.rfind("--");
  std::string_view cpu = at == std::string_view::npos ? triple : triple.substr(at + 2);
  return std::string(cpu.substr(0, cpu.find(':')));
}

// The stage variant named `name`, from the spaces a search could have built it in.
Result<Variant> variant_named(const Target& target, const std::string& name) {
  const std::vector<std::string> parts = split(name, '_');
  if (parts.size() < 5 || parts[0] != "ft" || parts[1] != target.name)
    return fail(Errc::not_found, fmt::format("'{}' is not a flytune stage kernel of {}", name, target.name));
  const DType dtype = FT_TRY(parse_dtype(parts[3]));
  std::vector<SpaceOptions> spaces;
  if (const char* hint = std::getenv("FLYTUNE_HIP_DOUBLE_SPACE"); hint && *hint)
    spaces.push_back(FT_TRY(SpaceOptions::parse(hint)));
  spaces.push_back(SpaceOptions::small());
  spaces.push_back(SpaceOptions{});
  spaces.push_back(SpaceOptions::wide());
  std::vector<Scales> scales{Scales::none};
  if (dtype == DType::e4m3) scales = {Scales::per_tensor, Scales::per_token, Scales::block128};
  Problem problem = FT_TRY(problem_from_preset("tiny"));
  problem.dtype = dtype;
  for (const SpaceOptions& space : spaces)
    for (Scales s : scales) {
      problem.scales = s;
      const Space found = enumerate_space(target, problem, space);
      for (const Variant& v : found.legal)
        if (v.name() == name) return v;
      for (const Rejection& r : found.rejected)
        if (r.variant.name() == name) return r.variant;
    }
  return fail(Errc::not_found, fmt::format("no variant named {} in the default, small or wide space (set "
                                           "FLYTUNE_HIP_DOUBLE_SPACE to the search's --space)", name));
}

// The backward GEMM configuration named `name` (kgrouped, dgrad2, dgrad1),
// from the presets' spaces a backward search could have built it in; nullopt
// when the name is not a backward GEMM's.
Result<std::optional<BackwardVariant>> backward_named(const Target& target, const std::string& name) {
  const std::vector<std::string> parts = split(name, '_');
  std::optional<BackwardOp> op;
  for (BackwardOp o : {BackwardOp::wgrad, BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter})
    if (parts.size() > 3 && parts[2] == to_string(o)) op = o;
  if (!op) return std::nullopt;
  const DType dtype = FT_TRY(parse_dtype(parts[3]));
  for (Preset preset : {Preset::small, Preset::default_, Preset::wide})
    for (const BackwardVariant& v : backward_space(target, dtype, preset, *op))
      if (v.name() == name) return v;
  return fail(Errc::not_found, fmt::format("no backward configuration named {} in the small, default or wide space", name));
}

}  // namespace

Result<std::size_t> elf_extent(const std::byte* image) {
  Elf64_Ehdr h;
  std::memcpy(&h, image, sizeof h);
  if (std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || h.e_ident[EI_CLASS] != ELFCLASS64)
    return fail(Errc::invalid_input, "the image is not a 64-bit ELF code object");
  if (h.e_machine != EM_AMDGPU) return fail(Errc::invalid_input, fmt::format("ELF machine {} is not AMDGPU", h.e_machine));
  std::size_t end = std::size_t(h.e_shoff) + std::size_t(h.e_shnum) * h.e_shentsize;
  end = std::max(end, std::size_t(h.e_phoff) + std::size_t(h.e_phnum) * h.e_phentsize);
  for (unsigned i = 0; i < h.e_shnum; ++i) {
    Elf64_Shdr s;
    std::memcpy(&s, image + h.e_shoff + std::size_t(i) * h.e_shentsize, sizeof s);
    if (s.sh_type != SHT_NOBITS) end = std::max(end, std::size_t(s.sh_offset + s.sh_size));
  }
  return end;
}

// One product per target the double emulates, with the public figures of the
// part (MI300X: 304 CUs, 2100 MHz, 192 GB HBM3, 4 MB L2 per XCD; MI355X: 256
// CUs, 2400 MHz, 288 GB HBM3E). They are a product's, not the ISA's (gfx942
// is also the MI300A and MI325X), so they are not targets.def's; the ISA's
// facts -- LDS, wave size, block limit -- come from the target's row there.
struct Part {
  std::string_view target, product, gcn_arch_name;
  int compute_units, clock_mhz, memory_gib, l2_mib;
};
constexpr Part kParts[] = {
    {"gfx942", "MI300X", "gfx942:sramecc+:xnack-", 304, 2100, 192, 4},
    {"gfx950", "MI355X", "gfx950:sramecc+:xnack-", 256, 2400, 288, 4},
};

Result<GpuModel> gpu_model(std::string_view target) {
  for (const Part& p : kParts) {
    if (p.target != target) continue;
    GpuModel m;
    m.target = find_target(target);
    m.name = fmt::format("AMD Instinct {} (emulated by the flytune HIP double)", p.product);
    m.gcn_arch_name = std::string(p.gcn_arch_name);
    m.compute_units = p.compute_units;
    m.clock_khz = p.clock_mhz * 1000;
    m.memory_bytes = std::size_t(p.memory_gib) * kGiB;
    m.l2_bytes = std::size_t(p.l2_mib) * kMiB;
    return m;
  }
  return fail(Errc::invalid_input, fmt::format("the HIP double has no GPU of target '{}' (gfx942, gfx950)", target));
}

Result<KernelSource> emulator_source(const Target& target, const std::vector<std::string>& kernel_names) {
  const std::set<std::string> wanted(kernel_names.begin(), kernel_names.end());
  for (DType d : {DType::bf16, DType::f16, DType::e4m3}) {
    KernelSource support = emit_support(target, d);
    if (std::set<std::string>(support.entry_points.begin(), support.entry_points.end()) == wanted) return support;
  }
  if (kernel_names.size() != 1)
    return fail(Errc::not_found, fmt::format("the code object's {} kernels are no support unit of {}", kernel_names.size(),
                                             target.name));
  if (const auto backward = FT_TRY(backward_named(target, kernel_names.front()))) return emit_backward(*backward);
  const Variant v = FT_TRY(variant_named(target, kernel_names.front()));
  return emit_variant(v);
}

Result<std::vector<std::byte>> kernarg_bytes(const Kernel& k, const LaunchRequest& launch) {
  const AmdKernelMetadata& m = k.meta;
  // Every argument, hidden ones included, inside the segment and aligned to it.
  int explicit_end = 0;
  for (const AmdKernelArg& a : m.args) {
    if (a.offset < 0 || a.size <= 0 || a.offset + a.size > m.kernarg_segment_size)
      return fail(Errc::invalid_input, fmt::format("{}: argument {} [{}, +{}) lies outside the {}-byte kernarg segment",
                                                   m.name, a.value_kind, a.offset, a.size, m.kernarg_segment_size));
    if (!a.hidden()) explicit_end = std::max(explicit_end, a.offset + a.size);
  }
  if (m.kernarg_segment_align < 4 || m.kernarg_segment_size % 4 != 0)
    return fail(Errc::invalid_input, fmt::format("{}: kernarg segment of {} bytes, alignment {}", m.name,
                                                 m.kernarg_segment_size, m.kernarg_segment_align));
  // The emulated build takes the explicit part as one argument struct at offset 0.
  const bool one_struct = std::count_if(m.args.begin(), m.args.end(), [](const AmdKernelArg& a) { return !a.hidden(); }) == 1;
  if (!one_struct || m.args.front().offset != 0 || unsigned(explicit_end) != k.emu_args_size)
    return fail(Errc::invalid_input,
                fmt::format("{}: the code object's explicit arguments end at byte {} (first at offset {}), the host's "
                            "argument struct is {} bytes at offset 0: the layouts disagree",
                            m.name, explicit_end, m.args.empty() ? -1 : m.args.front().offset, k.emu_args_size));
  std::vector<std::byte> bytes(static_cast<std::size_t>(explicit_end));
  if (launch.extra) {
    void** e = launch.extra;
    if (e[0] != HIP_LAUNCH_PARAM_BUFFER_POINTER || e[2] != HIP_LAUNCH_PARAM_BUFFER_SIZE || e[4] != HIP_LAUNCH_PARAM_END)
      return fail(Errc::invalid_input, fmt::format("{}: extra is not BUFFER_POINTER, p, BUFFER_SIZE, &n, END", m.name));
    const std::size_t given = *static_cast<const std::size_t*>(e[3]);
    if (given != bytes.size())
      return fail(Errc::invalid_input, fmt::format("{}: the launch passes {} bytes of arguments, the code object's "
                                                   "explicit kernarg segment is {} bytes",
                                                   m.name, given, bytes.size()));
    std::memcpy(bytes.data(), e[1], bytes.size());
    return bytes;
  }
  if (!launch.kernel_params) return fail(Errc::invalid_input, fmt::format("{}: a launch without arguments", m.name));
  std::size_t i = 0;
  for (const AmdKernelArg& a : m.args)
    if (!a.hidden()) std::memcpy(bytes.data() + a.offset, launch.kernel_params[i++], std::size_t(a.size));
  return bytes;
}

Status check_launch_shape(const Kernel& k, const GpuModel& gpu, const LaunchRequest& launch) {
  const AmdKernelMetadata& m = k.meta;
  const long long threads = (long long)launch.block.x * launch.block.y * launch.block.z;
  if (threads <= 0 || threads > m.max_flat_workgroup_size)
    return fail(Errc::invalid_input, fmt::format("{}: a block of {} threads, the code object's maximum workgroup size is {}",
                                                 m.name, threads, m.max_flat_workgroup_size));
  if (launch.grid.x == 0 || launch.grid.y == 0 || launch.grid.z == 0)
    return fail(Errc::invalid_input, fmt::format("{}: an empty grid", m.name));
  const long long lds = (long long)m.group_segment_fixed_size + launch.dynamic_lds;
  if (launch.dynamic_lds < 0 || lds > gpu.target->lds_bytes)
    return fail(Errc::invalid_input, fmt::format("{}: {} bytes of LDS ({} static in the code object + {} dynamic), a "
                                                 "workgroup of {} has {}",
                                                 m.name, lds, m.group_segment_fixed_size, launch.dynamic_lds,
                                                 gpu.target->name, gpu.target->lds_bytes));
  return {};
}

Result<Double*> Double::get() {
  static std::mutex mu;
  static std::unique_ptr<Double> made;
  static std::optional<Error> failed;
  std::lock_guard lock(mu);
  if (made) return made.get();
  if (failed) return std::unexpected(*failed);
  auto d = std::make_unique<Double>();
  const char* env = std::getenv("FLYTUNE_HIP_DOUBLE_GPUS");
  for (const std::string& t : split(env && *env ? env : "gfx942,gfx950", ',')) {
    auto model = gpu_model(t);
    if (!model) return std::unexpected(*(failed = model.error()));
    auto gpu = std::make_unique<Gpu>();
    gpu->model = std::move(*model);
    emu::EmuDeviceOptions options;
    options.index = int(d->gpus_.size());
    auto emu = emu::EmuDevice::create(*gpu->model.target, options);
    if (!emu) return std::unexpected(*(failed = emu.error()));
    gpu->emu = std::move(*emu);
    d->gpus_.push_back(std::move(gpu));
  }
  made = std::move(d);
  return made.get();
}

Result<Module*> Double::load(int gpu_index, std::span<const std::byte> image) {
  Gpu& gpu = this->gpu(gpu_index);
  const AmdCodeObjectMetadata meta = FT_TRY(read_amdgpu_code_object_metadata(image));
  const std::string target = target_of(meta.target);
  if (target != gpu.model.target->name)
    return fail(Errc::invalid_input, fmt::format("a code object for {} ('{}') on a {} GPU", target, meta.target,
                                                 gpu.model.target->name));
  std::vector<std::string> names;
  for (const AmdKernelMetadata& k : meta.kernels) {
    if (k.wavefront_size != gpu.model.target->wave_size)
      return fail(Errc::invalid_input, fmt::format("{}: wave size {}, {} runs waves of {}", k.name, k.wavefront_size,
                                                   target, gpu.model.target->wave_size));
    names.push_back(k.name);
  }
  const KernelSource source = FT_TRY(emulator_source(*gpu.model.target, names));
  const emu::EmuLibrary lib = FT_TRY(emu::compile_emulated(source, *gpu.model.target));
  auto m = std::make_unique<Module>();
  m->gpu = gpu_index;
  m->emu = FT_TRY(gpu.emu->load_library(lib));
  for (const AmdKernelMetadata& k : meta.kernels) {
    Kernel kernel;
    kernel.meta = k;
    kernel.emu = FT_TRY(gpu.emu->function(m->emu, k.name));
    kernel.emu_args_size = FT_TRY(gpu.emu->args_size(kernel.emu));
    m->kernels.emplace(k.name, std::move(kernel));
  }
  std::lock_guard lock(mutex_);
  modules_.push_back(std::move(m));
  return modules_.back().get();
}

Status Double::unload(Module* m) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(modules_.begin(), modules_.end(), [&](const auto& p) { return p.get() == m; });
  if (it == modules_.end()) return fail(Errc::invalid_input, "unload of a module that is not loaded");
  FT_CHECK(gpu((*it)->gpu).emu->unload_module((*it)->emu));
  modules_.erase(it);
  return {};
}

bool Double::live(const Module* m) {
  std::lock_guard lock(mutex_);
  return std::any_of(modules_.begin(), modules_.end(), [&](const auto& p) { return p.get() == m; });
}

}  // namespace ft::hip_double
