#pragma once
// Content hashes (XXH3-128 from libxxhash) as 32 lowercase hex digits, the
// form stored in the database and used for cache keys.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace ft {

std::string xxh3_128_hex(std::span<const std::byte> data);
std::string xxh3_128_hex(std::string_view data);

// Streaming hash over several fields. Each add() is length-prefixed, so
// ("ab", "c") and ("a", "bc") hash differently.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  ContentHasher& add(std::string_view field);
  ContentHasher& add(std::span<const std::byte> field);
  ContentHasher& add(std::int64_t value);
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ft
