#pragma once
// flytune search: generate, compile and analyse a target's variant space, then
// (with a GPU, or the CPU emulator) verify every usable variant on fresh inputs
// through a measurer (a worker process, or this one), time the survivors per
// token bucket with a strategy (strategy.hpp), and record
// everything -- variants, measurements, winners -- in the SQLite store as it
// happens. A re-run resumes: what is measured is not measured again unless forced.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "compile/compile.hpp"
#include "search/ceilings.hpp"
#include "search/strategy.hpp"
#include "store/kind.hpp"

namespace ft {

struct SearchConfig {
  Problem problem;
  std::vector<std::string> targets;  // dry run: the targets to build; GPU: empty = the GPU's own
  std::vector<int> tokens;
  std::string shard;                 // "I/N" when `tokens` is one shard's share (shard.hpp); recorded in the run
  std::string strategy{default_strategy()};  // a row of strategies.def (check_strategy)
  int budget = 0;                    // random: variants per kind and bucket; backward: configurations per role (0: all)
  double time_limit_s = 0;           // random: stop sampling after this long (0: none)
  double model_budget_s = 4;         // model: seconds of short timing per kind and bucket the pick may spend
  int model_explore = 4;             // model: candidates beside the model's fastest drawn at random
  std::string db_path = "flytune.db";
  bool dry_run = false;
  bool force = false;                // measure again what the database already has
  bool graph = false;                // time the layer by graph replay
  bool baseline = true;              // add the default variant (the speedup baseline) to the space
  SpaceOptions space;
  CompileOptions compile;
  // Worker selectors, one worker per GPU ("cuda:0", "cuda:1"); empty: the
  // first GPU found. The GPUs' buckets and variants are dealt among them.
  std::vector<std::string> devices;
  bool allow_mixed = false;          // GPUs of several models, each with winners of its own
  std::string command_line;
  int verify_tokens = 333;           // odd on purpose: not a multiple of any tile
  std::uint64_t seed = 0;            // 0: a fresh seed from the clock
  bool progress = true;
  std::optional<Ceilings> ceilings;  // override the measured table
  std::string worker_executable;     // default: this program
  // Measure in this process (make_in_process_measurer) instead of one worker
  // subprocess per device: no crash isolation and no watchdog (a kernel that
  // faults or hangs takes the search down); for the emulator and tests.
  bool in_process = false;
  // The passes searched, in this order: the forward's stages and layer, and/or
  // the backward program (backward_search.hpp: on one device, through its own worker).
  std::vector<db::Pass> passes{db::Pass::forward};
};

struct TargetSummary {
  std::string target;
  std::string backend;
  std::size_t legal = 0, rejected = 0, compiled = 0, compile_failed = 0, pruned = 0;
  std::size_t defaults_added = 0;  // default variants built beside the space (the speedup baseline)
  std::size_t cache_hits = 0;      // code objects taken from the compile cache
  std::size_t verified = 0, verify_failed = 0, crashed = 0;
};

struct BucketResult {
  int tokens = 0;
  std::string kind;            // moe1, moe2, layer
  std::string kernel;
  double median_us = 0, p10_us = 0, p90_us = 0;
  std::optional<double> floor_us;
  std::optional<double> speedup_vs_default;
  nlohmann::json stages;       // layer: per-stage medians
  std::string pass = "forward";  // db::Pass's text: the backward's layer winner says "backward"
};

// A token bucket that ended without a layer winner (its stages may have
// winners): the runtime could not serve it with its own kernels.
struct MissingLayer {
  int tokens = 0;
  std::string device;  // the device model it was searched on
  std::string reason;
};

// What one GPU of a search did.
struct GpuSummary {
  std::string selector;        // "cuda:1"
  std::string name, pci_bus_id;
  std::vector<int> buckets;    // token buckets searched on it
  std::size_t verified = 0;    // variants it verified
  std::size_t crashes = 0;     // its worker died or hung this often
  bool dead = false;           // its worker could not be started again
};

struct SearchSummary {
  std::int64_t run_id = 0;
  std::string db_path;
  std::string device;          // "NVIDIA H200 (sm_90a)", "2x NVIDIA H200 (sm_90a)" or "compile-only"
  std::vector<GpuSummary> gpus;
  bool interrupted = false;
  bool dry_run = false;
  std::vector<TargetSummary> targets;
  std::vector<BucketResult> winners;
  std::size_t measurements = 0;
  std::size_t resumed = 0;     // measurements taken from the database instead of measured again
  // Things the user should know that are not errors: runs left running by a
  // killed search that opening the database closed, buckets that ended
  // without a layer winner and why.
  std::vector<std::string> notes;
  // Buckets of this run without a layer winner, by token count (the search
  // fails with kExitMissingLayers unless --allow-missing).
  std::vector<MissingLayer> missing_layers;
  double seconds = 0;
  nlohmann::json to_json() const;
};

Result<SearchSummary> run_search(const SearchConfig& config);

// Ctrl-C: the search stops after the request in flight, saving everything done.
void install_interrupt_handler();
bool interrupted();

}  // namespace ft
