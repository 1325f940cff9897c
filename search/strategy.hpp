#pragma once
// Search strategies: how the verified candidates of one stage kind are ranked
// at one token count on one device -- which of them are timed, with how many
// repetitions, in which rounds. A strategy sees the candidates' compile facts
// (Candidate::cv: the variant, its resources and matrix-instruction counts),
// their earlier measurements (StageTimer::earlier) and the timings it asks
// for, and returns the ranking; the step that runs it (search/steps.hpp)
// records every timing, resumes what the store already holds, and records
// the winner.
//
// A strategy is one file (strategy_<name>.cpp, defining its factory) and one
// row of strategies.def; `--strategy` parsing and help text come from those rows.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.hpp"
#include "base/error.hpp"
#include "generator/variant.hpp"
#include "search/compile_space.hpp"
#include "measure/worker/protocol.hpp"

namespace ft {

// The repetition counts of the timing protocol (docs/TUNER.md).
inline constexpr int kShortReps = 5, kLongReps = 30, kAbReps = 10, kAbRounds = 3;

// A verified variant the search can time.
struct Candidate {
  const CompiledVariant* cv = nullptr;  // the variant and its compile facts
  std::int64_t id = 0;                  // variants.id in the store
  protocol::KernelRef kernel;           // what the measurer loads
};

using Ranked = std::vector<std::pair<double, const Candidate*>>;  // (time in us, candidate), fastest first

// What a strategy may ask of the device it ranks on.
class StageTimer {
 public:
  virtual ~StageTimer() = default;
  // One timing of `c`: `reps` repetitions, recorded as `phase` ("short",
  // "long"); taken from the store instead when it holds one as good (unless
  // --force). The median in us; nullopt when the timing failed (recorded as
  // such) or the device stopped.
  virtual std::optional<double> time(const Candidate& c, std::string_view phase, int reps) = 0;
  // `rounds` interleaved rounds of `reps` repetitions over `best` (A, B, C,
  // B, C, A, ...), so drift hits all of them alike; each one's time becomes
  // the median of its rounds' medians, recorded once as phase "ab" with the
  // rounds' spread. Always measured, never resumed.
  virtual void interleaved(Ranked& best, int rounds, int reps) = 0;
  // What the store holds of `c` on this device and problem: every run and
  // token count, in the order they were taken (the earlier measurements a
  // model can learn from; this search's own included).
  virtual std::vector<db::MeasurementRecord> earlier(const Candidate& c) = 0;
  // One candidate of the pool dealt with (the progress bar counts the pool).
  virtual void screened(const Candidate& c) = 0;
  // Read access to the store between the search's writes (a model learning
  // from every earlier measurement); the default has no store.
  virtual Status read_store(const std::function<Status(db::Store&)>& read);
  // One line for the search's notes (and its progress output).
  virtual void note(const std::string& line);
  // The device stopped (Ctrl-C, an error elsewhere, a dead worker): return.
  virtual bool stopped() const = 0;
};

// The ranking asked for.
struct StageQuery {
  StageRole kind = StageRole::stage1;
  int tokens = 0;
  std::mt19937_64* rng = nullptr;  // seeded per bucket (the same on any number of devices)
  std::int64_t problem_id = 0, device_id = 0;  // the store's rows of this problem and device model
  const Candidate* baseline = nullptr;         // the default variant among the pool, if it is there
};

struct StrategyOptions {
  int budget = 0;           // random: variants per kind and bucket (0: all)
  double time_limit_s = 0;  // random: stop sampling after this long (0: none)
  double model_budget_s = 4;  // model: seconds of short timing per kind and bucket the pick may spend
  int model_explore = 4;      // model: candidates beside the model's fastest drawn at random
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // `pool` (every verified candidate of the kind, in the space's order)
  // ranked fastest first by the times the strategy settled on -- the first is
  // the winner; candidates a strategy timed further come before those it
  // dropped, which follow by their own times (the layer step looks down the
  // list for stages that fit together) --; candidates it did not time, or
  // whose timing failed, are left out. nullopt when the device stopped before
  // the ranking was done.
  virtual std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery& query,
                                     StageTimer& timer) = 0;
};

// One row of strategies.def.
struct StrategyInfo {
  std::string_view name;
  std::string_view help;
  std::unique_ptr<Strategy> (*make)(const StrategyOptions&);
};

// The registered strategies, the default first.
std::span<const StrategyInfo> strategies();
std::string_view default_strategy();
// Errc::usage naming the strategies for an unknown name.
Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, const StrategyOptions& options);
Status check_strategy(std::string_view name);
// "halving, exhaustive or random", and one line per strategy for --help.
std::string strategy_names(std::string_view last_separator = " or ");
std::string strategy_help();

// Sorts by time, fastest first (ties keep the pool's order).
void sort_fastest_first(Ranked& ranked);
// Each of `which` timed once (`phase`, `reps`) and screened, in order; those
// timed, fastest first. nullopt when the device stopped first.
std::optional<Ranked> time_each(const std::vector<const Candidate*>& which, std::string_view phase, int reps,
                                StageTimer& timer);

}  // namespace ft
