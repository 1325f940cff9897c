#pragma once
// flytune search --pass backward: the backward program (op::moe_backward,
// layer/backward.hpp) searched per token bucket on one device -- a GPU or the
// CPU emulator (an emu: selector) -- through a Measurer, as the forward: a
// `flytune worker` process with its watchdog and restarts (or the service in
// this process with --in-process), its problem opened for the backward.
//
//   1. For each role of op::moe_backward (dgrad2, dgrad1, wgrad2, wgrad1), its
//      GEMM's configurations (backward_space of the --space preset, those the
//      problem's sizes fit, the first --budget of them when given); each
//      configuration compiled once (the wgrad roles share theirs) and recorded
//      as a variants row of kind `grad`.
//   2. The programs: the base (every role's first configuration) and, for each
//      role, each of its other configurations swapped into the base -- one
//      role varied at a time -- each a variants row of kind `backward`.
//   3. Each program verified once at the search's verify token count (one
//      expert without tokens) against the CPU backward (the worker's
//      BackwardBench); each that passes timed at every bucket (events, L2
//      flushed); the fastest recorded as the bucket's layer winner of pass
//      backward.
// Every verification and timing is a measurement of its program's row,
// committed as it comes, and a re-run takes them from the store (unless
// --force): it measures nothing again. A worker that dies, hangs or faults
// loses the program in flight (recorded as failed, not retried) and is
// restarted for the next.
#include <cstdint>
#include <filesystem>

#include "search/recorder.hpp"
#include "search/search.hpp"
#include "store/store.hpp"

namespace ft {

// Errc::usage with one line for a configuration the backward search cannot run
// (an fp8 problem, --dry-run, several devices, --space overrides).
Status check_backward_config(const SearchConfig& cfg);

// The run's status; the summary gets the backward winners (pass backward).
// `seed`: of the verification's and the buckets' inputs; `object_dir`: where
// the worker finds the code objects (search/object_dir.hpp).
Result<db::RunStatus> backward_search(const SearchConfig& cfg, Recorder& rec, SearchSummary& summary,
                                      std::int64_t problem_id, std::uint64_t seed,
                                      const std::filesystem::path& object_dir);

}  // namespace ft
