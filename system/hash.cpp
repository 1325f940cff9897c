#include "system/hash.hpp"

#include <xxhash.h>

#include <fmt/format.h>

namespace ft {
namespace {

std::string to_hex(XXH128_hash_t h) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, h);
  std::string out;
  out.reserve(32);
  for (unsigned char byte : canonical.digest) out += fmt::format("{:02x}", byte);
  return out;
}

}  // namespace

std::string xxh3_128_hex(std::span<const std::byte> data) { return to_hex(XXH3_128bits(data.data(), data.size())); }

std::string xxh3_128_hex(std::string_view data) { return to_hex(XXH3_128bits(data.data(), data.size())); }

struct ContentHasher::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) { XXH3_128bits_reset(state_->xxh); }

ContentHasher::~ContentHasher() = default;

ContentHasher& ContentHasher::add(std::span<const std::byte> field) {
  std::uint64_t size = field.size();
  XXH3_128bits_update(state_->xxh, &size, sizeof size);
  XXH3_128bits_update(state_->xxh, field.data(), field.size());
  return *this;
}

ContentHasher& ContentHasher::add(std::string_view field) { return add(std::as_bytes(std::span(field))); }

ContentHasher& ContentHasher::add(std::int64_t value) {
  XXH3_128bits_update(state_->xxh, &value, sizeof value);
  return *this;
}

std::string ContentHasher::hex() const { return to_hex(XXH3_128bits_digest(state_->xxh)); }

}  // namespace ft
