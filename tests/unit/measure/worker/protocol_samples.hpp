#pragma once
// One message of every kind of the worker protocol, with no field at its
// default value (so a field lost in a round trip shows), for protocol_test.cpp
// and protocol_fuzz_test.cpp.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "generator/backward_gemm.hpp"
#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "generator/target.hpp"
#include "layer/operation.hpp"
#include "measure/worker/protocol.hpp"

namespace ft::test {

inline protocol::KernelRef sample_kernel(StageRole kind) {
  const Problem p = *problem_from_preset("tiny");
  const Variant v = *default_variant(*find_target("sm_90a"), p, kind);
  return {v, "/tmp/objects/" + v.name() + ".cubin", v.name()};
}

// The backward stages of every role (op::moe_backward's order), the first
// configuration of each GEMM's wide space on sm_90a bf16, no member at its default.
inline std::vector<protocol::GradKernelRef> sample_grad_stages() {
  const Target& t = *find_target("sm_90a");
  std::vector<protocol::GradKernelRef> out;
  for (const auto& [role, op] : {std::pair{Role::dgrad2, BackwardOp::dgrad_swiglu}, std::pair{Role::dgrad1, BackwardOp::dgrad_scatter},
                                 std::pair{Role::wgrad2, BackwardOp::wgrad}, std::pair{Role::wgrad1, BackwardOp::wgrad}}) {
    const BackwardVariant v = backward_space(t, DType::bf16, Preset::wide, op).back();
    out.push_back({role, v, "/tmp/objects/" + v.name() + ".cubin", v.name()});
  }
  return out;
}

inline protocol::ProgramKernels sample_layer() {
  return {&op::moe_forward(), {sample_kernel(StageRole::stage1), sample_kernel(StageRole::stage2)}, {}};
}
inline protocol::ProgramKernels sample_backward() { return {&op::moe_backward(), {}, sample_grad_stages()}; }

// In the order of the Request alternatives; the program requests twice (the
// forward's layer, then the backward's program).
inline std::vector<protocol::Request> sample_requests() {
  Problem p = *problem_from_preset("tiny");
  p.routing = *Routing::parse("zipf:1.5");
  protocol::TimeRequest time{sample_kernel(StageRole::stage1), 4, 17, false};
  protocol::TimeProgramRequest layer{sample_layer(), 2, 30, false, true};
  protocol::TimeProgramRequest backward{sample_backward(), 5, 40, false, false};
  return {protocol::DeviceRequest{},
          protocol::OpenRequest{p, "sm_90a", "/tmp/objects/support.cubin", 4096, &op::moe_backward()},
          protocol::InputsRequest{333, std::numeric_limits<std::uint64_t>::max(), 1},
          protocol::VerifyRequest{sample_kernel(StageRole::stage2)},
          time,
          protocol::VerifyProgramRequest{sample_layer()},
          layer,
          protocol::VerifyProgramRequest{sample_backward()},
          backward,
          protocol::TelemetryRequest{},
          protocol::FaultRequest{}};
}

inline Timing sample_timing(double t) { return {t, t * 0.9, t * 1.2, t * 0.8, 30}; }

// (the request answered, its answer): every Answer alternative at least once.
inline std::vector<std::pair<protocol::Request, protocol::Answer>> sample_answers() {
  const auto requests = sample_requests();
  DeviceInfo d{"cuda", 1, "NVIDIA H200", "sm_90a", 132, std::size_t(150) << 30, std::size_t(60) << 20, 232448,
               1980, "580.95.05", "13.0", "0000:3b:00.0"};
  protocol::TelemetryAnswer all{{1755, 2619, 41.5, 312.25}, ""};
  protocol::TelemetryAnswer none{{}, "NVML is not installed"};
  return {{requests[0], protocol::DeviceAnswer{protocol::kVersion, d}},
          {requests[1], protocol::Done{}},
          {requests[2], protocol::Done{}},
          {requests[3], protocol::VerifyAnswer{true, 1.25e-3, 3.5e-2, "rel L2 1.25e-03 (bound 8.0e-03)"}},
          {requests[4], sample_timing(12.5)},
          {requests[5], protocol::VerifyAnswer{false, 0.5, 7.25, "12 NaN/Inf elements of 4096, first at [0, 3]"}},
          {requests[6], ProgramTiming{sample_timing(50),
                                      {{"align", sample_timing(2)},
                                       {"stage1", sample_timing(20)},
                                       {"stage2", sample_timing(25)},
                                       {"reduce", sample_timing(3)}}}},
          {requests[7], protocol::VerifyAnswer{false, 0.25, 1.5, "dw1: rel L2 2.5e-01 (bound 8.0e-03)"}},
          {requests[8], ProgramTiming{sample_timing(480), {}}},
          {requests[9], all},
          {requests[9], none}};
}

}  // namespace ft::test
