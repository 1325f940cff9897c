"""A fused-MoE layer in Triton, the peer bench/h200_peers.py tunes and times.

Three steps, all graph-capturable (no host syncs, shapes fixed by T, k, BLOCK_M):
  align   (torch)  slots (token, choice) sorted by expert, each expert's run
                   padded to a multiple of BLOCK_M with a pad id, the expert of
                   every M-block (-1 past the last one);
  stage 1 (Triton) h[slot] = silu(x[tok] @ W1[e, :I]^T) * (x[tok] @ W1[e, I:]^T), bf16;
  stage 2 (Triton) o[slot] = weight[slot] * (h[slot] @ W2[e]^T), fp32, one row per
                   slot, so no atomics; the k rows of a token are summed in torch.

Shapes: x [T, H] bf16, ids [T, k] int32, weights [T, k] fp32, W1 [E, 2I, H] bf16
(gate rows 0..I-1, up rows I..2I-1), W2 [E, H, I] bf16. A slot is t*k + j.
"""
import torch
import triton
import triton.language as tl

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages). Stage 1 keeps two fp32
# accumulators and stages an A tile plus two B tiles per pipeline stage, so
# wide tiles are paired with 8 warps and at most 3-4 stages (227 KiB of shared
# memory). Decode wants thin M-blocks and many N-tiles to stream the weights
# from every SM; prefill wants big tiles that reuse each weight tile.
CONFIGS_DECODE = [(16, 64, 128, 4, 4), (16, 64, 64, 4, 4), (16, 128, 128, 4, 3), (16, 128, 64, 4, 4)]
CONFIGS_MEDIUM = [(16, 64, 128, 4, 4), (16, 128, 64, 4, 4), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                  (64, 64, 128, 4, 3), (64, 128, 64, 8, 3)]
CONFIGS_PREFILL = [(64, 128, 64, 4, 4), (64, 128, 64, 8, 4), (128, 64, 64, 4, 4), (128, 128, 64, 8, 3),
                   (128, 128, 64, 8, 4), (128, 64, 128, 8, 3)]
GROUP_M = 8  # M-blocks that walk the N-tiles together, so their X rows and weight tiles stay in L2


def candidate_configs(slots, H, I):
    """The configs worth timing for this many (token, choice) slots; the
    kernels have no K/N masks, so tiles must divide H and I."""
    if slots <= 32:
        configs = CONFIGS_DECODE
    elif slots <= 1024:
        configs = CONFIGS_MEDIUM
    else:
        configs = CONFIGS_PREFILL
    return [c for c in configs if I % c[1] == 0 and H % c[1] == 0 and H % c[2] == 0 and I % c[2] == 0]


def config_name(cfg):
    bm, bn, bk, warps, stages = cfg
    return f"m{bm}n{bn}k{bk} w{warps} s{stages}"


def max_blocks(slots, experts, block_m):
    """Upper bound on the padded M-blocks: every block holds at least one real
    slot, and each expert adds at most block_m - 1 pad rows."""
    return min(slots, (slots + experts * (block_m - 1)) // block_m)


def align(ids, experts, block_m):
    """Sorted slot ids padded per expert (pad id = slot count) and the expert
    of each M-block (-1 for blocks past the last expert's run)."""
    flat = ids.reshape(-1).long()
    slots = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, device=ids.device, dtype=torch.long).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    # A slot's row = its expert's padded start + its rank among that expert's slots.
    rows = pad_start[sorted_e] + torch.arange(slots, device=ids.device) - start[sorted_e]
    n_blocks = max_blocks(slots, experts, block_m)
    sorted_ids = torch.full((n_blocks * block_m,), slots, device=ids.device, dtype=torch.int32)
    sorted_ids.scatter_(0, rows, order.to(torch.int32))
    block_first_row = torch.arange(n_blocks, device=ids.device) * block_m
    block_expert = torch.searchsorted(pad_end, block_first_row, right=True)
    block_expert = torch.where(block_expert < experts, block_expert, -1).to(torch.int32)
    return sorted_ids, block_expert


@triton.jit
def _tile_of(pid, num_m, num_n, GROUP_M: tl.constexpr):
    """Program id -> (M-block, N-tile), GROUP_M M-blocks sharing each N-tile in turn."""
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    local = pid % per_group
    return first_m + local % group_m, local // group_m


@triton.jit(do_not_specialize=["slots", "num_m"])
def _stage1(x_ptr, w1_ptr, h_ptr, sorted_ids_ptr, block_expert_ptr,
            slots, num_m, H, I,
            stride_x, stride_we, stride_wn, stride_h,
            TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_of(tl.program_id(0), num_m, I // BLOCK_N, GROUP_M)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:
        return
    slot = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    real = slot < slots
    tok = tl.where(real, slot // TOPK, 0)  # pad rows read token 0 and are never stored
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + tok[:, None] * stride_x + offs_k[None, :]
    # W1 rows are contiguous in H, so a [BLOCK_K, BLOCK_N] tile is W1^T.
    g_ptrs = w1_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]
    u_ptrs = g_ptrs + I * stride_wn
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, H // BLOCK_K):
        a = tl.load(a_ptrs)
        acc_g = tl.dot(a, tl.load(g_ptrs), acc=acc_g)
        acc_u = tl.dot(a, tl.load(u_ptrs), acc=acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    h_ptrs = h_ptr + slot[:, None].to(tl.int64) * stride_h + offs_n[None, :]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=real[:, None])


@triton.jit(do_not_specialize=["slots", "num_m"])
def _stage2(h_ptr, w2_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr,
            slots, num_m, H, I,
            stride_h, stride_we, stride_wn, stride_out,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_of(tl.program_id(0), num_m, H // BLOCK_N, GROUP_M)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:
        return
    slot = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    real = slot < slots
    row = tl.where(real, slot, 0)  # pad rows read slot 0's h and are never stored
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = h_ptr + row[:, None].to(tl.int64) * stride_h + offs_k[None, :]
    b_ptrs = w2_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, I // BLOCK_K):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc=acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    acc = acc * tl.load(weights_ptr + row, mask=real, other=0.0)[:, None]
    out_ptrs = out_ptr + row[:, None].to(tl.int64) * stride_out + offs_n[None, :]
    tl.store(out_ptrs, acc, mask=real[:, None])


def moe_layer(x, ids, weights, w1, w2, cfg):
    """The whole layer (align, stage 1, stage 2, sum over k) for one config;
    returns y [T, H] bf16."""
    block_m, block_n, block_k, warps, stages = cfg
    T, H = x.shape
    E, two_i, _ = w1.shape
    I = two_i // 2
    topk = ids.shape[1]
    slots = T * topk
    # The kernels index rows with unit inner strides and weights by slot.
    assert x.stride(1) == 1 and w1.is_contiguous() and w2.is_contiguous() and weights.is_contiguous()
    sorted_ids, block_expert = align(ids, E, block_m)
    num_m = block_expert.numel()
    h = torch.empty(slots, I, device=x.device, dtype=torch.bfloat16)
    _stage1[(num_m * (I // block_n),)](
        x, w1, h, sorted_ids, block_expert, slots, num_m, H, I,
        x.stride(0), w1.stride(0), w1.stride(1), h.stride(0),
        TOPK=topk, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        num_warps=warps, num_stages=stages)
    out = torch.empty(slots, H, device=x.device, dtype=torch.float32)
    _stage2[(num_m * (H // block_n),)](
        h, w2, out, sorted_ids, block_expert, weights, slots, num_m, H, I,
        h.stride(0), w2.stride(0), w2.stride(1), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        num_warps=warps, num_stages=stages)
    return out.view(T, topk, H).sum(1).to(torch.bfloat16)
