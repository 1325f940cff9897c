#include "runtime/check/soak.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "flytune_runtime.h"
#include "runtime/check/check_export.hpp"
#include "runtime/check/layer_check.hpp"
#include "runtime/check/observed_device.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "device/runtimes.hpp"
#include "measure/workload/half.hpp"

namespace ft::check {
namespace {

// Routing sets each thread cycles through, uploaded once (a launch reads the
// first T rows of one: a routing of T tokens), so no upload races a launch
// still running on the stream.
constexpr int kRoutingSets = 5;
const char* const kRoutings[kRoutingSets] = {"uniform", "zipf", "masked", "hot", "one-empty"};
constexpr std::size_t kMaxFailureLines = 8;

Result<ft_runtime*> open_observed(const SoakOptions& o, const std::shared_ptr<Observed>& seen) {
  auto wrap = [seen](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
    return std::make_unique<ObservedDevice>(std::move(d), seen);
  };
  if (o.emulate) return open_on_emulator(o.dir, wrap);
  auto opener = [&]() -> Result<std::unique_ptr<Device>> {
    auto d = open_device(o.device);
    if (!d) return fail(Errc::no_device, d.error().message, d.error().context);
    return wrap(std::move(*d));
  };
  auto runtime = FT_TRY(rt::Runtime::open(o.dir, opener));
  return rt::adopt_runtime(std::move(runtime));
}

// The test-only leak: anonymous pages mapped and touched, outside malloc,
// unmapped when the soak is over.
struct KeptPages {
  std::vector<std::pair<void*, std::size_t>> maps;
  KeptPages() = default;
  KeptPages(const KeptPages&) = delete;
  KeptPages& operator=(const KeptPages&) = delete;
  ~KeptPages() {
    for (auto [p, n] : maps) munmap(p, n);
  }
  void keep(std::size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    std::memset(p, 0x5a, bytes);
    maps.emplace_back(p, bytes);
  }
};

// One thread's share: its stream, inputs for the largest T and the routing sets.
struct Lane {
  StreamHandle stream;
  void* x = nullptr;
  void* y = nullptr;
  void* y_ref = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* ids[kRoutingSets] = {};
  void* weights[kRoutingSets] = {};
  Routed routed[kRoutingSets];
  const float* inter_scale = nullptr;  // static-scale problems: calibrated once on the lane's inputs
  long launches = 0, checks = 0, check_failures = 0, errors = 0;
  int t_min = 1 << 30, t_max = 0;
  std::set<int> buckets;
  std::vector<std::string> failures;
  KeptPages kept;  // SoakOptions::test_leak_bytes_per_launch
};

struct Shared {
  ft_runtime* rt;
  std::string key;
  Problem problem;
  ft_problem_shape shape{};
  ProblemWeights* weights;
  const SoakOptions* o;
};

// The largest workspace any T in [tokens_min, tokens_max] needs: a bucket's
// grows with T up to the bucket, the last one's up to tokens_max.
Result<std::size_t> largest_workspace(ft_runtime* rt, const std::string& key, int problem_index, const SoakOptions& o) {
  std::vector<int> candidates{o.tokens_min, o.tokens_max};
  for (int b = 0; b < ft_runtime_bucket_count(rt, problem_index); ++b) {
    const int t = ft_runtime_bucket_tokens(rt, problem_index, b);
    if (t >= o.tokens_min && t <= o.tokens_max) candidates.push_back(t);
  }
  std::size_t most = 0;
  for (int t : candidates) {
    ft_plan* plan = nullptr;
    if (ft_runtime_select(rt, key.c_str(), t, &plan) != FT_OK) return fail(Errc::internal, ft_runtime_last_error(rt), key);
    most = std::max(most, ft_plan_workspace_bytes(plan));
    ft_plan_free(plan);
  }
  return most;
}

// Each stage's copies in every layout some bucket reads, made before the
// threads start (ProblemWeights makes them on first use).
Status arrange_all(ft_runtime* rt, const std::string& key, int problem_index, ProblemWeights& w) {
  for (int b = 0; b < ft_runtime_bucket_count(rt, problem_index); ++b) {
    ft_plan* plan = nullptr;
    if (ft_runtime_select(rt, key.c_str(), ft_runtime_bucket_tokens(rt, problem_index, b), &plan) != FT_OK)
      return fail(Errc::internal, ft_runtime_last_error(rt), key);
    for (int stage : {1, 2}) {
      const int layout = ft_plan_needs_shuffled(plan, stage) ? FT_WEIGHT_LAYOUT_SHUFFLED
                         : ft_plan_needs_tiled(plan, stage)  ? FT_WEIGHT_LAYOUT_TILED
                                                              : FT_WEIGHT_LAYOUT_PLAIN;
      if (!w.arranged(stage, layout)) {
        ft_plan_free(plan);
        return fail(Errc::device, fmt::format("arranging w{}: {}", stage, ft_runtime_last_error(rt)), key);
      }
    }
    ft_plan_free(plan);
  }
  return {};
}

Status prepare_lane(const Shared& s, Lane& lane, Allocations& mem, int index) {
  const SoakOptions& o = *s.o;
  Device& dev = rt::runtime_of(s.rt)->device();
  lane.stream = FT_TRY(dev.create_stream());
  const std::size_t T = std::size_t(o.tokens_max), H = std::size_t(s.shape.hidden), k = std::size_t(s.shape.topk);
  lane.x = mem.get(T * H * 2);
  lane.y = mem.get(T * H * 2);
  lane.y_ref = mem.get(std::min<std::size_t>(T, kFullReference) * H * 2);
  lane.workspace_bytes = FT_TRY(largest_workspace(s.rt, s.key, 0, o));
  lane.workspace = mem.get(lane.workspace_bytes);
  if (!lane.x || !lane.y || !lane.y_ref || !lane.workspace) return fail(Errc::device, ft_runtime_last_error(s.rt), "soak inputs");
  const int x_kind = s.problem.dtype == DType::f16 ? FT_FILL_F16 : FT_FILL_BF16;
  if (ft_runtime_fill_random_as(s.rt, lane.x, T * H, o.seed * 31 + std::uint64_t(index), tensor_scale(s.problem, TensorStream::x),
                                x_kind, magnitude_group(s.problem, TensorStream::x)) != FT_OK)
    return fail(Errc::device, ft_runtime_last_error(s.rt), "soak inputs");
  for (int r = 0; r < kRoutingSets; ++r) {
    lane.routed[r] = FT_TRY(routing_for(kRoutings[r], s.shape, o.tokens_max, o.seed * 97 + std::uint64_t(index * kRoutingSets + r)));
    lane.ids[r] = mem.get(T * k * 4);
    lane.weights[r] = mem.get(T * k * 4);
    if (!lane.ids[r] || !lane.weights[r] ||
        ft_runtime_upload(s.rt, lane.ids[r], lane.routed[r].ids.data(), T * k * 4) != FT_OK ||
        ft_runtime_upload(s.rt, lane.weights[r], lane.routed[r].weights.data(), T * k * 4) != FT_OK)
      return fail(Errc::device, ft_runtime_last_error(s.rt), "soak routing");
  }
  // Static scales: the intermediate's scale calibrated once, on the lane's inputs at its largest T (as a
  // server takes its checkpoint's); nothing for the other problems.
  ft_plan* plan = nullptr;
  if (ft_runtime_select(s.rt, s.key.c_str(), o.tokens_max, &plan) != FT_OK) return fail(Errc::internal, ft_runtime_last_error(s.rt), s.key);
  ft_layer_buffers b{};
  b.x = lane.x;
  b.topk_ids = static_cast<const std::int32_t*>(lane.ids[0]);
  b.topk_weights = static_cast<const float*>(lane.weights[0]);
  b.w1 = s.weights->plain(1);
  s.weights->bind_scales(b);
  const std::string e = calibrate_into(s.rt, plan, mem, b, lane.routed[0], sample_tokens(o.tokens_max), lane.stream.p);
  ft_plan_free(plan);
  if (!e.empty()) return fail(Errc::device, e, "soak calibration");
  lane.inter_scale = b.inter_scale;
  return {};
}

void note(Lane& lane, std::string line) {
  if (lane.failures.size() < kMaxFailureLines) lane.failures.push_back(std::move(line));
}

// The launch just made, against the reference on the sampled tokens.
void check(const Shared& s, Lane& lane, const ft_plan* plan, const ft_layer_buffers& b, int T, int r) {
  ++lane.checks;
  Allocations mem(s.rt);  // the reference's copies of the sampled rows
  const std::size_t H = std::size_t(s.shape.hidden), k = std::size_t(s.shape.topk);
  Routed routed;
  routed.ids.assign(lane.routed[r].ids.begin(), lane.routed[r].ids.begin() + long(std::size_t(T) * k));
  routed.weights.assign(lane.routed[r].weights.begin(), lane.routed[r].weights.begin() + long(std::size_t(T) * k));
  const std::vector<int> sampled = sample_tokens(T);
  std::vector<std::uint16_t> all(std::size_t(T) * H), ref(sampled.size() * H);
  std::string e;
  if (ft_runtime_synchronize(s.rt, lane.stream.p) != FT_OK || ft_runtime_download(s.rt, all.data(), lane.y, all.size() * 2) != FT_OK)
    e = std::string("download: ") + ft_runtime_last_error(s.rt);
  if (e.empty()) e = reference_into(s.rt, plan, mem, b, routed, sampled, lane.y_ref, false, lane.stream.p);
  if (e.empty() && (ft_runtime_synchronize(s.rt, lane.stream.p) != FT_OK ||
                    ft_runtime_download(s.rt, ref.data(), lane.y_ref, ref.size() * 2) != FT_OK))
    e = std::string("reference download: ") + ft_runtime_last_error(s.rt);
  CheckRow row{s.key, ft_plan_bucket(plan), T, kRoutings[r], false, 0, e};
  if (e.empty()) judge(row, all, ref, sampled, H, s.problem.dtype);
  if (!row.passed) {
    ++lane.check_failures;
    note(lane, fmt::format("T={} bucket {} {}: {}", T, row.bucket, row.routing, row.summary));
  }
}

// One launch at T: select, bind this lane's buffers, launch (poisoned output
// and a check on every check_every-th), free the plan. False on an error.
bool launch_one(const Shared& s, Lane& lane, int T, long i) {
  const SoakOptions& o = *s.o;
  const int r = int(i % kRoutingSets);
  ft_plan* plan = nullptr;
  if (ft_runtime_select(s.rt, s.key.c_str(), T, &plan) != FT_OK) {
    ++lane.errors;
    note(lane, fmt::format("select T={}: {}", T, ft_runtime_last_error(s.rt)));
    return false;
  }
  ft_layer_buffers b{};
  b.x = lane.x;
  b.topk_ids = static_cast<const std::int32_t*>(lane.ids[r]);
  b.topk_weights = static_cast<const float*>(lane.weights[r]);
  b.w1 = s.weights->plain(1);
  b.w2 = s.weights->plain(2);
  b.y = lane.y;
  b.workspace = lane.workspace;
  b.workspace_bytes = lane.workspace_bytes;
  s.weights->bind_scales(b);
  b.inter_scale = lane.inter_scale;
  for (int stage : {1, 2}) {
    if (ft_plan_needs_shuffled(plan, stage)) (stage == 1 ? b.w1_shuffled : b.w2_shuffled) = s.weights->arranged(stage, FT_WEIGHT_LAYOUT_SHUFFLED);
    if (ft_plan_needs_tiled(plan, stage)) (stage == 1 ? b.w1_tiled : b.w2_tiled) = s.weights->arranged(stage, FT_WEIGHT_LAYOUT_TILED);
  }
  const bool checked = i % o.check_every == 0;
  bool ok = true;
  if (checked && (ft_runtime_synchronize(s.rt, lane.stream.p) != FT_OK || !poison(s.rt, lane.y, std::size_t(T) * std::size_t(s.shape.hidden) * 2))) {
    ok = false;
    note(lane, fmt::format("poison T={}: {}", T, ft_runtime_last_error(s.rt)));
  }
  if (ok && ft_plan_launch(plan, &b, lane.stream.p) != FT_OK) {
    ok = false;
    note(lane, fmt::format("launch T={}: {}", T, ft_runtime_last_error(s.rt)));
  }
  if (ok) {
    ++lane.launches;
    lane.t_min = std::min(lane.t_min, T);
    lane.t_max = std::max(lane.t_max, T);
    lane.buckets.insert(ft_plan_bucket(plan));
    if (checked) {
      check(s, lane, plan, b, T, r);
      // The check's host copies (up to T x H values, the reference's floats)
      // are the soak's, not the runtime's: hand their pages back, or glibc's
      // arenas keep them and RSS shows the checks' high-water marks.
      if (o.trim_after_checks) malloc_trim(0);
    }
    if (o.test_leak_bytes_per_launch) lane.kept.keep(o.test_leak_bytes_per_launch);
  } else {
    ++lane.errors;
  }
  ft_plan_free(plan);
  return ok;
}

// The thread indices at which every thread waits for its stream and the last
// to arrive samples: the warm-up's end, then evenly spaced (the end's sample
// is taken once the threads are done).
std::vector<long> sample_points(long per_thread, long warm, int samples) {
  std::vector<long> points;
  for (int j = 0; j + 1 < samples; ++j) {
    const long i = warm + long((per_thread - warm) * j / (samples - 1));
    if (points.empty() || i > points.back()) points.push_back(i);
  }
  return points;
}

// Every lane's launches on a thread of its own, sampled at sample_points.
void run_lanes(const Shared& s, std::vector<Lane>& lanes, Observed& seen, SoakReport& report) {
  const SoakOptions& o = *s.o;
  const long per_thread = o.launches / o.threads;
  const long warm = std::clamp(long(double(per_thread) * o.warmup), 1L, per_thread - 1);  // every thread reaches it
  const std::vector<long> points = sample_points(per_thread, warm, o.samples);
  std::atomic<long> done{0};
  std::barrier idle(o.threads, [&]() noexcept { report.series.push_back(sample_now(seen, done.load())); });
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back([&, t] {
      Lane& lane = lanes[std::size_t(t)];
      std::mt19937_64 rng(o.seed * 7919 + std::uint64_t(t));
      std::uniform_real_distribution<double> u(std::log(double(o.tokens_min)), std::log(double(o.tokens_max) + 1));
      bool ok = true;
      std::size_t next = 0;
      for (long i = 0; i < per_thread; ++i) {
        if (next < points.size() && i == points[next]) {
          ++next;
          (void)ft_runtime_synchronize(s.rt, lane.stream.p);
          idle.arrive_and_wait();
        }
        if (!ok) continue;  // stopped at its first error; still arrives at the barriers
        const int T = std::clamp(int(std::exp(u(rng))), o.tokens_min, o.tokens_max);
        ok = launch_one(s, lane, T, i);
        done.fetch_add(1, std::memory_order_relaxed);
      }
      (void)ft_runtime_synchronize(s.rt, lane.stream.p);
    });
  for (std::thread& th : threads) th.join();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.series.push_back(sample_now(seen, done.load()));
  report.after_warmup = report.series.front();
  report.at_end = report.series.back();
}

}  // namespace

Result<SoakReport> soak_export(const SoakOptions& o) {
  if (o.threads < 1 || o.launches < 2 * o.threads || o.tokens_min < 1 || o.tokens_max < o.tokens_min || o.check_every < 1 ||
      o.warmup < 0 || o.warmup >= 1 || o.samples < 2)
    return fail(Errc::usage, "soak: threads >= 1, launches >= 2 * threads, 1 <= tokens_min <= tokens_max, "
                             "check_every >= 1, 0 <= warmup < 1, samples >= 2");
  auto seen = std::make_shared<Observed>();
  RuntimeHandle h;
  h.rt = FT_TRY(open_observed(o, seen));
  SoakReport report;
  report.device = rt::runtime_of(h.rt)->device().info().name;
  int problem_index = 0;
  if (o.problem) {
    problem_index = -1;
    for (int p = 0; p < ft_runtime_problem_count(h.rt); ++p)
      if (*o.problem == ft_runtime_problem_key(h.rt, p)) problem_index = p;
    if (problem_index < 0) return fail(Errc::not_found, "the export has no problem '" + *o.problem + "'", o.dir);
  }
  if (ft_runtime_problem_count(h.rt) == 0) return fail(Errc::not_found, "the export has no problem", o.dir);
  Shared s{h.rt, ft_runtime_problem_key(h.rt, problem_index), {}, {}, nullptr, &o};
  report.problem = s.key;
  {
    ft_plan* first = nullptr;
    if (ft_runtime_select(h.rt, s.key.c_str(), 1, &first) != FT_OK) return fail(Errc::internal, ft_runtime_last_error(h.rt), s.key);
    s.problem = rt::plan_of(first)->problem->problem;
    ft_plan_shape(first, &s.shape);
    ft_plan_free(first);
  }
  auto weights = std::make_unique<ProblemWeights>(h.rt, s.problem, o.seed);
  if (!weights->error().empty()) return fail(Errc::device, weights->error(), s.key);
  FT_CHECK(arrange_all(h.rt, s.key, problem_index, *weights));
  s.weights = weights.get();
  Allocations mem(h.rt);
  std::vector<Lane> lanes(std::size_t(o.threads));
  for (int t = 0; t < o.threads; ++t) FT_CHECK(prepare_lane(s, lanes[std::size_t(t)], mem, t));
  if (ft_runtime_synchronize(h.rt, nullptr) != FT_OK) return fail(Errc::device, ft_runtime_last_error(h.rt), "soak setup");

  run_lanes(s, lanes, *seen, report);
  std::set<int> buckets;
  report.tokens_min_seen = 1 << 30;
  for (Lane& lane : lanes) {
    report.launches += lane.launches, report.checks += lane.checks, report.check_failures += lane.check_failures;
    report.errors += lane.errors;
    report.tokens_min_seen = std::min(report.tokens_min_seen, lane.t_min);
    report.tokens_max_seen = std::max(report.tokens_max_seen, lane.t_max);
    buckets.insert(lane.buckets.begin(), lane.buckets.end());
    for (std::string& f : lane.failures)
      if (report.failures.size() < kMaxFailureLines) report.failures.push_back(std::move(f));
    (void)rt::runtime_of(h.rt)->device().destroy_stream(lane.stream);
  }
  report.buckets_seen.assign(buckets.begin(), buckets.end());
  return report;
}

}  // namespace ft::check
