#include "tuner/search/measurer.hpp"

#include <fmt/format.h>

#include "tuner/search/search.hpp"

namespace ft {

using namespace std::chrono_literals;

Measurer::Measurer(std::string executable, std::string selector, const std::atomic<bool>& stop)
    : exe_(executable.empty() ? self_executable() : std::move(executable)), selector_(std::move(selector)), stop_(stop) {}

Result<nlohmann::json> Measurer::start_and_query_device() {
  FT_CHECK(worker_.start(exe_, selector_));
  return worker_.request({{"op", "device"}}, 120s);
}

Status Measurer::open(nlohmann::json request) {
  open_ = std::move(request);
  auto r = call(open_, 300s);
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<nlohmann::json> Measurer::call(const nlohmann::json& req, std::chrono::milliseconds timeout) {
  if (dead_) return fail(Errc::no_device, fmt::format("the worker on {} is dead", label()));
  if (!worker_.running()) FT_CHECK(restart());
  auto r = worker_.request(req, timeout);
  // A device error ends the worker (its context may be gone); a timeout or a
  // death already did. Start a fresh one for the next request.
  if (!r && (r.error().code == Errc::timeout || r.error().code == Errc::device || !worker_.running())) {
    ++crashes_;
    // The failure is the request's to record; a worker that cannot be
    // restarted leaves this measurer dead() for the next one.
    if (!stop_.load() && !interrupted()) (void)restart();
  }
  return r;
}

Status Measurer::set_inputs(int tokens, std::uint64_t seed, int empty_experts) {
  inputs_ = {{"op", "inputs"}, {"tokens", tokens}, {"seed", seed}, {"empty_experts", empty_experts}};
  auto r = call(inputs_, 300s);
  if (!r) return std::unexpected(r.error());
  return {};
}

bool Measurer::stopped() const { return dead_ || stop_.load() || interrupted(); }

nlohmann::json Measurer::telemetry() {
  if (dead_ || !worker_.running()) return nlohmann::json::object();
  auto r = worker_.request({{"op", "telemetry"}}, 10s);
  return r ? *r : nlohmann::json::object();
}

Status Measurer::restart() {
  // Two tries: a worker may die of what its predecessor left behind (a GPU
  // still resetting); a third failure in a row means the GPU is gone.
  Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    last = [&]() -> Status {
      FT_CHECK(worker_.start(exe_, selector_));
      for (const nlohmann::json* replay : {&open_, &inputs_})
        if (!replay->is_null()) {
          auto r = worker_.request(*replay, 300s);
          if (!r) return std::unexpected(r.error());
        }
      return {};
    }();
    if (last) return last;
    worker_.stop();
  }
  dead_ = true;
  return std::unexpected(with_context(last.error(), fmt::format("the worker on {} could not be restarted", label())));
}

}  // namespace ft
