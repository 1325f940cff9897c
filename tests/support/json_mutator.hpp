#pragma once
// Seeded mutations of JSON documents and their text, for the seeded fuzz
// tests (tests/unit/export/runtime_fuzz_test.cpp: export manifests;
// tests/unit/measure/worker/protocol_fuzz_test.cpp: worker messages): values replaced
// by other types, huge or negative numbers, members dropped or duplicated,
// bytes flipped, cut or inserted. The same seed gives the same mutations.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace ft::test {

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  nlohmann::json value() {
    switch (pick(9)) {
      case 0: return nullptr;
      case 1: return bool(pick(2));
      case 2: return std::int64_t(rng_());
      case 3: return -std::int64_t(pick(1000));
      case 4: return 4294967304.0;
      case 5: return std::string(pick(40), char('A' + pick(26)));
      case 6: return nlohmann::json::array({1, "x", nullptr});
      case 7: return nlohmann::json::object({{"k", pick(3)}});
      default: return std::uint64_t(1) << pick(63);
    }
  }

  // Replaces, drops or duplicates one member somewhere in the tree.
  void mutate(nlohmann::json& j) {
    nlohmann::json* at = &j;
    for (int depth = 0; depth < 8 && (at->is_object() || at->is_array()) && !at->empty() && pick(4) != 0; ++depth) {
      nlohmann::json* next = nullptr;
      if (at->is_object()) {
        auto it = at->begin();
        std::advance(it, long(pick(at->size())));
        next = &it.value();
        if (pick(6) == 0) {
          at->erase(it.key());
          return;
        }
      } else {
        next = &(*at)[pick(at->size())];
        if (pick(8) == 0) {
          at->push_back(*next);
          return;
        }
      }
      at = next;
    }
    *at = value();
  }

  std::string bytes(std::string text) {
    const int edits = 1 + int(pick(4));
    for (int i = 0; i < edits && !text.empty(); ++i) {
      const std::size_t pos = pick(text.size());
      switch (pick(3)) {
        case 0: text[pos] = char(rng_()); break;
        case 1: text.resize(pos); break;
        default: text.insert(pos, std::string(pick(3) + 1, "{[\"0,:}]"[pick(8)]));
      }
    }
    return text;
  }

  std::size_t pick(std::size_t n) { return n ? std::size_t(rng_() % n) : 0; }

 private:
  std::mt19937_64 rng_;
};

}  // namespace ft::test
