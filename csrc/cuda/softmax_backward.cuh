// Softmax backward: grad_x = out * (grad - sum(grad * out)) along each row.
//
// The same strategies as the forward (row_norm.cuh), with two input rows instead of one:
//   softmax_backward_warp_kernel   ("warp") kWidth lanes per row, both rows in registers
//                                  (kPeeled: a row that is not whole 16-byte packs by its
//                                  aligned middle's packs, its edges an element a lane);
//                                  softmax_backward_warp_capped_kernel the same at 64 registers;
//                                  softmax_backward_rows_kernel the same for float32 element
//                                  rows of 129-256, no row loop, every load in flight.
//   softmax_backward_tile_kernel   ("tile") short rows that are not whole 16-byte packs: a tile
//                                  of consecutive rows a block, into shared memory and out by
//                                  16-byte packs, kWidth lanes a row there.
//   softmax_backward_regs_kernel   ("block") a block per row, or ("cluster", sm_90+) the C blocks
//                                  of a cluster per row, both rows' segments in registers, or
//                                  (kOutShared, sm_90+) grad's in registers and out's bulk-copied
//                                  into shared memory, so a block holds twice the row; the
//                                  partial dot products meet through distributed shared memory.
//                                  (kPeeled: a row that is not whole 16-byte packs by its
//                                  aligned middle's packs, its edges an element a thread.)
//   softmax_backward_smem_kernel   ("smem") a block per row, both rows in shared memory;
//   softmax_backward_smem_peeled_kernel
//                                  the same for rows that are not whole 16-byte packs, or
//                                  (kGrad) out's row alone there, grad read again from the L2,
//                                  or (kCluster) a segment of the row per cluster block.
//   softmax_backward_partial_kernel + softmax_backward_apply_kernel
//                                  ("split") partial dot products, then each block combines
//                                  its row's partials and writes its segment (two reads of
//                                  each input, one write).
// Traffic floor: two reads and one write; every strategy but "split" meets it. The warp and
// register kernels' kLastLoads (16-byte packs) load both rows by load_evict_last, as the
// forward's (softmax_launch.h's row_loads_marked).
#pragma once

#include "cuda/row_norm.cuh"

namespace reduce_ops {
namespace cuda {

// g and y share their row strides: the binding makes both contiguous with the same shape.
struct BackwardRows {
  int64_t rows, cols;
};

// A lane's share of a peeled row's edges (RowPacks, row_norm.cuh) in grad and out: as RowEdges,
// lane `index` of `width` holds edges index + i x width (i < kSlots) of the row's head and tail,
// numbered head first, both inputs' values in Acc. Nothing, and no registers, unless kPeeled.
template <typename T, typename Acc, int kSlots, bool kPeeled>
struct BackwardEdges {
  static constexpr int kN = kPeeled ? kSlots : 0;
  int col[kN > 0 ? kN : 1];  // the element, -1 for none
  Acc g[kN > 0 ? kN : 1], y[kN > 0 ? kN : 1];

  template <int kVec>
  __device__ __forceinline__ void load(const T* gr, const T* yr, const RowPacks<T, kVec, kPeeled>& at,
                                       int64_t cols, int index, int width) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      col[i] = at.edge(index + i * width, cols);
      if (col[i] >= 0) {
        g[i] = static_cast<Acc>(gr[col[i]]);
        y[i] = static_cast<Acc>(yr[col[i]]);
      }
    }
  }
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kN; ++i) col[i] = -1;
  }
  __device__ __forceinline__ Acc dot() const {
    Acc d = Acc(0);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col[i] >= 0) d += g[i] * y[i];
    }
    return d;
  }
  __device__ __forceinline__ void store(T* gxr, Acc dot) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col[i] >= 0) gxr[col[i]] = static_cast<T>(y[i] * (g[i] - dot));
    }
  }
};

// One pack of a row as a warp lane holds it from its load to its write: 16-bit packs of whole 32-bit
// words as their raw words, widened at each use (half the registers of floats), others as kVec values
// in Acc. H200 (rows_ab.py, h200_study/session74.txt, call 2), us, floats -> words (torch.compile):
// bfloat16 131072 x 264 (16 lanes of 3 packs: 72 -> 50 registers) 67.01 -> 53.42 (53.80), 131072 x
// 320 82.26 -> 62.67 (62.81), peeled 65536 x 265 41.38 -> 34.30 (37.02); 1048576 x 16 30.61 -> 29.66,
// 262144 x 64 30.69 -> 29.74, 442368 x 128 82.89 -> 82.16; the rest of 16-200 within 0.5%.
template <typename T, typename Acc, int kVec,
          bool kRaw = sizeof(T) == 2 && (kVec * sizeof(T)) % 4 == 0 && !std::is_same_v<T, Acc>>
struct HeldPack {
  Acc v[kVec];
  __device__ __forceinline__ void set_raw(const T (&raw)[kVec]) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = static_cast<Acc>(raw[k]);
  }
  template <typename Words>  // PackWords<T, kVec>, named only where it exists (whole 32-bit words)
  __device__ __forceinline__ void set_words(const Words& words) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = words.template get<Acc>(k);
  }
  __device__ __forceinline__ Acc get(int k) const { return v[k]; }
};

template <typename T, typename Acc, int kVec>
struct HeldPack<T, Acc, kVec, true> {
  PackWords<T, kVec> words;
  __device__ __forceinline__ void set_raw(const T (&raw)[kVec]) { memcpy(words.w, raw, sizeof(words.w)); }
  __device__ __forceinline__ void set_words(const PackWords<T, kVec>& w) { words = w; }
  __device__ __forceinline__ Acc get(int k) const { return words.template get<Acc>(k); }
};

// kPeeled (16-byte packs; grad, out and grad_x on 16-byte boundaries, so a row is misaligned
// alike in all three): each row's aligned middle by packs (RowPacks), its head and tail an
// element a lane (BackwardEdges), as the forward's peeled warp kernel.
template <typename T, typename Acc, int kVec, int kPacks, int kWidth, bool kLastLoads, bool kPeeled>
__device__ __forceinline__ void softmax_backward_warp_rows(const T* __restrict__ grad, const T* __restrict__ out,
                                                           T* __restrict__ gx, BackwardRows r) {
  static_assert(!kPeeled || kVec * sizeof(T) == 16, "peeled rows: 16-byte packs");
  using Packs = RowPacks<T, kVec, kPeeled>;
  using Edges = BackwardEdges<T, Acc, (2 * kVec - 2 + kWidth - 1) / kWidth, kPeeled>;
  const int lane = threadIdx.x % kWidth;
  const int64_t groups_per_block = blockDim.x / kWidth;
  const int group_in_warp = threadIdx.x % kWarpSize / kWidth;
  const int64_t row_step = gridDim.x * groups_per_block;
  // The group's next rows are loaded into registers while this one is reduced and written (a
  // peeled row's edges too).
  constexpr Ahead kAhead = kWarpAhead<T, kVec, kPacks>;
  const int packs = static_cast<int>((r.cols + kVec - 1) / kVec);
  NextRow<T, kVec, kPacks, kAhead, kLastLoads> g_next{lane, kWidth, packs, nullptr, nullptr};
  NextRow<T, kVec, kPacks, kAhead, kLastLoads> y_next{lane, kWidth, packs, nullptr, nullptr};
  Edges next_edges;
  auto load_next = [&](int64_t row) {
    if constexpr (kPeeled) {
      if (kAhead == Ahead::kNone || row >= r.rows) return;
      const T* gr = grad + row * r.cols;
      const T* yr = out + row * r.cols;
      const Packs at(gr, r.cols);
      g_next.packs = y_next.packs = at.packs;
      g_next.load(gr + at.head);
      y_next.load(yr + at.head);
      next_edges.load(gr, yr, at, r.cols, lane, kWidth);
    } else {
      g_next.load(row < r.rows ? grad + row * r.cols : nullptr);
      y_next.load(row < r.rows ? out + row * r.cols : nullptr);
    }
  };
  const int64_t first_row = blockIdx.x * groups_per_block + threadIdx.x / kWidth;
  load_next(first_row);
  for (int64_t row = first_row; row - group_in_warp < r.rows; row += row_step) {
    const bool row_ok = row < r.rows;
    // The row's packs start `head` elements in (0 unless kPeeled); pack q of this lane's p is
    // p * kWidth + lane, in the row while below at.packs (cols / kVec unpeeled: whole packs).
    const int64_t row_base = (row_ok ? row : 0) * r.cols;
    const Packs at(grad + row_base, r.cols);
    const int64_t base = row_base + at.head;
    auto in_row = [&](int p) {
      if constexpr (kPeeled) return row_ok && p * kWidth + lane < at.packs;
      else return row_ok && (static_cast<int64_t>(p) * kWidth + lane) * kVec < r.cols;
    };
    Edges edges;
    if constexpr (kPeeled) {
      if constexpr (kAhead != Ahead::kNone) edges = next_edges;
      else edges.load(grad + row_base, out + row_base, at, r.cols, lane, kWidth);
      if (!row_ok) edges.clear();
    }
    HeldPack<T, Acc, kVec> g[kPacks], y[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = (static_cast<int64_t>(p) * kWidth + lane) * kVec;
      if (in_row(p)) {
        if constexpr (kAhead != Ahead::kNone) {
          g[p].set_words(g_next.take(p));
          y[p].set_words(y_next.take(p));
        } else if constexpr (kLastLoads && kVec * sizeof(T) == 16) {
          PackWords<T, kVec> gw, yw;
          gw.load_evict_last(grad + base + col);
          yw.load_evict_last(out + base + col);
          g[p].set_words(gw);
          y[p].set_words(yw);
        } else {
          T graw[kVec], yraw[kVec];
          load_pack<T, kVec>(grad + base + col, graw);
          load_pack<T, kVec>(out + base + col, yraw);
          g[p].set_raw(graw);
          y[p].set_raw(yraw);
        }
      }
    }
    load_next(row + row_step);
    Acc dot = Acc(0);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) dot += g[p].get(k) * y[p].get(k);
      }
    }
    if constexpr (kPeeled) dot += edges.dot();
    dot = warp_all_reduce<kWidth>(dot, SumOp<Acc>());
    if (!row_ok) continue;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
        const int64_t col = (static_cast<int64_t>(p) * kWidth + lane) * kVec;
        Acc o[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) o[k] = y[p].get(k) * (g[p].get(k) - dot);
        store_pack<T, Acc, kVec>(gx + base + col, o);
      }
    }
    if constexpr (kPeeled) edges.store(gx + row_base, dot);
  }
}

template <typename T, typename Acc, int kVec, int kPacks, int kWidth, bool kLastLoads = false, bool kPeeled = false>
__global__ void softmax_backward_warp_kernel(const T* __restrict__ grad, const T* __restrict__ out,
                                             T* __restrict__ gx, BackwardRows r) {
  softmax_backward_warp_rows<T, Acc, kVec, kPacks, kWidth, kLastLoads, kPeeled>(grad, out, gx, r);
}

// Float32 element rows (kVec == 1, not peeled) of up to kPacks x kWidth values, a lane group a row
// as the forward's row_norm_rows_kernel takes them: no row loop, kPacks = ceil(cols / kWidth)
// values a lane, every slot of grad and out loaded with no predicate (only a lane's last slot can
// pass the row's end: its address is clamped to the row's last element, and the dot and the
// writes skip it), so that all 2 x kPacks loads are in flight before the first product. A lane
// group past the last row loads nothing.
template <typename T, typename Acc, int kPacks, int kWidth>
__global__ void __launch_bounds__(kBlock) softmax_backward_rows_kernel(const T* __restrict__ grad,
                                                                       const T* __restrict__ out,
                                                                       T* __restrict__ gx, BackwardRows r) {
  static_assert(sizeof(T) == 4 && kWidth <= kWarpSize, "float32 elements; a group lives inside one warp");
  const int lane = threadIdx.x % kWidth;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kBlock / kWidth) + threadIdx.x / kWidth;
  const bool row_ok = row < r.rows;
  const int cols = static_cast<int>(r.cols);
  const int64_t base = row * r.cols;
  auto col = [&](int p) { return p * kWidth + lane; };
  Acc g[kPacks], y[kPacks];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int c = element_slot<kPacks>(p, col(p), cols);
    if (row_ok) {
      g[p] = static_cast<Acc>(grad[base + c]);
      y[p] = static_cast<Acc>(out[base + c]);
    } else {
      g[p] = y[p] = Acc(0);
    }
  }
  Acc dot = Acc(0);
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (p < kPacks - 1 || col(p) < cols) dot += g[p] * y[p];
  }
  dot = warp_all_reduce<kWidth>(dot, SumOp<Acc>());
  if (!row_ok) return;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (p < kPacks - 1 || col(p) < cols) gx[base + col(p)] = static_cast<T>(y[p] * (g[p] - dot));
  }
}

// softmax_backward_warp_kernel with its registers capped at 64, so that 4 blocks share an SM
// (launch_backward_rows says where), as the forward's row_norm_warp_capped_kernel: a kernel of its
// own, so that the cap moves no other warp kernel's register choices.
template <typename T, typename Acc, int kVec, int kPacks, int kWidth, bool kLastLoads = false, bool kPeeled = false>
__global__ void __launch_bounds__(kBlock, 4) softmax_backward_warp_capped_kernel(const T* __restrict__ grad,
                                                                                 const T* __restrict__ out,
                                                                                 T* __restrict__ gx, BackwardRows r) {
  softmax_backward_warp_rows<T, Acc, kVec, kPacks, kWidth, kLastLoads, kPeeled>(grad, out, gx, r);
}

// "tile": short rows that are not whole 16-byte packs, `tile_rows` consecutive rows a block at a
// time. A tile's elements are contiguous and start on a 16-byte boundary (the launcher makes
// tile_rows x cols x sizeof(T) a multiple of 16 and the tensors start on 16-byte boundaries), so
// grad's and out's tiles come into shared memory by 16-byte packs, all in flight at once
// (run_tile_pipeline), the block's next tile while it works on this one (two stages); kWidth lanes a
// row take its values into registers (kPer a lane: cols <= kWidth x kPer), reduce the dot
// product and write grad_x over grad's tile, which leaves by packs. Only the tensor's last
// partial pack goes an element a thread. Shared memory: two stages of two tiles.
template <typename T, typename Acc, int kWidth, int kPer>
__global__ void __launch_bounds__(kBlock) softmax_backward_tile_kernel(const T* __restrict__ grad,
                                                                      const T* __restrict__ out,
                                                                      T* __restrict__ gx, BackwardRows r,
                                                                      int tile_rows) {
  constexpr int kGroupsPerWarp = kWarpSize / kWidth;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int cols = static_cast<int>(r.cols);
  const int lane = threadIdx.x % kWidth, group = threadIdx.x / kWidth;
  const int groups = blockDim.x / kWidth;
  T* const stages = reinterpret_cast<T*>(smem_raw);
  // A stage holds grad's tile, then out's.
  run_tile_pipeline<2>(grad, out, gx, r.rows, cols, tile_rows, stages, [&](int64_t, T* gs, int n) {
    const T* ys = gs + tile_rows * cols;
    const int rows = n / cols;
    // Whole warps go round (the shuffles take every lane): a group past the tile's rows adds 0.
    for (int row = group; row - group % kGroupsPerWarp < rows; row += groups) {
      const bool row_ok = row < rows;
      const int base = (row_ok ? row : 0) * cols;
      Acc g[kPer], y[kPer];
      Acc dot = Acc(0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWidth;
        if (row_ok && c < cols) {
          g[i] = static_cast<Acc>(gs[base + c]);
          y[i] = static_cast<Acc>(ys[base + c]);
          dot += g[i] * y[i];
        }
      }
      dot = warp_all_reduce<kWidth>(dot, SumOp<Acc>());
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWidth;
        if (row_ok && c < cols) gs[base + c] = static_cast<T>(y[i] * (g[i] - dot));
      }
    }
  });
}

// "block" / "cluster": the layout of row_norm_regs_kernel (row_norm.cuh), with kPacks packs of
// each of the two rows per thread, held raw (no transcendental to keep: the write recomputes
// y * (g - dot) from the raw values). Requires cols % kVec == 0 and
// C * kPacks * blockDim.x * kVec >= cols; blockDim.x a multiple of 32.
// kOutShared (sm_90+, 16-byte packs): out's packs of the block wait in its dynamic shared memory
// (kPacks x blockDim.x packs, one bulk copy per row, NextRow's kShared layout) and only grad's are
// in registers, so a 1024-thread block holds 8 packs of each row where registers alone hold 4: a
// float32 row of 2^18 takes a cluster of 8 blocks instead of 16, a bfloat16 one 4 instead of 8.
// kPeeled (16-byte packs; grad, out and grad_x on 16-byte boundaries, so a row is misaligned alike
// in all three): rows that are not whole packs, by their aligned middle's packs (RowPacks, laid
// out as above from the middle's first pack), their head and tail an element a thread of the
// first block's first 2 x kVec - 2 (RowPacks::edge), as the forward's cluster_row.
template <typename T, typename Acc, int kVec, int kPacks, bool kCluster, bool kOutShared = false,
          bool kLastLoads = false, bool kPeeled = false>
__global__ void __launch_bounds__(1024) softmax_backward_regs_kernel(const T* __restrict__ grad,
                                                                     const T* __restrict__ out,
                                                                     T* __restrict__ gx, BackwardRows r,
                                                                     unsigned stagger_ns) {
  __shared__ Acc exchange[2];  // the block's partial dot product, by row parity
  extern __shared__ __align__(16) unsigned char stage_raw[];  // kOutShared: out's packs of the block
  __shared__ uint64_t arrival;                                 // kOutShared: the copies' mbarrier
  // kPeeled: edge e's grad and out (e < 2 x kVec - 2), from its load to its write; held in
  // registers, they spilled the clusters' kernel (64 registers at 1024 threads).
  __shared__ Acc edge_values[kPeeled ? 2 * (2 * kVec - 2) : 1];
  static_assert(!kPeeled || kVec * sizeof(T) == 16, "peeled rows: 16-byte packs");
  const auto share = RowShare<kCluster>::template of<kPacks>();
  const int first = share.first;
  // A peeled row's edges: thread t of the first block holds edge t (none past 2 x kVec - 2).
  const int edge_index = share.rank == 0 ? static_cast<int>(threadIdx.x) : 2 * kVec;
  // 32-bit pack indices within the row: the launcher's rows hold at most 16 x 1024 x 8 packs.
  const int aligned_packs = static_cast<int>(r.cols / kVec);  // a row's packs unless kPeeled
  // Under kOutShared the current row's out (NextRow serves as a one-stage ring: it is loaded at
  // the row's start and read through the write); otherwise nothing. Its packs are the row's
  // (a peeled row's own, set at each row).
  NextRow<T, kVec, kPacks, kOutShared ? Ahead::kShared : Ahead::kNone, kLastLoads> y_stage{
      first, static_cast<int>(blockDim.x), aligned_packs, reinterpret_cast<T*>(stage_raw), &arrival};
  y_stage.init();
  int parity = 0;
  stagger_cluster_start(share, stagger_ns);  // row_norm.cuh
  for (int64_t row = share.first_row(); row < r.rows; row += share.row_step()) {
    const int64_t base = row * r.cols;
    // Pack q of the row at base + at.head + q * kVec of grad, out and grad_x alike.
    const RowPacks<T, kVec, kPeeled> at(grad + base, r.cols);
    const int packs = kPeeled ? at.packs : aligned_packs;
    const int64_t middle = base + at.head;
    if constexpr (kPeeled) y_stage.packs = packs;
    if constexpr (kOutShared) y_stage.load(out + middle);  // the copy flies while grad's loads do
    // Whether this thread's pack p lies in the row. A peeled row bounds p by one count a row
    // (held): comparing each pack's index, 8 of them held live, spilled its clusters' kernel (64
    // registers at 1024 threads). Aligned rows keep the compare: the count cost float32 1024 x
    // 262144's clusters 2.2% (h200_study/session73.txt, section 6).
    const int held = packs > first ? (packs - first + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x) : 0;
    const auto in_row = [&](int p) {
      return kPeeled ? p < held : first + p * static_cast<int>(blockDim.x) < packs;
    };
    PackWords<T, kVec> g[kPacks], y[kOutShared ? 1 : kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int q = first + p * static_cast<int>(blockDim.x);
      if (in_row(p)) {
        constexpr bool kMarked = kLastLoads && kVec * sizeof(T) == 16;
        g[p].template load_marked<kMarked>(grad + middle + q * kVec);
        if constexpr (!kOutShared) y[p].template load_marked<kMarked>(out + middle + q * kVec);
      }
    }
    Acc dot = Acc(0);
    if constexpr (kPeeled) {
      const int col = at.edge(edge_index, r.cols);
      if (col >= 0) {
        const Acc ge = static_cast<Acc>(grad[base + col]), ye = static_cast<Acc>(out[base + col]);
        edge_values[2 * edge_index] = ge;
        edge_values[2 * edge_index + 1] = ye;
        dot = ge * ye;
      }
    }
    y_stage.wait();
    // Pack p of out: from registers, or from the stage.
    auto y_pack = [&](int p) {
      if constexpr (kOutShared) return y_stage.take(p);
      else return y[p];
    };
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
        const PackWords<T, kVec> yp = y_pack(p);
#pragma unroll
        for (int k = 0; k < kVec; ++k) dot += g[p].template get<Acc>(k) * yp.template get<Acc>(k);
      }
    }
    dot = block_all_reduce(dot, SumOp<Acc>());
    if constexpr (kCluster) dot = cluster_all_reduce(dot, &exchange[parity], SumOp<Acc>());
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int q = first + p * static_cast<int>(blockDim.x);
      if (in_row(p)) {
        const PackWords<T, kVec> yp = y_pack(p);
        Acc o[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) o[k] = yp.template get<Acc>(k) * (g[p].template get<Acc>(k) - dot);
        store_pack<T, Acc, kVec>(gx + middle + q * kVec, o);
      }
    }
    if constexpr (kPeeled) {
      const int col = at.edge(edge_index, r.cols);
      if (col >= 0) gx[base + col] = static_cast<T>(edge_values[2 * edge_index + 1] * (edge_values[2 * edge_index] - dot));
    }
    if constexpr (kOutShared) __syncthreads();  // every read of the stage before the next row's copy
    parity ^= 1;
  }
  if constexpr (kCluster) cluster_sync();
}

// "smem": both rows wait in dynamic shared memory: grad in the first cols elements, out in the next.
template <typename T, typename Acc, int kVec>
__global__ void __launch_bounds__(1024) softmax_backward_smem_kernel(const T* __restrict__ grad, const T* __restrict__ out,
                                              T* __restrict__ gx, BackwardRows r) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* gbuf = reinterpret_cast<T*>(smem_raw);
  T* ybuf = gbuf + r.cols;
  using P = Pack<T, kVec>;
  const int64_t packs = r.cols / kVec;
  for (int64_t row = blockIdx.x; row < r.rows; row += gridDim.x) {
    Acc dot = Acc(0);
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const P gp = *reinterpret_cast<const P*>(grad + row * r.cols + p * kVec);
      const P yp = *reinterpret_cast<const P*>(out + row * r.cols + p * kVec);
      *reinterpret_cast<P*>(gbuf + p * kVec) = gp;
      *reinterpret_cast<P*>(ybuf + p * kVec) = yp;
#pragma unroll
      for (int k = 0; k < kVec; ++k) dot += static_cast<Acc>(gp.v[k]) * static_cast<Acc>(yp.v[k]);
    }
    dot = block_all_reduce(dot, SumOp<Acc>());
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      Acc o[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        o[k] = static_cast<Acc>(ybuf[p * kVec + k]) * (static_cast<Acc>(gbuf[p * kVec + k]) - dot);
      }
      store_pack<T, Acc, kVec>(gx + row * r.cols + p * kVec, o);
    }
  }
}

// The segment of n elements at `base` of grad and out (grad_x's alike; the three misaligned
// alike) by its 16-byte-aligned middle: `head` elements in, `packs` packs of kV (g and y point at
// them); `edge` is the element of its head or tail this thread moves (edge_element), -1 for none.
// For the peeled smem kernel (a whole row, or a cluster block's segment of it) and the kPeeled
// split kernels.
template <typename T>
struct SegmentPacks {
  static constexpr int kV = kMaxVec<T>;
  using P = Pack<T, kV>;
  int64_t head, packs, edge;
  const P* g;
  const P* y;
  __device__ SegmentPacks(const T* grad, const T* out, int64_t base, int64_t n) {
    head = elements_to_16_bytes(grad + base, n);
    packs = (n - head) / kV;
    edge = edge_element(head, head + packs * kV, n, kV);
    g = reinterpret_cast<const P*>(grad + base + head);
    y = reinterpret_cast<const P*>(out + base + head);
  }
};

// "smem" for rows that are not whole 16-byte packs (an odd row length, say) of tensors that start
// on 16-byte boundaries, so that a row is misaligned alike in grad, out and grad_x: each row's
// 16-byte-aligned middle moves by packs, both rows' packs waiting in dynamic shared memory (out's
// in the first `slots` packs, grad's in the next; each thread reads back only its own, so the two
// passes need no barrier), and its head and tail (under 16 bytes each) an element a thread of the
// first 2 x kV, held in registers. softmax_backward_smem_kernel<kVec = 1> moved them an element at
// a time: H200, bfloat16 2048 x 50257 485.4 -> 195.7 us (torch.compile 322.9; session59_rows.txt).
//
// kGrad: where grad's packs wait between the passes. 0: in shared memory, as said. 1: nowhere:
// the second pass reads them again, from the L2 (each block's row, 100-200 KB, was read just
// before), so that only out's packs take shared memory (half: two blocks an SM where one fit).
// 2: as 1, the first read marking the lines evict_last.
//
// kCluster (sm_90+): the C blocks of a cluster share a row, block `rank` its segment of
// ceil(cols / C) elements rounded up to whole packs (SegmentPacks), so that a row C times one
// block's shared memory stays on chip, or C blocks an SM run where one did; the blocks' partial
// dot products meet through distributed shared memory (cluster_all_reduce), in rank order.
// `slots`: the packs of shared memory for each input, a segment's packs and one more; kCluster
// needs 2 x slots + 1 packs (kGrad == 0 only).
template <typename T, typename Acc, int kGrad = 0, bool kCluster = false>
__global__ void __launch_bounds__(1024) softmax_backward_smem_peeled_kernel(const T* __restrict__ grad,
                                                                            const T* __restrict__ out,
                                                                            T* __restrict__ gx, BackwardRows r,
                                                                            int64_t slots) {
  static_assert(!kCluster || kGrad == 0, "clusters: both rows' packs in shared memory");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kV = kMaxVec<T>;
  using P = Pack<T, kV>;
  P* ybuf = reinterpret_cast<P*>(smem_raw);
  P* gbuf = ybuf + slots;  // kGrad == 0 only
  // kCluster: the block's partial dot product, by row parity, past both rows' packs (a pack more).
  Acc* exchange = reinterpret_cast<Acc*>(gbuf + slots);
  const int64_t blocks = kCluster ? cluster_blocks() : 1, rank = kCluster ? cluster_block_rank() : 0;
  const int64_t chunk = kCluster ? ((r.cols + blocks - 1) / blocks + kV - 1) / kV * kV : r.cols;
  const int64_t c0 = rank * chunk < r.cols ? rank * chunk : r.cols;
  const int64_t n = r.cols - c0 < chunk ? r.cols - c0 : chunk;
  int parity = 0;
  for (int64_t row = blockIdx.x / blocks; row < r.rows; row += gridDim.x / blocks) {
    const int64_t base = row * r.cols + c0;
    const SegmentPacks<T> at(grad, out, base, n);
    Acc dot = Acc(0);
#pragma unroll 4
    for (int64_t p = threadIdx.x; p < at.packs; p += blockDim.x) {
      P g;
      if constexpr (kGrad == 2) g = load_evict_last(at.g + p);
      else g = at.g[p];
      const P y = at.y[p];
      if constexpr (kGrad == 0) gbuf[p] = g;
      ybuf[p] = y;
#pragma unroll
      for (int k = 0; k < kV; ++k) dot += static_cast<Acc>(g.v[k]) * static_cast<Acc>(y.v[k]);
    }
    Acc ge = Acc(0), ye = Acc(0);
    if (at.edge >= 0) {
      ge = static_cast<Acc>(grad[base + at.edge]);
      ye = static_cast<Acc>(out[base + at.edge]);
      dot += ge * ye;
    }
    dot = block_all_reduce(dot, SumOp<Acc>());
    if constexpr (kCluster) dot = cluster_all_reduce(dot, &exchange[parity], SumOp<Acc>());
    parity ^= 1;
    for (int64_t p = threadIdx.x; p < at.packs; p += blockDim.x) {
      const P g = kGrad == 0 ? gbuf[p] : at.g[p], y = ybuf[p];
      Acc o[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) o[k] = static_cast<Acc>(y.v[k]) * (static_cast<Acc>(g.v[k]) - dot);
      store_pack<T, Acc, kV>(gx + base + at.head + p * kV, o);
    }
    if (at.edge >= 0) gx[base + at.edge] = static_cast<T>(ye * (ge - dot));
  }
  if constexpr (kCluster) cluster_sync();  // each block's slot alive until the others read it
}

// kPeeled (kVec == 1; grad, out and grad_x on 16-byte boundaries, so a segment is misaligned
// alike in all three): each segment's aligned middle by 16-byte packs (SegmentPacks), its head
// and tail an element a thread.
template <typename T, typename Acc, int kVec, bool kPeeled = false>
__global__ void softmax_backward_partial_kernel(const T* __restrict__ grad, const T* __restrict__ out,
                                                Acc* __restrict__ partial, BackwardRows r, SplitArgs s) {
  static_assert(!kPeeled || kVec == 1, "peeled segments: rows that are not whole packs");
  allow_dependents();
  const int64_t items = r.rows * s.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t row = w / s.splits, c0 = (w % s.splits) * s.chunk;
    const int64_t n = (r.cols - c0 < s.chunk) ? r.cols - c0 : s.chunk;
    const int64_t base = row * r.cols + c0;
    Acc dot = Acc(0);
    if constexpr (kPeeled) {
      using S = SegmentPacks<T>;
      const S at(grad, out, base, n);
#pragma unroll 4
      for (int64_t p = threadIdx.x; p < at.packs; p += blockDim.x) {
        const auto g = at.g[p], y = at.y[p];
#pragma unroll
        for (int k = 0; k < S::kV; ++k) dot += static_cast<Acc>(g.v[k]) * static_cast<Acc>(y.v[k]);
      }
      if (at.edge >= 0) dot += static_cast<Acc>(grad[base + at.edge]) * static_cast<Acc>(out[base + at.edge]);
    } else {
      for (int64_t p = threadIdx.x; p < n / kVec; p += blockDim.x) {
        T graw[kVec], yraw[kVec];
        load_pack<T, kVec>(grad + base + p * kVec, graw);
        load_pack<T, kVec>(out + base + p * kVec, yraw);
#pragma unroll
        for (int k = 0; k < kVec; ++k) dot += static_cast<Acc>(graw[k]) * static_cast<Acc>(yraw[k]);
      }
    }
    dot = block_all_reduce(dot, SumOp<Acc>());
    if (threadIdx.x == 0) partial[w] = dot;
  }
}

// The apply pass, as row_norm_apply_kernel: a programmatic dependent of the partial pass, taking
// its items and each item's packs last to first (what the partial pass read last is in L2).
// H100, us, neither -> both: float32 8 x 2^24 913.6 -> 908.3, 16 x 2^20 123.0 -> 118.1,
// bfloat16 8 x 2^24 461.4 -> 457.2, 8 x 2^22 124.3 -> 120.1 (h100_study/session36_split_pdl.txt).
// kPeeled: as softmax_backward_partial_kernel's.
template <typename T, typename Acc, int kVec, bool kPeeled = false>
__global__ void softmax_backward_apply_kernel(const T* __restrict__ grad, const T* __restrict__ out,
                                              T* __restrict__ gx, const Acc* __restrict__ partial,
                                              BackwardRows r, SplitArgs s) {
  static_assert(!kPeeled || kVec == 1, "peeled segments: rows that are not whole packs");
  wait_for_prerequisite();
  const int64_t items = r.rows * s.splits;
  for (int64_t v = blockIdx.x; v < items; v += gridDim.x) {
    const int64_t w = items - 1 - v;
    const int64_t row = w / s.splits, c0 = (w % s.splits) * s.chunk;
    Acc dot = Acc(0);
    for (int64_t j = threadIdx.x; j < s.splits; j += blockDim.x) dot += partial[row * s.splits + j];
    dot = block_all_reduce(dot, SumOp<Acc>());
    const int64_t n = (r.cols - c0 < s.chunk) ? r.cols - c0 : s.chunk;
    const int64_t base = row * r.cols + c0;
    if constexpr (kPeeled) {
      using S = SegmentPacks<T>;
      const S at(grad, out, base, n);
      for_each_stride_back(threadIdx.x, at.packs, blockDim.x, [&](int64_t p) {
        const auto g = at.g[p], y = at.y[p];
        Acc o[S::kV];
#pragma unroll
        for (int k = 0; k < S::kV; ++k) o[k] = static_cast<Acc>(y.v[k]) * (static_cast<Acc>(g.v[k]) - dot);
        store_pack<T, Acc, S::kV>(gx + base + at.head + p * S::kV, o);
      });
      if (at.edge >= 0) {
        const Acc g = static_cast<Acc>(grad[base + at.edge]), y = static_cast<Acc>(out[base + at.edge]);
        gx[base + at.edge] = static_cast<T>(y * (g - dot));
      }
      continue;
    }
    for_each_stride_back(threadIdx.x, n / kVec, blockDim.x, [&](int64_t p) {
      T graw[kVec], yraw[kVec];
      load_pack<T, kVec>(grad + base + p * kVec, graw);
      load_pack<T, kVec>(out + base + p * kVec, yraw);
      Acc o[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = static_cast<Acc>(yraw[k]) * (static_cast<Acc>(graw[k]) - dot);
      store_pack<T, Acc, kVec>(gx + base + p * kVec, o);
    });
  }
}

// The backward over the middle dim as a policy of row_norm.cuh's split inner-dim kernels (its
// interface there) and of the tiles below (load, add and apply): dot = sum(grad * out) per column,
// then grad_x = out * (grad - dot).
template <typename T, typename Acc, int kV>
struct SoftmaxBackwardInner {
  const T* grad;
  const T* out;
  T* gx;
  using Stat = Acc;
  using Factor = Acc;
  struct Loaded {
    Pack<T, kV> g, o;
  };
  __device__ static Stat identity() { return Acc(0); }
  __device__ static Stat fold(Stat a, Stat b) { return a + b; }
  __device__ Factor finish(Stat s) const { return s; }
  __device__ Loaded load(int64_t at) const {
    return {load_inner_pack<T, kV>(grad + at), load_inner_pack<T, kV>(out + at)};
  }
  __device__ static Loaded absent() { return {}; }  // zeros: adds 0 * 0
  template <int kN>
  __device__ void add(Stat (&dot)[kV], const Loaded (&v)[kN]) const {
#pragma unroll
    for (int u = 0; u < kN; ++u) {
#pragma unroll
      for (int e = 0; e < kV; ++e) dot[e] += widen<Acc>(v[u].g, e) * widen<Acc>(v[u].o, e);
    }
  }
  __device__ void apply(const Factor (&dot)[kV], const Loaded& v, int64_t at) const {
    Acc r[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) r[e] = widen<Acc>(v.o, e) * (widen<Acc>(v.g, e) - dot[e]);
    store_pack<T, Acc, kV>(gx + at, r);
  }
};

// The backward over the middle dim, on row_norm.cuh's inner-dim tiles: each thread's share of
// the dot in order, then combine_tile, then the writes, from registers when kHold > 0.
template <typename T, typename Acc, int kV, int kHold, bool kCluster>
__global__ void __launch_bounds__(kInnerThreads)
    softmax_backward_inner_kernel(const T* __restrict__ grad, const T* __restrict__ out, T* __restrict__ gx,
                                  InnerGeometry g, int64_t tiles_per_outer) {
  using Policy = SoftmaxBackwardInner<T, Acc, kV>;
  using Loaded = typename Policy::Loaded;
  __shared__ TileScratch<Acc, kV, kCluster> s;
  const Policy policy{grad, out, gx};
  const TileShare share = TileShare::of<kCluster>(g.cols);
  int phase = 0;
  for_each_tile<kCluster, kV>(g, tiles_per_outer, [&](const InnerTileItem& it) {
    auto get = [&](int64_t k) { return policy.load(it.base + k * g.inner); };
    Acc dot[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) dot[e] = Policy::identity();
    Loaded held[kHold > 0 ? kHold : 1];
    if (it.active) {
      if constexpr (kHold > 0) share.load(held, get);
      share.each<kHold>(held, get, [&](const Loaded& v, int64_t) {
        const Loaded one[1] = {v};
        policy.add(dot, one);
      });
    }
    combine_tile(dot, s, phase, SumOp<Acc>());
    if (!it.active) return;
    share.each<kHold>(held, get, [&](const Loaded& v, int64_t k) { policy.apply(dot, v, it.base + k * g.inner); });
  });
}

}  // namespace cuda
}  // namespace reduce_ops
