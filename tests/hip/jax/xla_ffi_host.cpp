#include "tests/hip/jax/xla_ffi_host.hpp"

#include <algorithm>
#include <atomic>

// The opaque types of c_api.h, as this host defines them.
struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  std::string message;
};
struct XLA_FFI_ExecutionContext {
  void* stream;
  std::int32_t ordinal;
};

namespace ft::test::xla {
namespace {

std::atomic<int> g_live_errors{0};

XLA_FFI_Error* error_create(XLA_FFI_Error_Create_Args* a) {
  ++g_live_errors;
  return new XLA_FFI_Error{a->errc, a->message ? a->message : ""};
}

void error_message(XLA_FFI_Error_GetMessage_Args* a) { a->message = a->error->message.c_str(); }

void error_destroy(XLA_FFI_Error_Destroy_Args* a) {
  --g_live_errors;
  delete a->error;
}

// XLA refuses an argument struct older than the one it knows; so does this host.
XLA_FFI_Error* too_small(const char* what) {
  XLA_FFI_Error_Create_Args a{XLA_FFI_Error_Create_Args_STRUCT_SIZE, nullptr, what, XLA_FFI_Error_Code_INVALID_ARGUMENT};
  return error_create(&a);
}

XLA_FFI_Error* stream_get(XLA_FFI_Stream_Get_Args* a) {
  if (a->struct_size < XLA_FFI_Stream_Get_Args_STRUCT_SIZE) return too_small("XLA_FFI_Stream_Get_Args too small");
  a->stream = a->ctx->stream;
  return nullptr;
}

XLA_FFI_Error* ordinal_get(XLA_FFI_DeviceOrdinal_Get_Args* a) {
  if (a->struct_size < XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE)
    return too_small("XLA_FFI_DeviceOrdinal_Get_Args too small");
  a->device_ordinal = a->ctx->ordinal;
  return nullptr;
}

const XLA_FFI_Api* api() {
  static const XLA_FFI_Api instance = [] {
    XLA_FFI_Api a{};
    a.struct_size = XLA_FFI_Api_STRUCT_SIZE;
    a.api_version = {XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
    a.XLA_FFI_Error_Create = error_create;
    a.XLA_FFI_Error_GetMessage = error_message;
    a.XLA_FFI_Error_Destroy = error_destroy;
    a.XLA_FFI_Stream_Get = stream_get;
    a.XLA_FFI_DeviceOrdinal_Get = ordinal_get;
    return a;
  }();
  return &instance;
}

// The buffers of args or rets as the call frame points at them.
struct Buffers {
  std::vector<XLA_FFI_Buffer> buffers;
  std::vector<void*> pointers;
  explicit Buffers(const std::vector<Buffer>& in) : buffers(in.size()) {
    for (std::size_t i = 0; i < in.size(); ++i) {
      buffers[i] = {XLA_FFI_Buffer_STRUCT_SIZE, nullptr, in[i].dtype, in[i].data, std::int64_t(in[i].dims.size()),
                    const_cast<std::int64_t*>(in[i].dims.data())};
      pointers.push_back(&buffers[i]);
    }
  }
};

// The attributes, sorted by name as XLA hands them to a handler.
struct Attrs {
  std::vector<const Attr*> sorted;
  std::vector<XLA_FFI_ByteSpan> names, strings;
  std::vector<XLA_FFI_Scalar> scalars;
  std::vector<XLA_FFI_ByteSpan*> name_pointers;
  std::vector<void*> values;
  std::vector<XLA_FFI_AttrType> types;
  explicit Attrs(const std::vector<Attr>& in) : names(in.size()), strings(in.size()), scalars(in.size()) {
    for (const Attr& a : in) sorted.push_back(&a);
    std::sort(sorted.begin(), sorted.end(), [](const Attr* a, const Attr* b) { return a->name < b->name; });
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      names[i] = {sorted[i]->name.data(), sorted[i]->name.size()};
      name_pointers.push_back(&names[i]);
      if (const auto* s = std::get_if<std::string>(&sorted[i]->value)) {
        strings[i] = {s->data(), s->size()};
        values.push_back(&strings[i]);
        types.push_back(XLA_FFI_AttrType_STRING);
      } else {
        scalars[i] = {XLA_FFI_DataType_S32, const_cast<std::int32_t*>(&std::get<std::int32_t>(sorted[i]->value))};
        values.push_back(&scalars[i]);
        types.push_back(XLA_FFI_AttrType_SCALAR);
      }
    }
  }
};

}  // namespace

Outcome call(XLA_FFI_Handler* handler, const Call& c) {
  Buffers args(c.args), rets(c.rets);
  Attrs attrs(c.attrs);
  std::vector<XLA_FFI_ArgType> arg_types(c.args.size(), XLA_FFI_ArgType_BUFFER);
  std::vector<XLA_FFI_RetType> ret_types(c.rets.size(), XLA_FFI_RetType_BUFFER);
  XLA_FFI_ExecutionContext ctx{c.stream, c.ordinal};
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = api();
  frame.ctx = &ctx;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = {XLA_FFI_Args_STRUCT_SIZE, nullptr, std::int64_t(c.args.size()), arg_types.data(), args.pointers.data()};
  frame.rets = {XLA_FFI_Rets_STRUCT_SIZE, nullptr, std::int64_t(c.rets.size()), ret_types.data(), rets.pointers.data()};
  frame.attrs = {XLA_FFI_Attrs_STRUCT_SIZE, nullptr, std::int64_t(c.attrs.size()), attrs.types.data(),
                 attrs.name_pointers.data(), attrs.values.data()};
  XLA_FFI_Error* error = handler(&frame);
  if (!error) return {true, XLA_FFI_Error_Code_OK, ""};
  XLA_FFI_Error_GetMessage_Args get{XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE, nullptr, error, nullptr};
  api()->XLA_FFI_Error_GetMessage(&get);
  Outcome out{false, error->code, get.message ? get.message : ""};
  XLA_FFI_Error_Destroy_Args destroy{XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, nullptr, error};
  api()->XLA_FFI_Error_Destroy(&destroy);
  return out;
}

int live_errors() { return g_live_errors.load(); }

}  // namespace ft::test::xla
