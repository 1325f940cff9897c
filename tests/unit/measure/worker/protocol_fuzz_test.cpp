// A seeded fuzz test of the worker protocol's decoders: thousands of messages
// made by mutating the valid ones of protocol_samples.hpp (values replaced by
// other types, huge or negative numbers, members dropped or duplicated, the
// line's bytes flipped, cut or extended), decoded as a request and as the
// answer to every kind of request. Every decode must end in a value or an
// error with a one-line message -- nothing may throw or crash (the sanitizer
// build runs this too) -- and what is accepted must encode and decode again
// to the same message. FLYTUNE_FUZZ_SECONDS bounds the time (default 5).
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/json_mutator.hpp"
#include "tests/unit/measure/worker/protocol_samples.hpp"
#include "measure/worker/protocol.hpp"

namespace ft {
namespace {

using nlohmann::json;

struct Counts {
  int runs = 0, requests = 0, answers = 0, failures = 0;
};

void expect_one_line_error(const Error& e, const std::string& line) {
  EXPECT_FALSE(e.message.empty()) << line;
  EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
}

// Decodes one line every way; what is accepted must survive another round.
void decode_every_way(const std::string& line, const std::vector<protocol::Request>& kinds, Counts& n) {
  auto message = protocol::parse_line(line);
  if (!message) return expect_one_line_error(message.error(), line);
  if (auto r = protocol::decode_request(*message)) {
    ++n.requests;
    const json again = protocol::encode(*r);
    auto twice = protocol::decode_request(*protocol::parse_line(protocol::to_line(again)));
    ASSERT_TRUE(twice) << twice.error().describe() << "\n" << line;
    EXPECT_EQ(protocol::encode(*twice), again) << line;
  } else {
    expect_one_line_error(r.error(), line);
  }
  for (const protocol::Request& sent : kinds) {
    auto a = protocol::decode_answer_to(sent, *message);
    if (!a) {
      n.failures += protocol::is_failure(*message);
      expect_one_line_error(a.error(), line);
      continue;
    }
    ++n.answers;
    const json again = protocol::encode(*a);
    auto twice = protocol::decode_answer_to(sent, *protocol::parse_line(protocol::to_line(again)));
    ASSERT_TRUE(twice) << twice.error().describe() << "\n" << line;
    EXPECT_EQ(protocol::encode(*twice), again) << line;
  }
}

TEST(ProtocolFuzz, MutatedMessagesDecodeOrFailWithAMessage) {
  const std::vector<protocol::Request> kinds = test::sample_requests();
  std::vector<json> seeds;
  for (const protocol::Request& r : kinds) seeds.push_back(protocol::encode(r));
  for (const auto& [sent, answer] : test::sample_answers()) seeds.push_back(protocol::encode(answer));
  seeds.push_back(protocol::encode_failure(Error{Errc::device, "CUDA_ERROR_ILLEGAL_ADDRESS", "launch"}));

  const char* env = std::getenv("FLYTUNE_FUZZ_SECONDS");
  const double budget = env ? std::atof(env) : 5.0;
  const auto start = std::chrono::steady_clock::now();
  Counts n;
  for (std::uint64_t seed = 1; seed <= 200000; ++seed) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) break;
    test::Mutator m(seed);
    json message = seeds[m.pick(seeds.size())];
    // Some messages go through unmutated or only at the byte level.
    const int edits = int(m.pick(4));
    for (int i = 0; i < edits; ++i) m.mutate(message);
    std::string line = protocol::to_line(message);
    if (m.pick(4) == 0) line = m.bytes(line);
    ++n.runs;
    decode_every_way(line, kinds, n);
    if (HasFatalFailure()) return;
  }
  std::printf("protocol fuzz: %d messages, %d decoded as requests, %d as answers, %d failure answers\n", n.runs,
              n.requests, n.answers, n.failures);
  EXPECT_GT(n.runs, 200);
  EXPECT_GT(n.requests, 0);  // some mutations leave a valid message (a changed number, say)
  EXPECT_GT(n.answers, 0);
  EXPECT_GT(n.failures, 0);
}

}  // namespace
}  // namespace ft
