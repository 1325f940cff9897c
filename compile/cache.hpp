#pragma once
// The compiled-code-object cache: one binary and one JSON description per
// cache key, under <dir>/<first two hex digits>/<key>.{bin,json}. Entries are
// written to temporary names and renamed into place, so concurrent processes
// never see a half-written entry; a damaged entry reads as a miss.
#include <optional>
#include <string>

#include "base/error.hpp"
#include "compile/compile.hpp"

namespace ft {

class CompileCache {
 public:
  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The entry for `key` (from_cache set), or nullopt when absent or damaged.
  std::optional<CodeObject> load(const std::string& key) const;
  // Stores `object` under object.cache_key.
  Status store(const CodeObject& object) const;

 private:
  std::string dir_;
};

}  // namespace ft
