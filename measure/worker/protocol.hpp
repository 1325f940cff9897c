#pragma once
// The measuring protocol: what the search asks of a measuring service
// (WorkerService, in a `flytune worker` process or in the search's own) and
// what it answers, as typed structs; their JSON encoding and decoding live in
// protocol.cpp and nowhere else (no field name of the protocol is spelled
// outside that file).
//
// On the wire (the worker's stdin/stdout) a message is one JSON object per
// line: a request {"op": <name>, ...}, an answer {"ok": true, ...} or a
// failure {"ok": false, "error": <message>, "code": <errc>}. Decoding never
// throws: a malformed or foreign message is an Errc::invalid_input error that
// says which message and field was wrong. Unknown fields are refused (a new
// field is a new protocol version).
//
// Versioned: the device request carries the searcher's kVersion and the
// device answer the worker's; either side refuses a mismatch with one line,
// so a worker binary of another build is never half understood.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/problem.hpp"
#include "generator/variant.hpp"
#include "device/device.hpp"
#include "device/telemetry.hpp"
#include "layer/operation.hpp"
#include "layer/program.hpp"
#include "measure/program_bench.hpp"
#include "measure/timing.hpp"

namespace ft::protocol {

// Bump on any change of a message's fields or meaning. 2: open names its
// operation; the backward's verify and time requests. 3: one verify and one
// time request of a program for every operation (verify_program,
// time_program), operations named by their registry row ("moe_forward").
inline constexpr int kVersion = 3;

// A compiled kernel for the service to load: the variant (opaque here: its
// to_json/from_json), the file of its code object and its entry symbol.
struct KernelRef {
  Variant variant;
  std::string code_object;
  std::string entry;
};

// A compiled backward GEMM for a role of the backward program (dgrad2,
// dgrad1, wgrad2, wgrad1; op::moe_backward's rows): its configuration, for the
// open problem's target, its code object's file and its entry symbol.
struct GradKernelRef {
  Role role = Role::dgrad2;
  BackwardVariant config;
  std::string code_object;
  std::string entry;
};

// Answers without a payload (open, inputs).
struct Done {};

// A verification's answer: the bench's ProgramCheck (passed, rel_l2, max_abs,
// the comparison in words: "rel L2 1.2e-03 (bound 8.0e-03), ...").
using VerifyAnswer = ProgramCheck;

struct DeviceAnswer {
  int protocol = kVersion;
  DeviceInfo device;
};

struct TelemetryAnswer {
  TelemetryReading reading;
  std::string unavailable;  // why nothing can be read, when nothing can
};

// Each request names its answer type.
struct DeviceRequest {
  using Answer = DeviceAnswer;
  int protocol = kVersion;
};
// The problem to measure, the target its kernels are built for, the support
// unit (align, reduce, reference, fill) and buffers for up to max_tokens (the
// backward's are sized per program run).
// Opened for one operation (op::operations()'s rows), it answers that
// operation's requests only: the stage requests and the programs of the
// forward's layer, or the programs of the backward.
struct OpenRequest {
  using Answer = Done;
  Problem problem;
  std::string target;
  std::string support;
  int max_tokens = 0;
  const op::Operation* operation = &op::moe_forward();
};
// Fresh X, W1, W2 (on the device, from seed) and routing (from seed, with
// empty_experts experts left without tokens) for `tokens` tokens; the
// backward's also dY and the forward's saved tensors, with their reference
// gradients (BackwardBench::set_inputs).
struct InputsRequest {
  using Answer = Done;
  int tokens = 0;
  std::uint64_t seed = 0;
  int empty_experts = 0;
};
struct VerifyRequest {
  using Answer = VerifyAnswer;
  KernelRef kernel;
};
struct TimeRequest {
  using Answer = Timing;
  KernelRef kernel;
  int warmup = 3;
  int reps = 20;
  bool flush_l2 = true;
};
// The kernels of an operation's program: a recipe of its roles (in the
// operation's role order, some or all) with each role's code object --
// the forward's stage variants (stage1, stage2: the whole layer), or the
// backward's GEMM configurations (dgrad2 .. wgrad1). The one that is not the
// operation's kind stays empty. A forward recipe of one stage is that stage
// alone, as the stage requests (verify, time) ask: the service answers those
// as such a program of the opened bench (measure/program_bench.hpp).
struct ProgramKernels {
  const op::Operation* operation = &op::moe_forward();
  std::vector<KernelRef> stages;     // a forward recipe's (LayerRecipe::stages)
  std::vector<GradKernelRef> grad;   // a backward recipe's (LayerRecipe::grad)
};
// The program checked against the operation's reference on the current
// inputs: the forward layer's Y against the reference kernels'; the backward's
// every buffer its roles write against the CPU backward (the worst of them).
struct VerifyProgramRequest {
  using Answer = VerifyAnswer;
  ProgramKernels program;
};
// The program timed as a whole (events around it, the L2 flushed before each
// repetition), with the parts its bench times alone. `graph`: replayed as a
// captured graph (the forward's; the backward refuses it).
struct TimeProgramRequest {
  using Answer = ProgramTiming;
  ProgramKernels program;
  int warmup = 3;
  int reps = 20;
  bool flush_l2 = true;
  bool graph = false;
};
struct TelemetryRequest {
  using Answer = TelemetryAnswer;
};
// A launch through an invalid device address (the crash-isolation tests):
// never answered with success.
struct FaultRequest {
  using Answer = Done;
};

using Request = std::variant<DeviceRequest, OpenRequest, InputsRequest, VerifyRequest, TimeRequest, VerifyProgramRequest,
                             TimeProgramRequest, TelemetryRequest, FaultRequest>;
using Answer = std::variant<Done, DeviceAnswer, VerifyAnswer, Timing, ProgramTiming, TelemetryAnswer>;

// The request's name on the wire ("verify", "time_program").
std::string_view op_name(const Request& request);

nlohmann::json encode(const Request& request);
Result<Request> decode_request(const nlohmann::json& message);

// A successful answer, and a failure (the error's description and code).
nlohmann::json encode(const Answer& answer);
nlohmann::json encode_failure(const Error& error);

// The answer to a request of type R: its payload, or the failure it carries
// as that Error (the code it names, the worker's message). A device answer
// of another protocol version (or of none) is refused here.
template <class A>
Result<A> decode_answer(const nlohmann::json& message);
// The same for whichever request was sent.
Result<Answer> decode_answer_to(const Request& sent, const nlohmann::json& message);
// Whether a message is a well-formed failure answer: a decoding error of an
// answer that is not one is the worker's fault, not the request's.
bool is_failure(const nlohmann::json& message);

// One message as one line (no newline inside; the newline not included), and back.
std::string to_line(const nlohmann::json& message);
Result<nlohmann::json> parse_line(std::string_view line);

// The Errc a failure's "code" names, and back.
std::string_view errc_name(Errc code);
std::optional<Errc> errc_from_name(std::string_view name);

}  // namespace ft::protocol
