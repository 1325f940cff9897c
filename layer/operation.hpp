#pragma once
// The operation registry: each operation flytune generates, verifies, times
// and exports kernels for, as a row of data above the kernel families
// (generator/family.hpp). An operation lists
//   - its roles: the stages whose kernels the search chooses among the
//     families' variants for that role, in the order a recipe holds them;
//   - its buffers: rows of layer/buffers.def (name, MoeArgs member, C type,
//     place, meaning, size rule);
//   - its support kernels: rows of layer/support_kernels.def (the support
//     unit's entries, which program step runs each);
//   - its reference: per stage, the support kernel verification checks the
//     stage's output against;
//   - its recipe: a LayerRecipe holds one stage variant per role (or one
//     alone), and `build` turns a recipe and a token count into the launch
//     sequence (layer/program.hpp) that the search times, the export records
//     and the runtime runs.
// The forward MoE layer is the first row (op::moe_forward()); its database
// kinds, manifest keys and goldens are those it had before the registry. The
// backward is the second (op::moe_backward(), layer/backward.hpp): its roles
// are filled by backward GEMM configurations (generator/backward_gemm.hpp,
// LayerRecipe::grad) rather than stage family variants, so they are rows of
// their own kind (GradRole), and its reference is the CPU backward.
//
// The API is plain data: spans over constant tables, string views, function
// pointers. Nothing here allocates, throws or holds state; a new operation is
// one more table row and its own .def rows (docs/ARCHITECTURE.md, "What a
// change costs").
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/backward_gemm.hpp"
#include "generator/family.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "layer/program.hpp"

namespace ft {

// The support kernels (layer/support_kernels.def), in its order.
enum class Support : std::uint8_t {
#define FT_SUPPORT(name, use, presence, entry, meaning) name,
#include "layer/support_kernels.def"
#undef FT_SUPPORT
};
inline constexpr std::size_t kSupportCount = 0
#define FT_SUPPORT(name, use, presence, entry, meaning) +1
#include "layer/support_kernels.def"
#undef FT_SUPPORT
    ;
// Which units hold a support kernel (the presence column).
enum class SupportPresence : std::uint8_t { always, partials16, wide_align, fp8, saved };
struct SupportInfo {
  std::string_view name;       // the manifest's symbol key
  std::optional<Role> role;    // the program step that launches it; none: verification, arrangement
  SupportPresence presence;
  std::string_view meaning;
};
const SupportInfo& support_info(Support s);
std::string_view to_string(Support s);
std::optional<Support> parse_support(std::string_view name);
// Its entry point in the unit of (target, dtype) (generator/emitter.hpp).
std::string support_entry(Support s, const Target& t, DType d);
// The support kernel a launch role runs; none for the stage roles.
std::optional<Support> support_of(Role r);

namespace op {

// One role of an operation.
struct Stage {
  StageRole role;
  std::string_view name;  // "stage1": its step, its key in the manifest's "stages", its store kind's role
  Role launch;            // the launch role of the step that runs it
  Support reference;      // the kernel its output is checked against
  std::string_view meaning;
};

// The problem size a backward GEMM dimension is.
enum class Extent : std::uint8_t { hidden, inter, two_inter };  // H, I, 2I
int extent(Extent e, int hidden, int inter);

// A pointer of a backward step's argument struct (an ft::KGroupedArgs or
// ft::DgradArgs, templates/ft/moe_backward_args.hpp) that a role's row binds
// to a buffer; the pointers it binds none to are null, and every role's
// struct gets the align's sorted rows (sorted_ids, block_experts,
// padded_rows) beside them.
enum class Operand : std::uint8_t {
  a,          // A's rows (KGroupedArgs::a, DgradArgs::a)
  b,          // wgrad: B's rows (KGroupedArgs::b)
  w,          // dgrad: the weights, read transposed (DgradArgs::w)
  scales,     // A's per-pair scales (KGroupedArgs::a_scales, DgradArgs::row_scales); none: 1
  gate_up,    // dgrad: the forward's saved pre-activations (the SwiGLU backward)
  d_gate_up,  // written, dgrad: [dgate; dup]
  d_weights,  // added into, dgrad: d(topk_weights)
  dx,         // added into, dgrad: dX (the scatter)
  c,          // written, wgrad: C_e in fp32
  c16,        // written instead of c when bound, wgrad: C_e in the 16-bit type (KGroupedArgs::c16)
};
std::string_view to_string(Operand o);
// Whether the kernel writes (or adds into) what it is bound to.
bool is_output(Operand o);
// Whether a GEMM's argument struct has the pointer (wgrad: a, b, scales, c, c16;
// dgrad: the others; the swiglu and scatter epilogues share the struct).
bool takes(BackwardOp gemm, Operand o);

struct Binding {
  Operand operand;
  Buf buffer;
};

// One role of the backward: the backward GEMM configuration that fills it
// (LayerRecipe::grad), the GEMM's sizes on a problem and which buffer each
// pointer of its step's argument struct is bound to (layer/backward.hpp,
// backward_kernel_args, reads these and nothing else).
struct GradRole {
  Role launch;     // its step, by to_string(launch) its name ("dgrad2")
  BackwardOp gemm;  // what its configuration runs
  Extent m, n;     // wgrad: C_e [m, n]; dgrad: the reduction K = m into n columns
  std::span<const Binding> operands;  // each pointer it takes once, every one `takes(gemm, ...)`
  // A's (B's) rows are a token's, read by pair p at row p / k, not one per pair
  // (a_per_token, b_per_token of the struct; dgrad has no B: false).
  bool a_per_token, b_per_token;
  // The buffer its fp32 atomics add into, zeroed by a "clear_<buffer>" step
  // before the align (none: every element is written).
  std::optional<Buf> clears;
  std::string_view meaning;

  // What its step reads: its input operands' buffers, then the sorted rows.
  std::vector<Buf> reads() const;
  // What its step writes or adds into: its output operands' buffers.
  std::vector<Buf> writes() const;
};

struct Operation {
  std::string_view name;     // "moe_forward"
  std::string_view meaning;
  std::span<const Stage> stages;     // in recipe order (LayerRecipe::stages); empty for the backward
  std::span<const GradRole> grad;    // the backward's roles in recipe order (LayerRecipe::grad); empty for the forward
  // The reference its outputs are checked against when it is not a stage's
  // support kernel: a CPU function above this layer, named (the backward's:
  // every role's writes against the gradients of the same name).
  std::string_view host_reference;
  std::span<const Buf> buffers;      // every buffer a program of it may read or write
  std::span<const Support> support;  // its support unit's kernels
  // The launch sequence of a recipe at T (Errc::invalid_input for a recipe
  // of other roles, or one that cannot run).
  Result<LayerProgram> (*build)(const LayerRecipe& recipe, int tokens);

  const Stage* stage(StageRole role) const;      // null: not a role of this operation
  const Stage* find_stage(std::string_view name) const;
  const GradRole* grad_role(Role launch) const;  // null: not a backward role of this operation
};

// A kernel one of a recipe's roles runs, whatever configures it (a stage's
// family variant, a backward GEMM configuration): the export ships its code
// object and the runtime loads it by these.
struct RoleKernel {
  Role launch;          // the step role that runs it
  std::string symbol;   // its entry: the configuration's name, the store's kernel name
  int lds_bytes = 0;    // the dynamic shared memory its function is allowed (0: none above the default)
};
// The kernels of a recipe in its operation's role order: a forward recipe's
// stage variants, a backward recipe's GEMM configurations.
std::vector<RoleKernel> role_kernels(const LayerRecipe& r);
// The operation a recipe is of: the backward's when it holds backward roles.
const Operation& operation_of(const LayerRecipe& r);

// The buffer a backward role writes instead of `b` when the caller binds it
// (a wgrad role's c16 for its c: dw1_16 for dw1, dw2_16 for dw2), or none: a
// program needs `b` only where that one is not given (check_buffers).
std::optional<Buf> written_instead(Buf b);
// Whether `b` is one of those (dw1_16, dw2_16): a program needs it only where the caller asks for it.
bool stands_in(Buf b);

// Every operation, the forward MoE layer first, then its backward.
std::span<const Operation* const> operations();
const Operation& moe_forward();
const Operation& moe_backward();
const Operation* find(std::string_view name);  // null when none has this name

}  // namespace op
}  // namespace ft
