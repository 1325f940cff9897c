// libFuzzer target: everything a user types or writes that flytune parses
// before any compiler or GPU is involved. The first byte picks the parser:
//   0 a problem file (JSON text), 1 --space, 2 --tokens, 3 --routing;
// the rest is the input. Beyond "no crash, no UB, no leak" (ASan/UBSan), each
// accepted input must satisfy what the parser promises.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "generator/problem.hpp"
#include "generator/space.hpp"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void problem_file(std::string_view text) {
  auto p = ft::problem_from_json_text(text, "fuzz.json");
  if (!p) {
    require(!p.error().message.empty());
    return;
  }
  require(p->validate().has_value());
  require(p->experts >= 1 && p->experts <= 1024 && p->topk >= 1 && p->topk <= p->experts);
  require(p->hidden >= 64 && p->hidden % 64 == 0 && p->inter >= 64 && p->inter % 64 == 0);
  require(!p->key().empty());
}

void space(std::string_view text) {
  auto s = ft::SpaceOptions::parse(text);
  if (!s) require(!s.error().message.empty());
}

void tokens(std::string_view text) {
  auto t = ft::parse_token_list(text);
  if (!t) {
    require(!t.error().message.empty());
    return;
  }
  require(!t->empty() && std::is_sorted(t->begin(), t->end()));
  require(std::adjacent_find(t->begin(), t->end()) == t->end());
  require(t->front() >= 1 && t->back() <= (1 << 24));
}

void routing(std::string_view text) {
  auto r = ft::Routing::parse(text);
  if (!r) {
    require(!r.error().message.empty());
    return;
  }
  // The key of an accepted routing parses back to the same routing (replay
  // keys name a file, checked when the file is read, not here).
  if (r->kind == ft::Routing::Kind::replay) return;
  auto again = ft::Routing::parse(r->key());
  require(again.has_value() && again->kind == r->kind && again->hot_experts == r->hot_experts);
  if (r->kind == ft::Routing::Kind::zipf) require(r->zipf_s >= 0.001 && r->zipf_s <= 100);
  if (r->kind == ft::Routing::Kind::hot) require(r->hot_experts > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: problem_file(text); break;
    case 1: space(text); break;
    case 2: tokens(text); break;
    case 3: routing(text); break;
  }
  return 0;
}
