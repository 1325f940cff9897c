#pragma once
// Shards: one search's deterministic share of the token buckets, so N machines
// (or Slurm array tasks) can each run `flytune search --shard I/N` and
// `flytune db merge` joins their databases. docs/CLUSTER.md.
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ft {

struct Shard {
  int index = 0;  // I, 0 <= I < N
  int count = 1;  // N >= 1

  std::string label() const;  // "I/N"
};

// "I/N" with whole numbers 0 <= I < N; anything else is a usage error.
Result<Shard> parse_shard(std::string_view text);

// The buckets of shard I/N: sort the buckets (ascending, without repeats) and
// keep those whose index in that list satisfies index % N == I. The N shards
// of one list are disjoint and together cover it; the split depends only on
// the list, never on the machine or the time. A shard may be empty (N larger
// than the number of buckets).
std::vector<int> shard_tokens(std::vector<int> tokens, const Shard& shard);

}  // namespace ft
