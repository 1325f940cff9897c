// The worker protocol (measure/worker/protocol.hpp): every request and answer
// survives encoding, a line and decoding unchanged; failures carry their
// code and message; malformed and foreign messages are refused with a line
// that names what was wrong; versions that differ are refused on both sides.
#include "measure/worker/protocol.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "generator/space.hpp"
#include "layer/operation.hpp"
#include "tests/unit/measure/worker/protocol_samples.hpp"
#include "measure/worker/worker_service.hpp"

namespace ft {
namespace {

using nlohmann::json;

// encode -> one line -> parse -> decode -> encode gives the first encoding:
// a field dropped or mistaken on the way shows as a difference (the samples
// hold no default values).
TEST(Protocol, EveryRequestRoundTrips) {
  const auto requests = test::sample_requests();
  std::vector<bool> seen(std::variant_size_v<protocol::Request>);
  for (const protocol::Request& r : requests) seen[r.index()] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "no sample of request type " << i;
  for (const protocol::Request& r : requests) {
    SCOPED_TRACE(std::string(protocol::op_name(r)));
    const json wire = protocol::encode(r);
    const std::string line = protocol::to_line(wire);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    auto parsed = protocol::parse_line(line);
    ASSERT_TRUE(parsed) << parsed.error().describe();
    auto back = protocol::decode_request(*parsed);
    ASSERT_TRUE(back) << back.error().describe() << "\n" << line;
    EXPECT_EQ(back->index(), r.index());
    EXPECT_EQ(protocol::encode(*back), wire);
  }
}

TEST(Protocol, RequestsKeepWhatTheServiceNeeds) {
  const auto requests = test::sample_requests();
  for (const protocol::Request& r : requests) {
    auto back = protocol::decode_request(*protocol::parse_line(protocol::to_line(protocol::encode(r))));
    ASSERT_TRUE(back) << back.error().describe();
    if (const auto* open = std::get_if<protocol::OpenRequest>(&*back)) {
      EXPECT_EQ(open->problem.key(), std::get<protocol::OpenRequest>(r).problem.key());
      EXPECT_EQ(open->max_tokens, 4096);
    }
    if (const auto* inputs = std::get_if<protocol::InputsRequest>(&*back)) {
      EXPECT_EQ(inputs->seed, std::numeric_limits<std::uint64_t>::max());  // all 64 bits
    }
    if (const auto* open = std::get_if<protocol::OpenRequest>(&*back)) { EXPECT_EQ(open->operation, &op::moe_backward()); }
    if (const auto* tp = std::get_if<protocol::TimeProgramRequest>(&*back)) {
      const protocol::TimeProgramRequest& sent = std::get<protocol::TimeProgramRequest>(r);
      EXPECT_EQ(tp->program.operation, sent.program.operation);
      ASSERT_EQ(tp->program.stages.size(), sent.program.stages.size());
      for (std::size_t i = 0; i < sent.program.stages.size(); ++i)
        EXPECT_EQ(tp->program.stages[i].variant.name(), sent.program.stages[i].variant.name());
      ASSERT_EQ(tp->program.grad.size(), sent.program.grad.size());
      for (std::size_t i = 0; i < sent.program.grad.size(); ++i) {
        EXPECT_EQ(tp->program.grad[i].role, sent.program.grad[i].role);
        EXPECT_EQ(tp->program.grad[i].config.name(), sent.program.grad[i].config.name());  // every axis, the op, atom and target
        EXPECT_EQ(tp->program.grad[i].code_object, sent.program.grad[i].code_object);
      }
      EXPECT_EQ(tp->reps, sent.reps);
      EXPECT_EQ(tp->graph, sent.graph);
      EXPECT_FALSE(tp->flush_l2);
    }
    if (const auto* time = std::get_if<protocol::TimeRequest>(&*back)) {
      EXPECT_EQ(time->kernel.variant.name(), std::get<protocol::TimeRequest>(r).kernel.variant.name());
      EXPECT_EQ(time->reps, 17);
      EXPECT_FALSE(time->flush_l2);
    }
  }
}

TEST(Protocol, EveryAnswerRoundTrips) {
  const auto answers = test::sample_answers();
  for (const auto& [sent, answer] : answers) {
    SCOPED_TRACE(std::string(protocol::op_name(sent)) + " answer");
    const json wire = protocol::encode(answer);
    auto back = protocol::decode_answer_to(sent, *protocol::parse_line(protocol::to_line(wire)));
    ASSERT_TRUE(back) << back.error().describe() << "\n" << wire.dump();
    EXPECT_EQ(back->index(), answer.index());
    EXPECT_EQ(protocol::encode(*back), wire);
  }
  // Every answer type has a sample.
  std::vector<bool> seen(std::variant_size_v<protocol::Answer>);
  for (const auto& [sent, answer] : answers) seen[answer.index()] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "no sample of answer type " << i;
}

// JSON has no infinity or NaN: an overflowing comparison still travels.
TEST(Protocol, NonFiniteNumbersTravel) {
  const protocol::VerifyAnswer a{false, std::numeric_limits<double>::infinity(), std::nan(""), "overflow"};
  auto back = protocol::decode_answer<protocol::VerifyAnswer>(*protocol::parse_line(protocol::to_line(protocol::encode(a))));
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_TRUE(std::isinf(back->rel_l2) && back->rel_l2 > 0);
  EXPECT_TRUE(std::isnan(back->max_abs));
}

// A failure answer is the Error it carries, for every kind of error.
TEST(Protocol, FailuresCarryTheirCodeAndMessage) {
  for (Errc code : {Errc::usage, Errc::invalid_input, Errc::not_found, Errc::toolchain, Errc::compile, Errc::device,
                    Errc::no_device, Errc::database, Errc::io, Errc::verify, Errc::timeout, Errc::interrupted,
                    Errc::internal}) {
    SCOPED_TRACE(std::string(protocol::errc_name(code)));
    EXPECT_EQ(protocol::errc_from_name(protocol::errc_name(code)), code);
    const Error e{code, "CUDA_ERROR_ILLEGAL_ADDRESS", "launch"};
    const json wire = protocol::encode_failure(e);
    EXPECT_TRUE(protocol::is_failure(wire));
    auto back = protocol::decode_answer<Timing>(*protocol::parse_line(protocol::to_line(wire)));
    ASSERT_FALSE(back);
    EXPECT_EQ(back.error().code, code);
    EXPECT_EQ(back.error().message, e.describe());
  }
  EXPECT_FALSE(protocol::is_failure(protocol::encode(protocol::Answer(protocol::Done{}))));
}

// Messages of another protocol version are refused on both sides, naming both versions.
TEST(Protocol, AnotherVersionIsRefused) {
  protocol::DeviceAnswer newer;
  newer.protocol = protocol::kVersion + 1;
  newer.device.name = "Fake";
  auto a = protocol::decode_answer<protocol::DeviceAnswer>(protocol::encode(protocol::Answer(newer)));
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, Errc::invalid_input);
  EXPECT_NE(a.error().message.find(fmt::format("the worker speaks protocol {}, this flytune speaks protocol {}",
                                               protocol::kVersion + 1, protocol::kVersion)),
            std::string::npos)
      << a.error().message;

  // The worker's side: a search of another version is refused before any device is opened.
  bool opened = false;
  WorkerService service(WorkerService::DeviceFactory([&]() -> Result<std::unique_ptr<Device>> {
    opened = true;
    return fail(Errc::no_device, "no device in this test");
  }));
  auto r = service.handle(protocol::DeviceRequest{protocol::kVersion + 1});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(fmt::format("the search speaks protocol {}", protocol::kVersion + 1)), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(opened);
  // Of the same version it asks for the device, and says why there is none.
  auto same = service.handle(protocol::DeviceRequest{});
  ASSERT_FALSE(same);
  EXPECT_EQ(same.error().code, Errc::no_device);
  EXPECT_TRUE(opened);
  // Kernels before a problem is open: refused, not crashed.
  auto early = service.handle(test::sample_requests()[3]);
  ASSERT_FALSE(early);
  EXPECT_NE(early.error().message.find("no problem open"), std::string::npos) << early.error().message;
}

// Every member of every sample message is needed: dropping any one is
// refused with a message; so is giving it a value of another type, or
// adding a member the message does not have.
TEST(Protocol, EveryMemberIsCheckedAndNoneIsExtra) {
  struct Message {
    json whole;
    std::function<Status(const json&)> decode;
    bool optional_members = false;  // telemetry: a reading that cannot be read is left out
  };
  std::vector<Message> messages;
  for (const protocol::Request& r : test::sample_requests())
    messages.push_back({protocol::encode(r), [](const json& j) -> Status {
                          (void)FT_TRY(protocol::decode_request(j));
                          return {};
                        }});
  for (const auto& [sent, answer] : test::sample_answers())
    messages.push_back({protocol::encode(answer),
                        [sent = sent](const json& j) -> Status {
                          (void)FT_TRY(protocol::decode_answer_to(sent, j));
                          return {};
                        },
                        std::holds_alternative<protocol::TelemetryAnswer>(answer)});
  for (const Message& m : messages) {
    SCOPED_TRACE(m.whole.dump());
    ASSERT_TRUE(m.decode(m.whole)) << m.decode(m.whole).error().describe();
    json extra = m.whole;
    extra["unexpected_member"] = 1;
    auto refused = m.decode(extra);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("\"unexpected_member\" is not a field"), std::string::npos)
        << refused.error().message;
    for (auto it = m.whole.begin(); it != m.whole.end(); ++it) {
      SCOPED_TRACE(it.key());
      json dropped = m.whole, retyped = m.whole;
      dropped.erase(it.key());
      retyped[it.key()] = it->is_string() ? json(7) : json("x");
      auto without = m.decode(dropped);
      if (!m.optional_members || it.key() == "ok") {
        ASSERT_FALSE(without) << "accepted without " << it.key();
        EXPECT_FALSE(without.error().message.empty());
      }
      auto r = m.decode(retyped);
      ASSERT_FALSE(r) << "accepted " << retyped.dump();
      EXPECT_FALSE(r.error().message.empty());
    }
  }
}

// The program requests: a backward stage of no backward role, of no target,
// a configuration the rule table refuses or with a member too many, no
// stages, a forward stage that is a backward one, an open or a program of no
// operation: each refused with what was wrong.
TEST(Protocol, MalformedProgramRequestsAreRefused) {
  const auto requests = test::sample_requests();
  const json verify = protocol::encode(requests[7]), open = protocol::encode(requests[1]),
             layer = protocol::encode(requests[5]);
  ASSERT_EQ(verify["op"], "verify_program");
  ASSERT_EQ(verify["operation"], "moe_backward");
  ASSERT_EQ(layer["operation"], "moe_forward");
  struct Case {
    std::function<void(json&)> edit;
    const json* base;
    const char* says;
  };
  const std::vector<Case> cases{
      {[](json& j) { j["stages"] = json::array(); }, &verify, "\"stages\" must be a non-empty array"},
      {[](json& j) { j["stages"] = 3; }, &verify, "\"stages\" must be a non-empty array"},
      {[](json& j) { j["stages"][1]["role"] = "stage1"; }, &verify, "names no role of the backward ('stage1')"},
      {[](json& j) { j["stages"][0]["target"] = "gfx999"; }, &verify, "names no target ('gfx999')"},
      {[](json& j) { j["stages"][2]["config"]["tile_m"] = 48; }, &verify, "backward configuration: ft_sm_90a_kgrouped"},
      {[](json& j) { j["stages"][2]["config"]["swizzle"] = 1; }, &verify, "a member that is not one of a configuration's"},
      {[](json& j) { j["stages"][3]["config"]["op"] = "wgrad9"; }, &verify, "unknown op 'wgrad9'"},
      {[](json& j) { j["stages"][3]["config"].erase("stages"); }, &verify, "\"stages\" is missing"},
      {[](json& j) { j["stages"][0]["config"]["atom"] = "mfma_f32_16x16x16_bf16"; }, &verify, "does not exist on sm_90a"},
      {[](json& j) { j["operation"] = "sideways"; }, &open, "names no operation ('sideways'; moe_forward, moe_backward)"},
      {[](json& j) { j["operation"] = "backward"; }, &verify, "names no operation ('backward'"},
      {[](json& j) { j["stages"] = json::array(); }, &layer, "\"stages\" must be a non-empty array of moe_forward stages"},
      {[&](json& j) { j["stages"][1] = verify["stages"][0]; }, &layer, "moe_forward stage 1 of verify_program request"},
      {[&](json& j) { j["operation"] = "moe_backward"; }, &layer, "moe_backward stage 0 of verify_program request"},
  };
  for (const Case& c : cases) {
    json j = *c.base;
    c.edit(j);
    SCOPED_TRACE(j.dump());
    auto r = protocol::decode_request(j);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::invalid_input);
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
}

struct Refusal {
  const char* line;
  const char* says;
};

class MalformedRequest : public ::testing::TestWithParam<Refusal> {};

TEST_P(MalformedRequest, IsRefusedWithWhatWasWrong) {
  const Refusal& c = GetParam();
  auto r = [&]() -> Result<protocol::Request> {
    const json j = FT_TRY(protocol::parse_line(c.line));
    return protocol::decode_request(j);
  }();
  ASSERT_FALSE(r) << c.line;
  EXPECT_EQ(r.error().code, Errc::invalid_input);
  EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Protocol, MalformedRequest,
    ::testing::Values(
        Refusal{"", "not JSON"}, Refusal{"{\"op\": \"time\"", "not JSON"}, Refusal{"[1, 2]", "not a JSON object"},
        Refusal{"{}", "\"op\" is missing"}, Refusal{"{\"op\": 7}", "\"op\" must be a string"},
        Refusal{"{\"op\": \"launch_missiles\"}", "unknown request 'launch_missiles'"},
        Refusal{"{\"op\": \"telemetry\", \"verbose\": true}", "\"verbose\" is not a field of this message"},
        Refusal{"{\"op\": \"device\"}", "malformed device request: \"protocol\" is missing"},
        Refusal{"{\"op\": \"inputs\", \"tokens\": 4294967304, \"seed\": 1, \"empty_experts\": 0}",
                "\"tokens\" must be an integer of 32 bits"},
        Refusal{"{\"op\": \"inputs\", \"tokens\": 3.5, \"seed\": 1, \"empty_experts\": 0}", "\"tokens\" must be an integer"},
        Refusal{"{\"op\": \"inputs\", \"tokens\": 3, \"seed\": -1, \"empty_experts\": 0}",
                "\"seed\" must be a non-negative integer"},
        Refusal{"{\"op\": \"verify\", \"kernel\": 3}", "malformed kernel (kernel of verify request): not a JSON object"},
        Refusal{"{\"op\": \"verify\", \"kernel\": {\"variant\": {}, \"code_object\": \"a\", \"entry\": \"b\"}}",
                "\"variant\" variant parameters"},
        Refusal{"{\"op\": \"open\", \"problem\": {\"experts\": 8}, \"target\": \"sm_90a\", \"support\": \"s\", "
                "\"max_tokens\": 1}",
                "malformed open request: \"problem\" missing \"hidden\""}));

}  // namespace
}  // namespace ft
