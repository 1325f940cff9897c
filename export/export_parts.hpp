#pragma once
// Internal to ft_export: what export.cpp (the forward's layer winners) and
// backward_export.cpp (the backward's) build a manifest with -- the code
// objects read once by hash, a stage's variants row and code object, each
// operation's reading of its winners' recipes, a bucket from a winner of any
// operation.
#include <cstddef>
#include <cstdint>
#include <expected>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "layer/operation.hpp"
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

// Where an export reads its winners' kernels: the database, the code objects
// read so far, the winners' target and toolchain, the runs (a bucket's provenance).
struct WinnerSource {
  Store& store;
  ObjectSet& objects;
  const Target& target;
  std::int64_t toolchain_id = 0;
  const std::map<std::int64_t, RunRecord>& runs;
};

// A winner's recipe as its row records it: the configurations read back from
// the database, and the kernel names the row gives them, in op::role_kernels' order.
struct RecordedRecipe {
  LayerRecipe recipe;
  std::vector<std::string> kernels;
};

// How an operation's winners record their recipe, read back: the one part of
// exporting a winner that is the operation's own (the forward's row holds a
// LayerRecord, the backward's a configuration name per role). A new operation
// is a row.
struct RecipeReader {
  const op::Operation& (*operation)();
  Result<RecordedRecipe> (*read)(const WinnerSource& src, const Problem& p, const WinnerRow& row, const std::string& what);
};
// One row per operation of op::operations(), in its order.
std::span<const RecipeReader> recipe_readers();
// The recipe a winner of `op` records (Errc::internal for an operation without a reader).
Result<RecordedRecipe> recorded_recipe(const op::Operation& op, const WinnerSource& src, const Problem& p, const WinnerRow& row,
                                       const std::string& what);

// A bucket of the manifest, or why its winner cannot be exported as measured
// (the note's text: "<why>; search this bucket again" follows it).
using BucketOrNote = std::expected<manifest::Bucket, std::string>;

// One bucket of the manifest from a winner of `op` (layer/operation.hpp) on
// problem `p`, written once for every operation: the recipe its row names
// (recorded_recipe), aligned as the support unit can; the program at the
// bucket's T (op.build); the code object of each role kernel a step launches
// (op::role_kernels) and the support unit's for every other launch; the
// measured time and where it came from. A program this flytune does not build
// from the recipe, or one that runs a support kernel the unit lacks (a unit
// recorded before it existed), is a note; then a configuration that names
// another kernel than its row records, or a code object missing or corrupt
// in the database, is an error.
Result<BucketOrNote> export_bucket(const op::Operation& op, const WinnerSource& src, const Problem& p,
                                   const manifest::SupportUnit& support, const WinnerRow& row, const std::string& what);

}  // namespace ft::db
