// Split column folds: a reduction over an outer dim whose reduced dim is cut into segments over
// blocks, their partials folded in the same launch by the last block to finish (a group's, then
// the groups'), in a fixed order. reduce_cols_kernel (reduce.cuh) and the split inner-dim softmax
// kernels (row_norm.cuh, softmax_backward.cuh) fold this way; the helpers here are theirs.
#pragma once

#include <ATen/ATen.h>

#include "cuda/launch.h"
#include "cuda/primitives.cuh"

namespace reduce_ops {
namespace cuda {

// out[o * inner + i] = reduce over r of x[o * outer_stride + r * reduced_stride + i * inner_stride].
// Work item w = (seg * outer + o) * tiles + tile: rows [seg * chunk, (seg + 1) * chunk) of the
// tile's blockDim.x * kVec columns. With splits > 1 the segments' partials meet in one launch:
// the last segment of each group of `group` to finish folds the group's partials, and with more
// than one group the last group folds the groups' results (two levels, so that no block reads
// more than ~group rows of partials: one block folding 1056 rows of 128 partials took longer
// than the pass over the input, H200). With kVec > 1 the launcher guarantees inner_stride == 1
// and 16-byte aligned packs in x, and out aligned to kVec elements.
struct ColsArgs {
  int64_t outer, reduced, inner;
  int64_t outer_stride, reduced_stride, inner_stride;
  int64_t splits, chunk;  // the reduced dim is cut into `splits` segments of `chunk` rows
  int64_t group;          // segments per first-level fold
  // Set by the launcher for its block shape (no 64-bit division in the kernel's prologue):
  int64_t tiles;   // ceil(inner / (blockDim.x * kVec)), column tiles per outer index
  int64_t groups;  // ceil(splits / group)
  int64_t row_gap = 0;  // blockDim.y * reduced_stride: elements between a thread's rows
  int64_t group_cols = 0;  // packed row groups only: the columns of one row (inner / groups)
  // Split launches: the segments' partials are folded by a second launch (fold_partial_words_kernel),
  // not by the last blocks to arrive; no counters.
  bool fold_launch = false;
};

// Rows a thread of reduce_cols_kernel loads at once (16-byte loads with kVec > 1): one round.
constexpr int kColsRound = 4;

// Scratch of a split column reduction: partials [splits][outer * inner] then the groups'
// [groups][outer * inner], in the reducer's Acc; counters [outer * tiles][groups] then, with
// more than one group, [outer * tiles]. The counters are zero when the kernel starts and again
// when it ends.
template <typename Acc>
struct ColsScratch {
  Acc* partial;
  unsigned* counters;
};

// Rows of threads fold their kVec columns: on return thread row 0 holds the block's fold of
// `acc`, in an order fixed by blockDim.y (a power of two). Every thread must call it; `smem`
// holds blockDim.x * blockDim.y * kVec values. Up to 8 rows, row 0 folds the others one after
// another; past that, a pairwise tree (row y takes row y + half, half = blockDim.y / 2, ..., 1),
// one barrier a level. H200, CUDA graph, compensated float32 sum of 1024 x 128 over dim 0
// (h200_study/session23.txt), one after another -> tree: 32 rows 7.06 -> 5.56 us (a chain of 31
// shared-memory loads and Neumaier steps, twice), 16 rows 5.62 -> 5.41, 8 rows 5.71 -> 6.04.
template <typename R, int kVec>
__device__ __forceinline__ void fold_thread_rows(typename R::Acc (&acc)[kVec], typename R::Acc* smem, const R& r) {
  if (blockDim.y == 1) return;
  typename R::Acc* mine = smem + (threadIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (blockDim.y <= 8) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) mine[k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0) {
      for (int y = 1; y < blockDim.y; ++y) {
        const typename R::Acc* theirs = smem + (y * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = r(acc[k], theirs[k]);
      }
    }
  } else {
    // Row y's slot is written once, at the level that folds it away, and read at that level only.
    for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
      if (threadIdx.y >= half && threadIdx.y < 2 * half) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) mine[k] = acc[k];
      }
      __syncthreads();
      if (threadIdx.y < half) {
        const typename R::Acc* theirs = mine + half * blockDim.x * kVec;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = r(acc[k], theirs[k]);
      }
    }
  }
  __syncthreads();  // smem is rewritten by the next call
}

// A thread's kVec partials of one row, moved as 16-byte words where they fill whole ones (the
// launcher's vectorized layout keeps them 16-byte aligned), else value by value; loads go
// through L2 only (other blocks wrote them during this launch).
template <typename Acc, int kVec>
struct PartialRun {
  static constexpr bool kWords = kVec * sizeof(Acc) % 16 == 0;
  static constexpr int kCount = kWords ? kVec * sizeof(Acc) / 16 : kVec;
  using Word = std::conditional_t<kWords, uint4, Acc>;
  __device__ static void load(const Acc* src, Acc (&v)[kVec]) {
    Word w[kCount];
#pragma unroll
    for (int c = 0; c < kCount; ++c) w[c] = load_cg(reinterpret_cast<const Word*>(src) + c);
    memcpy(v, w, sizeof(v));
  }
  __device__ static void store(Acc* dst, const Acc (&v)[kVec]) {
    Word w[kCount];
    memcpy(w, v, sizeof(v));
#pragma unroll
    for (int c = 0; c < kCount; ++c) reinterpret_cast<Word*>(dst)[c] = w[c];
  }
};

// This thread's kVec columns of rows [0, n) of `rows` (row stride `stride`), rows threadIdx.y,
// threadIdx.y + blockDim.y, ... folded in order; two rows' loads in flight where a row's run is
// one 16-byte word (longer runs held 16-32 registers more, and the kernel's register count is
// its largest part's: compensated bfloat16 went from 48 to 72, 3 blocks per SM instead of 5).
template <typename R, int kVec>
__device__ __forceinline__ void fold_partial_rows(const typename R::Acc* rows, int64_t n, int64_t stride,
                                                  typename R::Acc (&acc)[kVec], const R& r) {
  using Acc = typename R::Acc;
  constexpr int kRows = kVec * sizeof(Acc) <= 16 ? 2 : 1;
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = R::identity();
  for (int64_t j = threadIdx.y; j < n; j += kRows * blockDim.y) {
    Acc v[kRows][kVec];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      if (j + u * blockDim.y < n) PartialRun<Acc, kVec>::load(rows + (j + u * blockDim.y) * stride, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      if (j + u * blockDim.y < n) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = r(acc[k], v[u][k]);
      }
    }
  }
}

// Publishes thread row 0's kVec values at `dst` and counts this block's arrival at `counter`:
// true in every thread of the block whose arrival is the `expected`-th (the last), which then
// sees every partial the others published and resets the counter.
template <typename Acc, int kVec>
__device__ __forceinline__ bool publish_and_arrive(const Acc (&acc)[kVec], Acc* dst, bool in_range,
                                                   unsigned* counter, unsigned expected, bool* last) {
  if (threadIdx.y == 0 && in_range) PartialRun<Acc, kVec>::store(dst, acc);
  __syncthreads();  // every partial of the block is stored before the arrival releases them
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    *last = arrive_acq_rel(counter) == expected - 1;
    if (*last) *counter = 0u;  // every arrival is in: ready for the next launch
  }
  __syncthreads();
  return *last;
}

// The folds after a block has its work item's values in acc (kVec columns a thread, rows of
// threads not yet folded): the rows of threads fold, and with splits > 1 the block publishes
// thread row 0's values for segment seg of tile tile_id (with a.fold_launch, that is all: the
// second launch folds them); the block that completes its group
// folds the group's partials, then the one that completes the groups folds theirs. Returns true
// in the block whose thread row 0 then holds the columns' whole fold (every block when
// splits == 1), false in the others. col: the thread's first column in [0, outer * inner);
// in_range: whether it has columns. Every thread of the block must call it.
template <typename R, int kVec>
__device__ __forceinline__ bool fold_segments(typename R::Acc (&acc)[kVec], const ColsArgs& a,
                                              const ColsScratch<typename R::Acc>& scratch, int64_t seg,
                                              int64_t tile_id, int64_t col, bool in_range, typename R::Acc* smem,
                                              bool* last, const R& r) {
  using Acc = typename R::Acc;
  fold_thread_rows(acc, smem, r);
  if (a.splits == 1) return true;
  const int64_t columns = a.outer * a.inner;
  if (a.fold_launch) {
    if (threadIdx.y == 0 && in_range) PartialRun<Acc, kVec>::store(scratch.partial + seg * columns + col, acc);
    return false;
  }
  const int64_t g = seg / a.group;
  const int64_t members = (a.splits - g * a.group < a.group) ? a.splits - g * a.group : a.group;
  if (!publish_and_arrive(acc, scratch.partial + seg * columns + col, in_range,
                          scratch.counters + tile_id * a.groups + g, static_cast<unsigned>(members), last)) {
    return false;
  }
  if (in_range) fold_partial_rows(scratch.partial + g * a.group * columns + col, members, columns, acc, r);
  fold_thread_rows(acc, smem, r);
  if (a.groups > 1) {
    Acc* group_partial = scratch.partial + a.splits * columns;
    if (!publish_and_arrive(acc, group_partial + g * columns + col, in_range,
                            scratch.counters + a.outer * a.tiles * a.groups + tile_id,
                            static_cast<unsigned>(a.groups), last)) {
      return false;
    }
    if (in_range) fold_partial_rows(group_partial + col, a.groups, columns, acc, r);
    fold_thread_rows(acc, smem, r);
  }
  return true;
}

// Partials a 16-byte word holds: the unit fold_partial_words_kernel folds (reduce.cuh). The
// packed kernel pads its rows of partials to whole words; other split column launches fold by it
// only where their columns are whole words (reduce.cu's launch_cols_plan).
template <typename Acc>
constexpr int kPartialsPerWord = (sizeof(Acc) <= 16 && 16 % sizeof(Acc) == 0) ? static_cast<int>(16 / sizeof(Acc)) : 1;

// ---- Host side ---------------------------------------------------------------------------------

// Rows the per-stream counter buffer serves; a split needs rows < sm_count * kBlocksPerSM,
// far fewer.
constexpr int64_t kMaxCounters = 4096;

// What a split column launch's folds need (reduce_cols_kernel's ColsScratch): counters, one per
// group of segments per tile plus, with several groups, one per tile; rows of partials, one per
// segment plus, with several groups, one per group.
struct ColsFold {
  int64_t counters, partial_rows;
};

inline ColsFold cols_fold(const ColsArgs& a) {
  const int64_t second_level = a.groups > 1 ? 1 : 0;
  return {a.outer * a.tiles * (a.groups + second_level), a.splits + second_level * a.groups};
}

// One level of folds while each row of threads folds at most 6 partial rows (three rounds of
// loads), else two levels of about sqrt(splits) rows each, in whole rows of threads. H200,
// tune_cols.py: one level over 41 segments beat two (bfloat16 16384 x 4096: 39.6 vs 41.6 us),
// two levels beat one over 165 (65536 x 1024: 42.8 vs 44.8 us) and 660 (442368 x 128: 41.6
// vs 49.5 us).
inline void set_fold_groups(ColsArgs& a, int by) {
  a.group = a.splits;
  a.groups = 1;
  if (a.splits == 1) return;  // no fold, and no getenv (~0.1 us of a launch)
  if (ceil_div(a.splits, by) > 6) {
    a.group = by;
    while (a.group * a.group < a.splits) a.group += by;
  }
  a.group = env_positive("REDUCE_OPS_COLS_FOLD_GROUP", a.group);
  a.groups = ceil_div(a.splits, a.group);
}

// Counters for the split kernels' last-block folds (reduce.cu): n of them, zero when a kernel
// starts (each fold resets its own). graph_owned keeps a captured graph's own buffer alive
// where the module's pool runs out.
unsigned* zeroed_counters(int64_t n, const at::Tensor& like, cudaStream_t stream, at::Tensor& graph_owned);

// Slots the per-stream buffer of published partials (primitives.cuh's Slot) serves: a split row
// launch needs rows x splits partials of one or two slots, rows x splits about the blocks of one
// wave (split_rows), far fewer.
constexpr int64_t kMaxSlots = 16384;

// Slots for the split row kernels' published partials (reduce.cu): n of them, zero when a kernel
// starts (each fold resets those it reads). `owned` keeps a buffer of the launch's own alive where
// the per-stream one is too small or a captured graph's pool runs out.
Slot* zeroed_slots(int64_t n, const at::Tensor& like, cudaStream_t stream, at::Tensor& owned);

// Room for the n partials (values of T, uninitialized) of a split launch (reduce.cu's and
// softmax_launch.h's), on the device of `options`: bytes from the caching allocator that `holder`
// owns. It must live until the launch is enqueued; freed after, the bytes go back to the pool of
// the stream they came from, whose later work runs after the launch.
template <typename T>
T* partials_scratch(int64_t n, const at::TensorOptions& options, at::Tensor& holder) {
  holder = at::empty({n * static_cast<int64_t>(sizeof(T))}, options.dtype(at::kByte));
  return reinterpret_cast<T*>(holder.mutable_data_ptr());
}

}  // namespace cuda
}  // namespace reduce_ops
