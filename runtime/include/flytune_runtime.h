/* flytune runtime: loads a folder written by `flytune export` (manifest.json,
 * code objects, docs/EXPORT.md) and launches a whole MoE layer on a stream with
 * CUDA or HIP (both opened with dlopen). C API; every function returns 0 on
 * success or a nonzero ft_status, with the message in ft_runtime_last_error.
 * No C++ exception leaves these functions; the host process is never aborted.
 *
 * Launching (ft_plan_launch) does no host synchronisation and no allocation:
 * the steps the export recorded (the layer program: a memset for atomic
 * reductions and four kernel launches) on the given stream, so it can be
 * captured into a CUDA/HIP graph.
 *
 * Routing ids (topk_ids): an expert in [0, experts), or -1 for "no expert
 * here" (expert-parallel serving masks the slots of other ranks this way);
 * such a slot contributes nothing to y. Any other value is left out as well
 * and counted into ft_layer_buffers.bad_ids when given (ft_plan_launch_checked
 * reports it); it is never used to index memory.
 *
 * ABI (docs/EXPORT.md, "The runtime's promises"): libflytune_runtime.so.1
 * (soname), symbols versioned FLYTUNE_RUNTIME_1.0 (flytune_runtime.map). Within
 * one major version nothing is removed or changed: functions and fields are
 * only added. The one struct the caller fills, ft_layer_buffers, reaches the
 * library with its size (ft_plan_launch below passes sizeof), so fields
 * appended later read as zero from a caller built before them; the structs the
 * library fills (ft_workspace_sizes, ft_problem_shape) never change -- new
 * facts come as new functions. tests/abi/ holds every earlier header and runs
 * a caller of each against this library. */
#ifndef FLYTUNE_RUNTIME_H
#define FLYTUNE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ft_runtime ft_runtime;
typedef struct ft_plan ft_plan;

/* The ABI this header describes: major (the soname's number) and minor (what
 * was added within it). A caller may check ft_runtime_abi_version() at start:
 * the same major and a minor at least its own. */
#define FT_RUNTIME_ABI_MAJOR 1
#define FT_RUNTIME_ABI_MINOR 2
#define FT_RUNTIME_ABI_VERSION ((FT_RUNTIME_ABI_MAJOR << 16) | FT_RUNTIME_ABI_MINOR)
/* The library's FT_RUNTIME_ABI_VERSION (it may be newer than the header's). */
uint32_t ft_runtime_abi_version(void);

typedef enum ft_status {
  FT_OK = 0,
  FT_ERR_MANIFEST = 1,    /* missing, malformed or unsupported manifest */
  FT_ERR_FILE = 2,        /* a file outside the export folder, missing or unreadable */
  FT_ERR_HASH = 3,        /* a code object whose bytes do not hash to its recorded name */
  FT_ERR_TARGET = 4,      /* the export's target is not the device's */
  FT_ERR_DEVICE = 5,      /* no GPU, or the GPU runtime failed */
  FT_ERR_NOT_FOUND = 6,   /* unknown problem key */
  FT_ERR_ARGUMENT = 7,    /* a bad argument (null buffer, T < 1, routing ids outside [-1, experts), ...) */
  FT_ERR_INTERNAL = 8     /* an unexpected failure inside the runtime (out of host memory, ...) */
} ft_status;

/* The layouts a stage may read its weights in (docs/EXPORT.md, weight_layouts). */
typedef enum ft_weight_layout {
  FT_WEIGHT_LAYOUT_PLAIN = 0,     /* row-major, as given */
  FT_WEIGHT_LAYOUT_SHUFFLED = 1,  /* 16-row x 8-column blocks */
  FT_WEIGHT_LAYOUT_TILED = 2      /* 64-column slices, 128-byte swizzle (sm_90a producer-warpgroup kernels) */
} ft_weight_layout;

/* Device pointers of one layer call. Fields are only ever appended, and the
 * launch calls pass sizeof(ft_layer_buffers) to the library, which reads that
 * many bytes and takes every field beyond them as NULL / 0 (so a program built
 * against an earlier header keeps working when fields are added; a program
 * built against a newer header than the library is refused if it set a field
 * the library does not know). Zero-initialise the struct ({0} / {}) so the
 * fields you do not use are NULL. The workspace comes either as one buffer
 * (`workspace`, at least ft_plan_workspace_bytes, 256-byte aligned; the
 * runtime carves every workspace buffer of the plan from it -- the way to
 * call layers whose plans need buffers added after your code was written) or,
 * when `workspace` is NULL, as the five named pointers (sizes:
 * ft_plan_workspace). */
typedef struct ft_layer_buffers {
  const void* x;              /* [T, hidden] bf16/f16 */
  const int32_t* topk_ids;    /* [T, topk] */
  const float* topk_weights;  /* [T, topk] */
  const void* w1;             /* [experts, 2*inter, hidden] plain (row-major) */
  const void* w2;             /* [experts, hidden, inter] plain */
  const void* w1_shuffled;    /* w1 after ft_runtime_shuffle_weights; needed where a plan's stage 1 says shuffled */
  const void* w2_shuffled;    /* w2 likewise for stage 2 */
  void* inter;                /* workspace */
  float* y_acc;               /* workspace */
  int32_t* sorted_ids;        /* workspace */
  int32_t* block_experts;     /* workspace */
  int32_t* padded_rows;       /* workspace */
  void* y;                    /* [T, hidden] output */
  const void* w1_tiled;       /* w1 after ft_runtime_arrange_weights(..., FT_WEIGHT_LAYOUT_TILED, ...); needed where stage 1 says tiled */
  const void* w2_tiled;       /* w2 likewise for stage 2 */
  int32_t* bad_ids;           /* optional [1]: the layer writes the count of topk_ids outside [-1, experts) */
  void* workspace;            /* optional: one workspace for all of the plan's workspace buffers */
  size_t workspace_bytes;     /* its size */
  /* fp8 layers (ft_plan_scales != FT_SCALES_NONE; NULL in 16-bit layers): fp32
   * scales, a weight value being code * scale. Counts: ft_plan_scale_count;
   * shapes (row-major) by mode -- per-tensor: x_scale [1] (the static
   * activation scale: x is quantised as x / x_scale), w1_scales [experts],
   * w2_scales [experts]; per-token (activations scaled per token on the
   * device, weights per output channel): w1_scales [experts, 2*inter],
   * w2_scales [experts, hidden]; block128 (activations per 1 x 128 group on
   * the device, weights per 128 x 128 block): w1_scales [experts, 2*inter/128,
   * hidden/128], w2_scales [experts, hidden/128, inter/128]; static: as
   * per-tensor, and inter_scale below. fp8 layers take their workspace as one
   * buffer (`workspace`): their quantise buffers have no named field. */
  const float* x_scale;
  const float* w1_scales;
  const float* w2_scales;
  /* ABI 1.1, fp8 static mode only (NULL otherwise): [1] the static scale of
   * the intermediate h (stage 1 stores h as e4m3 codes of h / inter_scale,
   * saturating), as an FP8 checkpoint's input scale of w2 ships it. */
  const float* inter_scale;
} ft_layer_buffers;

/* Each workspace buffer starts at a multiple of this many bytes in ft_layer_buffers::workspace. */
#define FT_WORKSPACE_ALIGN 256

typedef struct ft_workspace_sizes {
  size_t inter, y_acc, sorted_ids, block_experts, padded_rows; /* bytes */
} ft_workspace_sizes;

/* Threads: one runtime (and its plans) may be used by several host threads at
 * once, on streams of their own or shared; no call keeps state in the handle
 * that another call writes. Only closing is exclusive: ft_plan_free and
 * ft_runtime_close must not overlap a call on that plan or runtime, and no plan
 * of a closed runtime may be used (free it, before or after). */

/* Opens an export folder on the first GPU of the export's target (HIP first,
 * then CUDA; the first GPU where none is of it), or on the device
 * FLYTUNE_DEVICE names ("cuda:0", "hip:1"). Refuses -- with one line in
 * err and nothing loaded -- a manifest naming files outside the folder, code
 * objects that do not hash to their names, an export for another target. */
int ft_runtime_open(const char* export_dir, ft_runtime** out, char* err, size_t errlen);
/* The same on a named device ("cuda:0"; NULL or "" as ft_runtime_open). */
int ft_runtime_open_on(const char* export_dir, const char* device, ft_runtime** out, char* err, size_t errlen);
void ft_runtime_close(ft_runtime* rt);
/* The message of this thread's last failing call, when that call was on `rt`
 * ("" otherwise: read it on the failing thread, before its next failing call);
 * with NULL, of this thread's last failing call that had no runtime handle
 * (null arguments, ft_runtime_open). Never NULL. */
const char* ft_runtime_last_error(const ft_runtime* rt);
const char* ft_runtime_target(const ft_runtime* rt);
/* The problems the export serves (keys as Problem::key(), docs/EXPORT.md). */
int ft_runtime_problem_count(const ft_runtime* rt);
const char* ft_runtime_problem_key(const ft_runtime* rt, int index);
/* The tuned token buckets of problem `problem_index`, ascending; 0 / 0 for a
 * bad index. */
int ft_runtime_bucket_count(const ft_runtime* rt, int problem_index);
int ft_runtime_bucket_tokens(const ft_runtime* rt, int problem_index, int bucket_index);

typedef struct ft_problem_shape {
  int experts, hidden, inter, topk;
  int element_bytes;   /* bytes of a weight element: 2, or 1 in fp8 layers (x and y are bf16 there) */
  const char* dtype;   /* the weights' format: "bf16", "f16", "e4m3" (OCP, max 448) or "e4m3fnuz" (gfx942: max 240) */
} ft_problem_shape;

/* How an fp8 layer's values are scaled (ft_plan_scales; the problem key's
 * "e4m3:<mode>"). */
typedef enum ft_scales {
  FT_SCALES_NONE = 0,        /* a bf16 / f16 layer */
  FT_SCALES_PER_TENSOR = 1,  /* one static activation scale, one scale per expert's W1 and W2 */
  FT_SCALES_PER_TOKEN = 2,   /* dynamic per-token activation scales, per-output-channel weight scales */
  FT_SCALES_BLOCK128 = 3,    /* dynamic 1 x 128 activation groups, 128 x 128 weight blocks (DeepSeek-V3) */
  FT_SCALES_STATIC = 4       /* ABI 1.1: per-tensor, with the caller's static intermediate scale too (inter_scale):
                                as FP8 checkpoints ship them; stage 1 quantises on store, no quantise step between */
} ft_scales;

/* The caller's scale tensors of an fp8 layer (ft_plan_scale_count). */
typedef enum ft_scale_tensor { FT_SCALE_X = 0, FT_SCALE_W1 = 1, FT_SCALE_W2 = 2, FT_SCALE_INTER = 3 /* ABI 1.1 */ } ft_scale_tensor;

/* The kernels for (problem, T): the smallest tuned bucket >= T, else the
 * largest. The plan stays valid until ft_plan_free or ft_runtime_close. */
int ft_runtime_select(ft_runtime* rt, const char* problem_key, int tokens, ft_plan** out);
void ft_plan_free(ft_plan* plan);
int ft_plan_bucket(const ft_plan* plan);             /* the tuned bucket chosen */
int ft_plan_tokens(const ft_plan* plan);
void ft_plan_shape(const ft_plan* plan, ft_problem_shape* out);
/* The plan's scale mode (ft_scales); FT_SCALES_NONE for a null plan. */
int ft_plan_scales(const ft_plan* plan);
/* fp32 values the caller's scale tensor `which` (ft_scale_tensor) holds for
 * this plan (shapes: ft_layer_buffers); 0 where the layer reads none (16-bit
 * layers; x_scale outside per-tensor and static mode, inter_scale outside
 * static mode) or for a bad argument. */
size_t ft_plan_scale_count(const ft_plan* plan, int which);
/* Its shape (row-major, ft_layer_buffers lists them by mode): the rank (0, 1,
 * 2 or 3; 0 as for ft_plan_scale_count) and that many dims in dims[0..2]. */
int ft_plan_scale_shape(const ft_plan* plan, int which, int64_t dims[3]);
/* 1 where that stage (1 or 2) reads pre-shuffled weights. */
int ft_plan_needs_shuffled(const ft_plan* plan, int stage);
/* 1 where that stage (1 or 2) reads tiled weights (0 for a stage that reads the plain ones through a tensor map). */
int ft_plan_needs_tiled(const ft_plan* plan, int stage);
void ft_plan_workspace(const ft_plan* plan, ft_workspace_sizes* out);
/* Bytes of one workspace holding every workspace buffer of the plan
 * (ft_layer_buffers::workspace); 0 for a null plan. */
size_t ft_plan_workspace_bytes(const ft_plan* plan);
/* Workspace buffer `index` (0, 1, ... while it returns 1) of the plan: its
 * name ("inter", "y_acc", ...), offset in the workspace and size in bytes. */
int ft_plan_workspace_buffer(const ft_plan* plan, int index, const char** name, size_t* offset, size_t* bytes);
/* The calls that take ft_layer_buffers, with the size of the caller's struct
 * (`buffers_size`: sizeof(ft_layer_buffers) as the caller was compiled; at
 * least the 104 bytes of the first release's 13 pointers, a multiple of 8, at
 * most 4096; bytes beyond the fields this library knows must be zero). Call
 * them through the inline functions below, which pass the size; from other
 * languages (ctypes, ...) call these with the size of your struct. The
 * unsized symbols ft_plan_launch, ft_plan_launch_checked and ft_plan_reference
 * stay in the library for programs built against a header before ABI 1: they
 * read only the first 13 pointers (every such header had them; a plan needing
 * a later field -- tiled weights, one workspace, fp8 scales -- is then refused
 * with FT_ERR_ARGUMENT: rebuild such a program against this header). */
int ft_plan_launch_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* stream);
int ft_plan_launch_checked_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* stream,
                                 int32_t* bad_ids_out);
int ft_plan_reference_sized(const ft_plan* plan, const ft_layer_buffers* buffers, size_t buffers_size, void* y_ref,
                            void* stream);

/* Enqueues the layer on `stream` (CUstream / hipStream_t; NULL: the default stream). */
static inline int ft_plan_launch(const ft_plan* plan, const ft_layer_buffers* buffers, void* stream) {
  return ft_plan_launch_sized(plan, buffers, sizeof(ft_layer_buffers), stream);
}
/* The same, then waits for `stream` and checks the routing: FT_ERR_ARGUMENT
 * when any topk id lies outside [-1, experts) (their count in *bad_ids_out
 * when not NULL). Uses buffers->bad_ids when given, else a word it allocates
 * for the call. For debugging and tests: it synchronises, so it is not
 * graph-capturable. */
static inline int ft_plan_launch_checked(const ft_plan* plan, const ft_layer_buffers* buffers, void* stream,
                                         int32_t* bad_ids_out) {
  return ft_plan_launch_checked_sized(plan, buffers, sizeof(ft_layer_buffers), stream, bad_ids_out);
}

/* Writes src [rows, cols] (row-major, 16-bit elements) to dst in the shuffled
 * layout (docs/EXPORT.md); asynchronous on `stream`. For w1: rows =
 * experts*2*inter, cols = hidden; for w2: rows = experts*hidden, cols = inter. */
int ft_runtime_shuffle_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, void* stream);
/* The same for any layout a stage may need: `layout` FT_WEIGHT_LAYOUT_SHUFFLED
 * (rows a multiple of 16, cols of 8) or FT_WEIGHT_LAYOUT_TILED (rows a multiple
 * of 16, cols of 64); other values are FT_ERR_ARGUMENT. src and dst must not
 * overlap. */
int ft_runtime_arrange_weights(ft_runtime* rt, const void* src, void* dst, int rows, int cols, int layout, void* stream);

/* The same for weights of `element_bytes` (2, or 1 for fp8 codes: a row of
 * `cols` codes is arranged as the 16-bit matrix of its cols/2 byte pairs, so
 * cols must be a multiple of 16 (shuffled) or 128 (tiled)). */
int ft_runtime_arrange_weights_of(ft_runtime* rt, const void* src, void* dst, int rows, int cols, int element_bytes, int layout,
                                  void* stream);

/* Helpers for programs without their own GPU runtime code (examples, checks). */
int ft_runtime_alloc(ft_runtime* rt, size_t bytes, void** out);
int ft_runtime_free(ft_runtime* rt, void* p);
int ft_runtime_upload(ft_runtime* rt, void* dst, const void* src, size_t bytes);
int ft_runtime_download(ft_runtime* rt, void* dst, const void* src, size_t bytes);
int ft_runtime_synchronize(ft_runtime* rt, void* stream);
/* Seeded random 16-bit values (the search's fill kernel), scaled by `scale`. */
int ft_runtime_fill_random(ft_runtime* rt, void* dst, size_t count, uint64_t seed, float scale);
/* What ft_runtime_fill_random_as writes. */
typedef enum ft_fill_kind {
  FT_FILL_BF16 = 0,        /* 16-bit bf16 values: random normal x scale */
  FT_FILL_F16 = 1,         /* 16-bit f16 values */
  FT_FILL_FP8_CODES = 2,   /* one byte each: e4m3 codes of random normal x scale in the export's fp8 format */
  FT_FILL_F32_SCALES = 3   /* fp32: positive random scales around `scale` (for weight scales) */
} ft_fill_kind;
/* Seeded random values of a kind; `group` > 0 (16-bit kinds): every `group`
 * consecutive values share a random magnitude, so neighbouring 128-value
 * scale groups differ. FT_FILL_FP8_CODES needs an export with an fp8 problem. */
int ft_runtime_fill_random_as(ft_runtime* rt, void* dst, size_t count, uint64_t seed, float scale, int kind, int group);
/* The support unit's reference kernels for the plan's problem and T: writes
 * the reference intermediate to buffers->inter and the output to y_ref
 * (plain weights; no workspace other than inter). fp8 plans: the dequantised
 * fp32 reference (activations quantised as the layer does, the intermediate
 * quantised in 1 x 128 groups as stage 2 reads it); it needs the scales,
 * allocates its scratch itself and waits for `stream` before returning. */
static inline int ft_plan_reference(const ft_plan* plan, const ft_layer_buffers* buffers, void* y_ref, void* stream) {
  return ft_plan_reference_sized(plan, buffers, sizeof(ft_layer_buffers), y_ref, stream);
}

/* Host memory, no runtime needed: converts an OCP e4m3 checkpoint tensor
 * (float8_e4m3fn codes) in place for gfx942, which reads e4m3fnuz. The same
 * bits mean half the value in fnuz, so every code is kept and every one of
 * its `scale_count` scales doubled (any granularity: per tensor, channel or
 * block); OCP -0 (0x80, fnuz's NaN) becomes +0 and OCP NaNs become fnuz NaN
 * (their count in *nans_out when not NULL). FT_ERR_ARGUMENT for null
 * pointers or a scale that is not finite when doubled (nothing is changed then). */
int ft_fp8_ocp_to_fnuz(uint8_t* codes, size_t count, float* scales, size_t scale_count, size_t* nans_out);

/* How a plan's T is served (ft_plan_coverage). */
typedef enum ft_coverage {
  FT_COVERAGE_TUNED = 0,          /* by the bucket meant for it: the smallest tuned bucket >= T */
  FT_COVERAGE_ABOVE_LARGEST = 1,  /* T is above every bucket of the export: by the largest tuned bucket */
  FT_COVERAGE_MISSING_BUCKET = 2  /* the bucket meant for T has no layer (the search found none; the export was
                                     written with --allow-missing, manifest missing_buckets): by another bucket */
} ft_coverage;
/* The plan's ft_coverage; -1 for a null plan. Decided once, at ft_runtime_select. */
int ft_plan_coverage(const ft_plan* plan);
/* One line saying how the plan's T is served when it is not FT_COVERAGE_TUNED
 * ("T=16384 is served by the T=4096 bucket's kernels: bucket T=16384 has no
 * layer ..."); "" when tuned or for a null plan. Valid while the plan is. */
const char* ft_plan_coverage_note(const ft_plan* plan);

/* The backward (docs/EXPORT.md, "The backward"): an export of flytune search
 * --pass backward|both holds, per problem, backward buckets beside the
 * forward's; a plan then carries the backward program for its T (from the
 * smallest backward bucket >= T, else the largest). It reads what the forward
 * read and saved, and dL/dy; it writes fp32 gradients (dW1 and dW2 in the
 * forward's dtype instead where dw1_16 / dw2_16 are given). The caller's struct
 * reaches the library with its size, like ft_layer_buffers (fields are only
 * appended; zero-initialise it). */
typedef struct ft_layer_grads {
  const void* x;              /* [T, hidden] the forward's input, bf16/f16 */
  const int32_t* topk_ids;    /* [T, topk] the forward's routing (-1: an empty slot) */
  const float* topk_weights;  /* [T, topk] */
  const void* w1;             /* [experts, 2*inter, hidden] plain (row-major) */
  const void* w2;             /* [experts, hidden, inter] plain */
  const void* dy;             /* [T, hidden] dL/dy, the forward's dtype */
  const void* saved_gate_up;  /* [T*topk, 2*inter] each pair's gate then up pre-activations (row = token*topk + slot) */
  const void* saved_inter;    /* [T*topk, inter] each pair's silu(gate) * up, without the routed weight */
  float* dx;                  /* [T, hidden] fp32 out: dL/dx */
  float* dw1;                 /* [experts, 2*inter, hidden] fp32 out: dL/dw1 (every element written) */
  float* dw2;                 /* [experts, hidden, inter] fp32 out: dL/dw2 (every element written) */
  float* d_topk_weights;      /* [T, topk] fp32 out: dL/dtopk_weights (0 for a slot without an expert) */
  void* workspace;            /* ft_plan_backward_workspace_bytes of it, 256-byte aligned; the runtime carves it */
  size_t workspace_bytes;     /* its size */
  int32_t* bad_ids;           /* optional [1]: the count of topk_ids outside [-1, experts) */
  /* ABI 1.2: the weight gradients in the forward's dtype (bf16/f16), rounded from the
   * fp32 accumulators once, with no fp32 copy and no cast pass. Where one is non-null
   * the backward writes it (every element) instead of dw1 (dw2), which may then be
   * NULL; NULL keeps the fp32 output. 16-byte aligned. FT_ERR_NOT_FOUND where the
   * export's backward kernels predate them (an earlier flytune compiled them). */
  void* dw1_16;               /* [experts, 2*inter, hidden] 16-bit out: dL/dw1 */
  void* dw2_16;               /* [experts, hidden, inter] 16-bit out: dL/dw2 */
} ft_layer_grads;

/* 1 where the plan has a backward (the export holds one for its problem), else 0. */
int ft_plan_has_backward(const ft_plan* plan);
/* The backward bucket the plan's backward comes from; 0 without one. */
int ft_plan_backward_bucket(const ft_plan* plan);
/* ABI 1.2: 1 where the plan's backward writes dW1 / dW2 in the forward's dtype when
 * ft_layer_grads' dw1_16 / dw2_16 are given; 0 where the export's backward kernels
 * predate them (a launch with them answers FT_ERR_NOT_FOUND: pass dw1, dw2 in fp32)
 * or the plan has no backward. A caller picks its outputs by it before launching. */
int ft_plan_backward_takes_dw16(const ft_plan* plan);
/* Bytes of the workspace (ft_layer_grads::workspace) the plan's backward needs
 * at `tokens` tokens (its bucket's kernels; the plan's own T for the launch).
 * It never decreases with T, so one workspace sized for the largest T a caller
 * will plan serves every plan of that bucket up to it. 0, with the reason in
 * ft_runtime_last_error, for a plan without a backward or T outside [1, 2^24]. */
size_t ft_plan_backward_workspace_bytes(const ft_plan* plan, int tokens);
/* Enqueues the backward at the plan's T on `stream`: no host synchronisation,
 * no allocation (graph-capturable). dx and d_topk_weights are cleared by the
 * backward itself. FT_ERR_NOT_FOUND for a plan without a backward;
 * FT_ERR_ARGUMENT, naming them, for null buffers it reads or writes, a short
 * workspace, or a struct size that is not one (`grads_size`: sizeof, a multiple
 * of 8, at least this first version's 120 bytes, at most 4096). */
int ft_plan_backward_launch_sized(const ft_plan* plan, const ft_layer_grads* grads, size_t grads_size, void* stream);
/* Recomputes the saved tensors (saved_gate_up, saved_inter; written through
 * those pointers) from x, topk_ids and w1 with the support unit's plain
 * kernel, asynchronously on `stream`: for a forward run through ft_plan_launch,
 * which keeps none (docs/EXPORT.md says what it costs). */
int ft_plan_backward_saved_sized(const ft_plan* plan, const ft_layer_grads* grads, size_t grads_size, void* stream);

static inline int ft_plan_backward_launch(const ft_plan* plan, const ft_layer_grads* grads, void* stream) {
  return ft_plan_backward_launch_sized(plan, grads, sizeof(ft_layer_grads), stream);
}
static inline int ft_plan_backward_saved(const ft_plan* plan, const ft_layer_grads* grads, void* stream) {
  return ft_plan_backward_saved_sized(plan, grads, sizeof(ft_layer_grads), stream);
}

#ifdef __cplusplus
}
#endif

#endif /* FLYTUNE_RUNTIME_H */
