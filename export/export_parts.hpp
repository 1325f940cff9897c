#pragma once
// Internal to ft_export: what export.cpp (the forward's layer winners) and
// backward_export.cpp (the backward's) build a manifest with -- the code
// objects read once by hash, a stage's variants row and code object, a
// bucket from its winner.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "generator/target.hpp"
#include "layer/program.hpp"
#include "manifest/manifest.hpp"
#include "store/store.hpp"
#include "system/hash.hpp"

namespace ft::db {

struct LoadedObject {
  std::string file;  // <hash><ext>
  std::vector<std::byte> bytes;
};

// Code objects by hash, read once, each checked against its name.
class ObjectSet {
 public:
  ObjectSet(Store& store, std::string ext) : store_(store), ext_(std::move(ext)) {}

  Result<std::string> from_store(const std::string& hash, const std::string& what) {
    if (auto it = files_.find(hash); it != files_.end()) return it->second.file;
    auto bytes = FT_TRY(store_.code_object(hash));
    if (!bytes) return fail(Errc::database, fmt::format("code object {} is missing from the database", hash), what);
    return add(hash, std::move(*bytes), what);
  }

  Result<std::string> add(const std::string& hash, std::vector<std::byte> bytes, const std::string& what) {
    const std::string actual = xxh3_128_hex(bytes);
    if (actual != hash)
      return fail(Errc::database, fmt::format("code object {} is corrupt (its bytes hash to {})", hash, actual), what);
    LoadedObject& o = files_[hash];
    o.file = hash + ext_;
    o.bytes = std::move(bytes);
    return o.file;
  }

  std::span<const std::byte> bytes_of(const std::string& file) const {
    for (const auto& [h, o] : files_)
      if (o.file == file) return o.bytes;
    return {};
  }

  std::vector<std::pair<std::string, std::vector<std::byte>>> take() {
    std::vector<std::pair<std::string, std::vector<std::byte>>> out;
    for (auto& [h, o] : files_) out.emplace_back(o.file, std::move(o.bytes));
    return out;
  }

 private:
  Store& store_;
  std::string ext_;
  std::map<std::string, LoadedObject> files_;
};

// A stage kernel's variants row by the toolchain that built the winners, with its code object.
Result<VariantRecord> stage_row(Store& store, const Target& target, std::int64_t toolchain_id, const std::string& kernel,
                                const std::string& what);
// Its code object's file in the export.
Result<std::string> stage_code_object(Store& store, ObjectSet& objects, const Target& target, std::int64_t toolchain_id,
                                      const std::string& kernel, const std::string& what);

// One bucket of the manifest: the winner's recipe, the program at the
// bucket's T with each launch's code object (`files` by launch role, the
// support unit's for every other role), the measured time and where it came from.
manifest::Bucket bucket_of(const WinnerRow& row, LayerRecipe recipe, LayerProgram prog, const std::string& support,
                           const std::map<Role, std::string>& files, const std::map<std::int64_t, RunRecord>& runs);

}  // namespace ft::db
