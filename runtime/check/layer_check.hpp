#pragma once
// The parts of a layer check through the C API that check-export and the soak
// share: device memory released through the runtime, a problem's weights (and
// their arranged copies), the routings, the reference and the judgement; and
// check-export's rows, one path over the operations.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flytune_runtime.h"
#include "base/error.hpp"
#include "generator/problem.hpp"
#include "layer/operation.hpp"
#include "measure/workload/workload.hpp"
#include "runtime/check/check_export.hpp"

namespace ft::check {

// Device memory of one check, released through the runtime on scope exit.
class Allocations {
 public:
  explicit Allocations(ft_runtime* rt) : rt_(rt) {}
  ~Allocations() {
    for (void* p : ptrs_) ft_runtime_free(rt_, p);
  }
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;
  void* get(std::size_t bytes) {
    void* p = nullptr;
    if (ft_runtime_alloc(rt_, bytes ? bytes : 4, &p) != FT_OK) return nullptr;
    ptrs_.push_back(p);
    return p;
  }

 private:
  ft_runtime* rt_;
  std::vector<void*> ptrs_;
};

// A problem's weights, filled once and shared by all its checks (a layer of
// DeepSeek-V3 holds 22 GB of them), with the arranged copies made on first
// use: plain W1/W2 for the reference, shuffled or tiled copies for stages
// that read them. An fp8 problem's weights are e4m3 codes with fp32 scales
// (and per-tensor a static activation scale), drawn as the search's
// workloads draw theirs (measure/workload/workload.hpp) from other seeds.
class ProblemWeights {
 public:
  ProblemWeights(ft_runtime* rt, const Problem& p, std::uint64_t seed);
  const std::string& error() const { return error_; }
  const void* plain(int stage) const { return plain_[stage - 1]; }
  // The caller's scale buffers of an fp8 layer (null for 16-bit problems).
  void bind_scales(ft_layer_buffers& b) const {
    b.x_scale = x_scale_;
    b.w1_scales = scales_[0];
    b.w2_scales = scales_[1];
  }
  // The copy a plan's stage reads (plain, shuffled or tiled); null on failure.
  const void* arranged(int stage, int layout);

 private:
  std::size_t element_bytes() const { return fp8_ ? 1 : 2; }
  ft_runtime* rt_;
  Allocations mem_;
  bool fp8_ = false;
  void* plain_[2] = {nullptr, nullptr};
  float* scales_[2] = {nullptr, nullptr};
  float* x_scale_ = nullptr;
  void* copies_[2][3] = {};
  std::size_t rows_[2] = {}, cols_[2] = {};
  std::string error_;
};

// A row of a check and the plan of its (key, tokens), freed on scope exit;
// without a plan the row's summary says why (ft_runtime_select's message).
struct PlannedRow {
  CheckRow row;
  ft_runtime* rt;
  ft_plan* plan = nullptr;
  PlannedRow(ft_runtime* r, CheckRow first) : row(std::move(first)), rt(r) {
    if (ft_runtime_select(rt, row.problem.c_str(), row.tokens, &plan) != FT_OK) failed("select");
  }
  ~PlannedRow() { ft_plan_free(plan); }
  PlannedRow(const PlannedRow&) = delete;
  PlannedRow& operator=(const PlannedRow&) = delete;
  // The row, its summary "<what>: <the runtime's last error>".
  CheckRow failed(const std::string& what) {
    row.summary = what + ": " + ft_runtime_last_error(rt);
    return row;
  }
};

// A runtime handle, closed on scope exit.
struct RuntimeHandle {
  ft_runtime* rt = nullptr;
  ~RuntimeHandle() { ft_runtime_close(rt); }
};

// The routing of a check or soak launch (uniform, hot, zipf, one-empty, masked):
// ids [T, k] (-1 for masked slots) and weights.
Result<Routed> routing_for(const std::string& name, const ft_problem_shape& shape, int tokens, std::uint64_t seed);

// Tokens checked against the reference: all up to kFullReference, else that
// many -- the first, the last and the rest spread evenly between them.
inline constexpr int kFullReference = 1024;
std::vector<int> sample_tokens(int tokens);

// Fills a device buffer with the all-ones pattern: NaN in 16-bit and fp32
// data, a huge index in sorted_ids / block_experts.
bool poison(ft_runtime* rt, void* p, std::size_t bytes);

// The support unit's reference into y_ref (`bf16_layer`: the bf16 layer on the
// same weights, fp8 problems' sanity reference): on the layer's own buffers
// when every token is checked, else on the sampled tokens alone, their x rows,
// ids and weights copied into buffers of their own; on `stream`. An error
// text, empty when it launched.
std::string reference_into(ft_runtime* rt, const ft_plan* plan, Allocations& mem, const ft_layer_buffers& b,
                           const Routed& routed, const std::vector<int>& sampled, void* y_ref, bool bf16_layer = false,
                           void* stream = nullptr);
// Static-scale fp8 plans: b.inter_scale, a buffer of `mem`, set to the
// intermediate's scale calibrated on the sampled tokens (the tokens the
// reference checks, so none of theirs saturates), as a calibration pass
// before a layer runs sets it (Runtime::calibrate_inter_scale); nothing for
// the other plans. An error text, empty when done.
std::string calibrate_into(ft_runtime* rt, const ft_plan* plan, Allocations& mem, ft_layer_buffers& b, const Routed& routed,
                           const std::vector<int>& sampled, void* stream = nullptr);

// Y against the reference: every element written (finite), the sampled rows
// within the search's bounds. fp8 layers (`sane_bits` not empty): also within
// the sanity bound of the bf16 layer on the same dequantised weights.
void judge(CheckRow& row, const std::vector<std::uint16_t>& all, const std::vector<std::uint16_t>& ref_bits,
           const std::vector<int>& sampled, std::size_t H, DType dtype, const std::vector<std::uint16_t>& sane_bits = {});

// What every operation's row starts from, prepared by check_row the same way
// for each: the plan of (key, tokens), its shape and the routing drawn.
struct RowStart {
  const ft_plan* plan;
  ft_problem_shape shape;
  const Routed& routed;
  std::uint64_t seed;
  bool graph;  // capture the launch into a graph and replay it (the operations that can)
};

// check-export's rows by operation (layer/operation.hpp): an operation the
// runtime plans is a row of operation_checks(), and check_row runs any of them
// the same way -- select the plan, ask whether it has the operation, read its
// bucket and shape, draw the routing -- then the row's body. A new operation's
// check is a row and its body.
struct OperationCheck {
  const op::Operation& (*operation)();
  std::string_view pass;  // its rows' CheckRow::pass: "forward", "backward"
  // Whether a plan has the operation; null: every plan, and a row is reported
  // (saying why) even where no plan is selected.
  bool (*planned)(const ft_plan* plan);
  int (*bucket)(const ft_plan* plan);  // the bucket that serves it at the plan's T
  // Why its rows at T are not checked (a coverage note, after "<problem>: "); empty when they are.
  std::string (*unchecked)(const ft_problem_shape& shape, int tokens);
  // The check of one row once started: sets the row's verdict (passed, rel_l2,
  // summary), or returns it failed (PlannedRow::failed).
  CheckRow (*body)(PlannedRow& planned, ProblemWeights& weights, const RowStart& start);
};
// One row per operation of op::operations(), in its order.
std::span<const OperationCheck> operation_checks();
// The row of an operation; null when it has none.
const OperationCheck* check_of(const op::Operation& operation);

// One row of check-export on an open runtime: the operation of the plan of
// (key, tokens) under a routing, its outputs and workspace poisoned, against
// its reference (`graph`: captured and replayed, where the operation can). A
// plan without the operation is a failing row saying so.
CheckRow check_row(const op::Operation& operation, ft_runtime* rt, ProblemWeights& weights, const std::string& key, int tokens,
                   const std::string& routing, std::uint64_t seed, bool graph = false);

// The forward layer's body (op::moe_forward): ft_plan_launch_checked on poisoned
// output and workspace, against the support unit's reference kernels.
CheckRow check_forward(PlannedRow& planned, ProblemWeights& weights, const RowStart& start);

}  // namespace ft::check
