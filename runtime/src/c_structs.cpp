// The caller's C structs read by their size (c_structs.hpp).
#include "runtime/src/c_structs.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace ft::rt {
namespace {

DevicePtr ptr(const void* p) { return DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }

// The sizes of the caller's ft_layer_buffers this library reads (flytune_runtime.h):
// the first release's 13 pointers at least, at most a page.
constexpr std::size_t kFirstBuffersBytes = 13 * sizeof(void*);
constexpr std::size_t kMaxBuffersBytes = 4096;
static_assert(offsetof(ft_layer_buffers, w1_tiled) == kFirstBuffersBytes, "the first release's fields come first");

// A caller's struct S of `size` bytes (`name`: its C name): exactly those
// bytes are read, the fields beyond them are null. At least `first` bytes (the
// fields of its first release); bytes beyond the fields this library knows
// must be zero (a newer caller's field that this library would ignore).
template <class S>
Result<S> sized_struct(const S* given, std::size_t size, std::size_t first, const char* name) {
  if (size < first || size > kMaxBuffersBytes || size % sizeof(void*) != 0)
    return std::unexpected(Error{
        Errc::usage,
        std::string(name) + " of " + std::to_string(size) + " bytes: not a size of this struct (a multiple of " +
            std::to_string(sizeof(void*)) + " from " + std::to_string(first) + " to " + std::to_string(kMaxBuffersBytes) +
            "; pass sizeof(" + name + "))",
        {}});
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (std::size_t i = sizeof(S); i < size; ++i)
    if (bytes[i] != 0)
      return std::unexpected(Error{
          Errc::usage,
          std::string(name) + " of " + std::to_string(size) + " bytes sets a field at byte " + std::to_string(i) +
              " that this library (ABI " + std::to_string(FT_RUNTIME_ABI_MAJOR) + "." + std::to_string(FT_RUNTIME_ABI_MINOR) +
              ", " + std::to_string(sizeof(S)) + " bytes) does not know: use a newer libflytune_runtime",
          {}});
  S out{};
  std::memcpy(&out, given, std::min(size, sizeof out));
  return out;
}

// A caller's C struct (ft_layer_buffers, ft_layer_grads) as the runtime's
// (LayerBuffers, GradBuffers): each member named as a row of layer/buffers.def
// in both, and the workspace.
template <class Buffers, class C>
Buffers by_row_names(const C& c) {
  Buffers out{};
#define FT_BUFFER(name, member, pointee, place, meaning, size) \
  if constexpr (requires(const C& v, const Buffers& o) { v.name; o.name; }) out.name = ptr(c.name);
#include "layer/buffers.def"
#undef FT_BUFFER
  out.workspace = ptr(c.workspace);
  out.workspace_bytes = c.workspace_bytes;
  return out;
}
// Each pointer of a C struct but its workspace is one of its runtime struct's
// (the C structs' members are pointers and a size_t, 8 bytes each).
static_assert(sizeof(void*) == sizeof(std::size_t));
static_assert(rows_named_in<ft_layer_buffers>() == sizeof(ft_layer_buffers) / sizeof(void*) - 2 &&
                  rows_named_in<ft_layer_buffers, LayerBuffers>() == rows_named_in<LayerBuffers>(),
              "ft_layer_buffers and LayerBuffers name the same rows of layer/buffers.def");
// ft_layer_grads: all but d_topk_weights, which is Buf::d_weights.
static_assert(rows_named_in<ft_layer_grads>() == sizeof(ft_layer_grads) / sizeof(void*) - 3 &&
                  rows_named_in<ft_layer_grads, GradBuffers>() + 1 == rows_named_in<GradBuffers>(),
              "ft_layer_grads and GradBuffers name the same rows of layer/buffers.def, but d_topk_weights");

}  // namespace

// The caller's ft_layer_buffers of `size` bytes (sized_struct).
Result<LayerBuffers> buffers_of(const ft_layer_buffers* buffers, std::size_t size) {
  return by_row_names<LayerBuffers>(FT_TRY(sized_struct(buffers, size, kFirstBuffersBytes, "ft_layer_buffers")));
}

// The first release of ft_layer_grads: every field through bad_ids (ABI 1.2 appended dw1_16, dw2_16;
// a caller of the earlier header passes 120 bytes, and they read as NULL: the fp32 outputs).
constexpr std::size_t kFirstGradsBytes = offsetof(ft_layer_grads, dw1_16);
static_assert(kFirstGradsBytes == 120, "ft_layer_grads' first release: 15 fields; append new ones");
static_assert(sizeof(ft_layer_grads) == 136, "ft_layer_grads of ABI 1.2: 17 fields");

Result<GradBuffers> grads_of(const ft_layer_grads* grads, std::size_t size) {
  const ft_layer_grads g = FT_TRY(sized_struct(grads, size, kFirstGradsBytes, "ft_layer_grads"));
  GradBuffers out = by_row_names<GradBuffers>(g);
  out.d_weights = ptr(g.d_topk_weights);
  return out;
}

Status with_size_note(Status s, std::size_t size) {
  if (s || s.error().code != Errc::usage || size >= sizeof(ft_layer_buffers)) return s;
  Error e = s.error();
  e.message += " (the caller passed ft_layer_buffers of " + std::to_string(size / sizeof(void*)) +
               " fields: a program built against an earlier flytune_runtime.h; rebuild it against this one to pass the others)";
  return std::unexpected(std::move(e));
}

}  // namespace ft::rt
