#pragma once
// XLA's side of the FFI C ABI (jaxlib's xla/ffi/api/c_api.h), as small as the
// flytune handlers need: an XLA_FFI_Api whose entries are those the handlers'
// decoding and error paths call (errors: create, message, destroy; the
// platform stream; the device ordinal), an execution context holding the
// stream and ordinal of one call, and a call frame built from typed buffers
// and attributes the way XLA builds it (execute stage, attributes sorted by
// name). No ROCm jaxlib exists here, so this is how the hip tests call the
// JAX ROCm target's handler symbols on the HIP test double.
//
// The Api's other entries (handler and type registration, state, device
// memory, thread pool, futures, run id) are null: the flytune handlers call
// none of them, and a call of one would crash the test rather than pass.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace ft::test::xla {

struct Buffer {
  XLA_FFI_DataType dtype = XLA_FFI_DataType_INVALID;
  void* data = nullptr;
  std::vector<std::int64_t> dims;
};

struct Attr {
  std::string name;
  std::variant<std::string, std::int32_t> value;  // a string, or an s32 scalar
};

struct Call {
  std::vector<Buffer> args, rets;
  std::vector<Attr> attrs;
  void* stream = nullptr;   // what XLA_FFI_Stream_Get returns (a hipStream_t on ROCm)
  std::int32_t ordinal = 0;  // what XLA_FFI_DeviceOrdinal_Get returns
};

// What the handler returned: ok, or its error's code and message as XLA reads
// them through the Api (the error is destroyed afterwards).
struct Outcome {
  bool ok = false;
  XLA_FFI_Error_Code code = XLA_FFI_Error_Code_OK;
  std::string message;
};

Outcome call(XLA_FFI_Handler* handler, const Call& c);

// Errors the Api created and nobody destroyed yet (0 after every call: the
// handler's decoding destroys those it reads, call() the one returned).
int live_errors();

}  // namespace ft::test::xla
