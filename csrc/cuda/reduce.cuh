// Reduction algorithms (sum, max) over the strided views of ops.h.
//
//   reduce_few_rows_kernel    aligned rows of at most 1024 packs (up to 2, 16 or 64 an SM of up to
//                             32, 128 or 256 packs; any count past that): a block of 1, 4 or 8
//                             warps per row, every pack loaded at once (one round).
//   reduce_short_rows_kernel  rows of at most 32 packs: kWidth lanes take kRows rows at once, a
//                             pack of each per lane. Aligned rows by 16-byte packs; rows that are
//                             not (length, start or stride) by 8-, 4- or 2-byte packs.
//   reduce_tiny_rows_kernel   dense rows shorter than a pack: a thread takes a pack's worth of rows.
//   reduce_staged_rows_kernel dense rows of up to 128 bytes, not whole 16-byte packs (from
//                             32 KB-4 MB, any size past 64 bytes a row): a block stages its rows
//                             in shared memory by whole packs, a thread folds a row.
//   reduce_rows_group_kernel  kWidth (<= 32) lanes per row, many rows per block: unaligned short
//                             rows and medium rows (up to 32 x 32 packs).
//   reduce_rows_block_kernel  one block per row: long rows, many of them.
//   reduce_rows_split_kernel  several blocks per row, for few long rows and whole-tensor
//                             reductions: each block publishes its segment's partial (flagged
//                             slots, no fence), and the last block of a row to arrive folds the
//                             row's partials in a fixed order and resets the row's counter and
//                             slots. One launch, no memset.
//   reduce_split_few_kernel   the same for aligned segments of one round of loads (whole tensors
//                             up to 16 MB): one barrier a block, thread 0 arrives, and warp 0
//                             folds (the whole block past 256 partials a row).
//   reduce_two_groups_kernel  small reductions whose reduced dims make two groups no view joins
//                             (dims 0 and 2 of (N, C, L)): a block an output, one launch.
//   reduce_two_groups_runs_kernel  larger ones whose inner group is contiguous: each output's
//                             runs split over blocks as the split rows' segments, one launch.
//   reduce_two_groups_short_kernel  ones whose outputs hold less than 2048 of its loads
//                             (elements, or packs of up to 16 bytes): 32-256 threads an
//                             output, one round of loads, one launch.
//   reduce_cols_kernel        reduction over an outer dim with the kept dim contiguous: each
//                             thread owns kVec adjacent columns, the block's rows of threads
//                             split the reduced dim, and blocks split it further when the
//                             columns are few; their partials are folded in a fixed order, in
//                             the same launch (last block of a group, then last group) or, with
//                             many segments, by a second launch. With kPackedRound, columns
//                             that are not whole packs as rows of `groups` rows that are, the
//                             groups folded by each block before its partial goes out, the
//                             partials by a second launch; under 32 MiB on
//   reduce_cols_packed_small_kernel  the same view with 32-bit indices, a work item a block and
//                             one barrier to fold (groups of lanes a column, then a butterfly).
//   fold_partial_words_kernel the partials of the packed kernel and of split column launches of
//                             many segments, a warp or a block a 16-byte word of columns (a
//                             programmatic dependent of the first launch).
//   reduce_cols_few_kernel    small reductions over an outer dim (up to 2048 reduced rows): a
//                             block reads all the rows of its columns at once, no split.
//   fold_row_groups_kernel    the second launch of a column reduction whose columns are not
//                             whole 16-byte packs, reduced as rows of `groups` rows (reduce.cu's
//                             launch_cols_row_groups): each column's partials folded in order.
//
// Every reduction visits its elements in an order fixed by the launch shape, which depends only
// on the problem shape and the device: the result is the same bits on every run.
#pragma once

#include "cuda/column_fold.cuh"
#include "cuda/primitives.cuh"

namespace reduce_ops {
namespace cuda {

// ---- Reducers: how elements are folded -------------------------------------------------------
// A reducer R has a Value (the math type of one element: float or double) and an Acc (its
// running state), and provides identity(), add(Acc, Value), a merge operator()(Acc, Acc) (used by
// the warp and block all-reduce), reduce(Value, Value) (within one pack) and finish(Acc).

template <typename Op>  // SumOp<V> or MaxOp<V>: the state is the value itself
struct PlainReducer {
  using Value = decltype(Op::identity());
  using Acc = Value;
  __device__ static Acc identity() { return Op::identity(); }
  __device__ Acc add(Acc a, Value x) const { return Op()(a, x); }
  __device__ Acc operator()(Acc a, Acc b) const { return Op()(a, b); }
  __device__ Value reduce(Value a, Value b) const { return Op()(a, b); }
  __device__ Value finish(Acc a) const { return a; }
};

template <typename V>
struct Compensated {
  V sum, comp;
};

// Neumaier's compensated sum: each addition's rounding error goes to `comp`, folded in at the
// end. The kernels add a pairwise sum of a few values at a time (a thread's round of loads, 16-64
// values, or a pack: thread_reduce_packs), so the error of a long sum is at most about
// (log2(values) + 2) ulps of sum |x| instead of growing with its length.
template <typename V>
struct NeumaierReducer {
  using Value = V;
  using Acc = Compensated<V>;
  __device__ static Acc identity() { return {V(0), V(0)}; }
  __device__ Acc add(Acc a, V x) const {
    const V t = a.sum + x;
    // The low-order bits lost by t: from x when |sum| >= |x|, else from sum.
    a.comp += (fabs(a.sum) >= fabs(x)) ? (a.sum - t) + x : (x - t) + a.sum;
    a.sum = t;
    return a;
  }
  __device__ Acc operator()(Acc a, Acc b) const {
    a = add(a, b.sum);
    a.comp += b.comp;
    return a;
  }
  __device__ V reduce(V a, V b) const { return a + b; }
  // An infinite or NaN sum is final: its compensation (inf - inf) would only turn it into NaN.
  __device__ V finish(Acc a) const { return a.sum - a.sum == V(0) ? a.sum + a.comp : a.sum; }
};

// The reducer of a fold that is a pairwise tree with a few adds (a thread's one round of loads,
// then the lanes' butterfly): its error is already bounded by the tree's depth, not the row's
// length, so a compensated sum adds plain there. Others are unchanged.
template <typename R>
struct TreeReducer {
  using type = R;
};
template <typename V>
struct TreeReducer<NeumaierReducer<V>> {
  using type = PlainReducer<SumOp<V>>;
};

// A tree fold's result as R's running state (a compensated sum's {value, 0}).
template <typename R, typename Tree>
__device__ __forceinline__ typename R::Acc as_running(typename Tree::Acc v, const R& r) {
  if constexpr (std::is_same_v<R, Tree>) {
    return v;
  } else {
    return r.add(R::identity(), v);
  }
}

// The pairwise fold of n values (a power of two) with fold(a, b): halves, in place. Values fold
// with R's reduce, running states (R::Acc) with R's merge, R itself. nvcc may leave the loop over
// widths rolled, the values in local memory: it did for 16 values in the runs kernel's adjacent
// loop (results README, session 93), not in the rows kernels'. Check the stack
// (cuobjdump -res-usage) when a new caller folds more than 8.
template <typename T, int n, typename Fold>
__device__ __forceinline__ T tree_fold(T (&v)[n], const Fold& fold) {
  static_assert((n & (n - 1)) == 0, "a power of two");
#pragma unroll
  for (int half = n / 2; half > 0; half /= 2) {
#pragma unroll
    for (int k = 0; k < half; ++k) v[k] = fold(v[k], v[k + half]);
  }
  return v[0];
}

// A float max of 16-bit values folds their packs as they are, two values a 32-bit word and
// instruction (packed_extreme: max.NaN on bf16x2 / f16x2, exact and NaN-propagating as MaxOp),
// and widens only the last word's two halves, where the float fold took a conversion and a max
// a value: the row kernels (add_round, pack_value) and the column kernels. H200, bfloat16 amax,
// us, float fold -> packed, separate processes (h200_study/session81.txt, sections 3-5): over
// dim -1 4096 x 32768 63.86 -> 62.82, 2048 x 50257 51.96 -> 51.04, 1024 x 262144 121.15 ->
// 120.35; over dim 0 2048 x 50257 59.63 -> 55.07, 32768 x 197 12.00 -> 10.82, 131072 x 256
// 23.40 -> 22.10, 65536 x 1024 37.57 -> 36.93; float16 alike, less at some.
template <typename R, typename In, int kVec>
constexpr bool kPackedMax =
    kPackedMinMax && sizeof(In) == 2 && kVec % 2 == 0 && std::is_same_v<R, PlainReducer<MaxOp<float>>>;

// The packed max of two words (tree_fold's fold).
template <typename In>
struct PackedMaxFold {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const { return packed_extreme<In, true>(a, b); }
};

// The packed max of a pack's words.
template <typename In, int kVec>
__device__ __forceinline__ uint32_t pack_max_word(const Pack<In, kVec>& p) {
  uint32_t w[kVec / 2];
  memcpy(w, &p, sizeof(w));
  return tree_fold(w, PackedMaxFold<In>{});
}

// The max of a word's two 16-bit values, widened to float.
template <typename In>
__device__ __forceinline__ float word_max(uint32_t word) {
  const uint32_t w[1] = {word};
  return MaxOp<float>()(widen_element<In, float>(w, 0), widen_element<In, float>(w, 1));
}

// The pairwise fold of one pack's kVec elements, in R's Value type (kWordWiden: 16-bit
// elements widened from their 32-bit words, primitives.cuh's widen; kPackedMax: folded packed).
template <bool kWordWiden = false, typename R, int kVec, typename In>
__device__ __forceinline__ typename R::Value pack_value(const Pack<In, kVec>& p, const R& r) {
  if constexpr (kPackedMax<R, In, kVec>) {
    return word_max<In>(pack_max_word(p));
  } else {
    using V = typename R::Value;
    V v[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = kWordWiden ? widen<V>(p, k) : static_cast<V>(p.v[k]);
#pragma unroll
    for (int step = 1; step < kVec; step *= 2) {
#pragma unroll
      for (int k = 0; k + step < kVec; k += 2 * step) v[k] = r.reduce(v[k], v[k + step]);
    }
    return v[0];
  }
}

// A pack of kVec elements (16 bytes' worth unless told) each R's identity (0 for sums, -inf for max).
template <typename In, int kVec = kMaxVec<In>, typename R>
__device__ __forceinline__ Pack<In, kVec> identity_pack(const R& r) {
  Pack<In, kVec> p;
#pragma unroll
  for (int k = 0; k < kVec; ++k) p.v[k] = static_cast<In>(r.finish(R::identity()));
  return p;
}

// A 32-bit word of identity_pack (two 16-bit identities: a packed max's start).
template <typename In, typename R>
__device__ __forceinline__ uint32_t identity_word(const R& r) {
  const Pack<In, kMaxVec<In>> p = identity_pack<In>(r);
  uint32_t w;
  memcpy(&w, &p, sizeof(w));
  return w;
}

// keep ? v : other, word by word: a select of whole packs went through local memory.
template <typename P>
__device__ __forceinline__ P select_pack(bool keep, const P& v, const P& other) {
  constexpr int kWords = sizeof(P) / 4;
  uint32_t a[kWords], b[kWords];
  memcpy(a, &v, sizeof(P));
  memcpy(b, &other, sizeof(P));
#pragma unroll
  for (int k = 0; k < kWords; ++k) a[k] = keep ? a[k] : b[k];
  P out;
  memcpy(&out, a, sizeof(P));
  return out;
}

// acc plus the kUnroll x kVec values of a round of packs, folded as one tree, across the packs
// first (thread_reduce_packs says why), then added once with R's add (kWordWiden: 16-bit
// elements widened from their words; kPackedMax: folded packed).
template <bool kWordWiden = false, typename R, typename In, int kVec, int kUnroll>
__device__ __forceinline__ typename R::Acc add_round_tree(typename R::Acc acc, const Pack<In, kVec> (&v)[kUnroll],
                                                          const R& r) {
  using V = typename R::Value;
  if constexpr (kPackedMax<R, In, kVec>) {  // the same tree, on words
    constexpr int kWords = kVec / 2;
    uint32_t w[kUnroll][kWords], e[kWords];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) memcpy(w[u], &v[u], sizeof(w[u]));
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      uint32_t t[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t[u] = w[u][k];
      e[k] = tree_fold(t, PackedMaxFold<In>{});
    }
    return r.add(acc, word_max<In>(tree_fold(e, PackedMaxFold<In>{})));
  } else {
    const auto reduce = [&r](V a, V b) { return r.reduce(a, b); };
    V e[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      V t[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t[u] = kWordWiden ? widen<V>(v[u], k) : static_cast<V>(v[u].v[k]);
      e[k] = tree_fold(t, reduce);
    }
    return r.add(acc, tree_fold(e, reduce));
  }
}

// ---- One thread's share of a contiguous or strided run ------------------------------------

// This thread's partial over whole packs p = tid, tid + nthreads, ... < npacks of a 16-byte
// aligned x, kUnroll packs in flight: rounds of kUnroll packs, then the packs left. With
// kSameRounds every thread runs the same rounds: the rounds all of them load whole, then at most
// one more with the packs past npacks the reducer's identity. Rounds counted per thread split a
// warp whose lanes share a row (the group kernels) wherever the lanes ended on different sides
// of the last whole round: the lanes that had loaded their round waited while the others loaded
// the rest, two trips to memory a row one after the other (and ptxas issued the remainder's 8
// loads in halves, a third). 16384 x 1000 float32 (250 packs a row, 256 in a warp's round) ran
// at 63% of copy, 16384 x 1024 at 78%; see reduce_rows_group_kernel for the gain. The block and
// split kernels keep the per-thread rounds: the same rounds cost them 5-14% (H200, us: 16384 x
// 4096 float32 amax 63.3 -> 71.1, bfloat16 sum 8192 x 14336 56.3 -> 62.4), their rows of one or
// a few rounds waiting on the spills of their 32 registers. kWordWiden widens the 16-bit elements
// from their 32-bit words (primitives.cuh's widen: one AND for a bfloat16 high half, where the
// conversion took a PRMT and an IMAD), the block kernel's choice (reduce_rows_block_kernel): the
// whole rounds' packs and the packs left after them (pack_value<kWordWiden>).
template <int kVec, int kUnroll, bool kSameRounds, bool kWordWiden = false, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_packs(const In* x, int64_t npacks, int64_t tid,
                                                               int64_t nthreads, const R& r) {
  using P = Pack<In, kVec>;
  using V = typename R::Value;
  const P* packs = reinterpret_cast<const P*>(x);
  typename R::Acc acc = R::identity();
  // Every reducer folds the round's kUnroll x kVec values as one tree, across the packs first,
  // and adds it once: no fold can start before the round's last loads land, so ptxas issues
  // them all first. With a tree per pack it began pack 0's before issuing the last loads (2 or
  // 3 of 4-8 packs in flight in the SASS of the 16-bit and float32 max group kernels). H200
  // (bench.py A/B, h200_study/session22.txt): bfloat16 16384 x 4096 sum 37.9 -> 36.1 us,
  // 65536 x 1024 35.5 -> 34.5, amax 36.8 -> 36.3 and 35.5 -> 34.4; float32 amax 65536 x 1024
  // 65.2 -> 64.0; a sum of 1024 in a CUDA graph 2.22 -> 1.99 us. A compensated sum so takes one
  // Neumaier step a round (kUnroll x kVec values: 16-64, a tree of depth 4-6), as the column
  // kernel one a quad of rows: its error stays (log2(kUnroll x kVec) + 2) u sum|x| whatever the
  // length. A step a pack, as before, cost float32 row sums 1-2% over plain adds; a step a round
  // 0.1-0.5% (H200, us, a step a pack -> a round: 32768 x 2048 66.98 -> 65.28, 4096 x 32768
  // 123.33 -> 122.88; h200_study/session79.txt, section 2).
  const auto add_round = [&](const P (&v)[kUnroll]) { acc = add_round_tree<kWordWiden>(acc, v, r); };
  const auto load_round = [&](int64_t p) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = packs[p + u * nthreads];
    add_round(v);
  };
  const int64_t step = kUnroll * nthreads;
  int64_t p = tid;
  if constexpr (kSameRounds) {
    const int64_t whole = npacks - npacks % step;  // packs in the rounds every thread loads whole
    for (; p < whole; p += step) load_round(p);
    if (whole < npacks) {
      P v[kUnroll];
      const P none = identity_pack<In>(r);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        v[u] = none;
        if (p + u * nthreads < npacks) v[u] = packs[p + u * nthreads];
      }
      add_round(v);
    }
  } else {
    for (; p + (kUnroll - 1) * nthreads < npacks; p += step) load_round(p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (p + u * nthreads < npacks) {
        const P v = packs[p + u * nthreads];  // one 16-byte load: pack_value of the global pack read it element by element
        acc = r.add(acc, pack_value<kWordWiden>(v, r));
      }
    }
  }
  return acc;
}

// This thread's partial over the contiguous x[0, n) of any element alignment, kThreads threads
// sharing it: the elements before the first 16-byte boundary (the head) and after the last
// whole pack (the tail), under kVec each, are read as scalars. kEdgesFirst loads them before the
// packs, all in flight with the row's packs; otherwise they are loops after the packs, each a
// trip to memory of its own (see reduce_rows_group_kernel for where which is faster).
template <int kVec, int kUnroll, int kThreads, bool kSameRounds, bool kEdgesFirst, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_contiguous(const In* x, int64_t n, int tid, const R& r) {
  using V = typename R::Value;
  const int64_t misalign = (reinterpret_cast<uintptr_t>(x) / sizeof(In)) % kVec;
  const int64_t head = misalign == 0 ? 0 : (kVec - misalign < n ? kVec - misalign : n);
  const int64_t npacks = (n - head) / kVec;
  if constexpr (kEdgesFirst) {
    const int64_t edges = n - npacks * kVec;  // head + tail
    // Edge element e is x[e] in the head and x[e + npacks * kVec] in the tail.
    constexpr int kEdgeLoads = (2 * (kVec - 1) + kThreads - 1) / kThreads;
    V edge[kEdgeLoads];
#pragma unroll
    for (int j = 0; j < kEdgeLoads; ++j) {
      const int64_t e = tid + j * kThreads;
      edge[j] = e < edges ? static_cast<V>(x[e < head ? e : e + npacks * kVec]) : r.finish(R::identity());
    }
    typename R::Acc acc = thread_reduce_packs<kVec, kUnroll, kSameRounds>(x + head, npacks, tid, kThreads, r);
#pragma unroll
    for (int j = 0; j < kEdgeLoads; ++j) acc = r.add(acc, edge[j]);
    return acc;
  } else {
    typename R::Acc acc = thread_reduce_packs<kVec, kUnroll, kSameRounds>(x + head, npacks, tid, kThreads, r);
    for (int64_t i = tid; i < head; i += kThreads) acc = r.add(acc, static_cast<V>(x[i]));
    for (int64_t i = head + npacks * kVec + tid; i < n; i += kThreads) acc = r.add(acc, static_cast<V>(x[i]));
    return acc;
  }
}

// This thread's partial over x[0], x[stride], ... x[(n - 1) * stride] (scalar loads).
template <typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_strided(const In* x, int64_t n, int64_t stride,
                                                                 int64_t tid, int64_t nthreads, const R& r) {
  typename R::Acc acc = R::identity();
  for (int64_t i = tid; i < n; i += nthreads) acc = r.add(acc, static_cast<typename R::Value>(x[i * stride]));
  return acc;
}

// ---- Rows --------------------------------------------------------------------------------

// Rows of a reduction: row r = o * inner + i starts at o * outer_stride + i * inner_stride and
// has `cols` elements `elem_stride` apart. Each row is cut into `splits` segments of `chunk`
// elements; work item w = row * splits + segment.
struct RowsArgs {
  int64_t rows, cols, inner;
  int64_t outer_stride, inner_stride, elem_stride;
  int64_t splits, chunk;
  // Every segment starts 16-byte aligned and holds whole packs (set by the launcher).
  bool aligned;
};

template <typename In>
__device__ __forceinline__ const In* segment_start(const In* x, const RowsArgs& a, int64_t w, int64_t* n) {
  if (a.splits == 1 && a.inner == 1) {  // plain rows: no 64-bit divisions (costly per short row)
    *n = a.cols;
    return x + w * a.outer_stride;
  }
  const int64_t row = a.splits == 1 ? w : w / a.splits, seg = w - row * a.splits;
  const int64_t c0 = seg * a.chunk;
  *n = (a.cols - c0 < a.chunk) ? a.cols - c0 : a.chunk;
  // Whole-tensor and last-dim rows (inner == 1) need no second 64-bit division.
  const int64_t o = a.inner == 1 ? row : row / a.inner;
  return x + o * a.outer_stride + (row - o * a.inner) * a.inner_stride + c0 * a.elem_stride;
}

// Thread tid's partial over a segment of n elements that kThreads threads share (kSameRounds:
// thread_reduce_packs; kEdgesFirst: thread_reduce_contiguous).
template <int kUnroll, int kThreads, bool kSameRounds, bool kEdgesFirst, bool kWordWiden = false, typename In,
          typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_segment(const In* seg, int64_t n, const RowsArgs& a, int tid,
                                                                 const R& r) {
  constexpr int kVec = kMaxVec<In>;
  if (a.aligned) return thread_reduce_packs<kVec, kUnroll, kSameRounds, kWordWiden>(seg, n / kVec, tid, kThreads, r);
  return a.elem_stride == 1 ? thread_reduce_contiguous<kVec, kUnroll, kThreads, kSameRounds, kEdgesFirst>(seg, n, tid, r)
                            : thread_reduce_strided(seg, n, a.elem_stride, tid, kThreads, r);
}

// The row kernels run 256-thread blocks (kBlock, launch.h; the block kernel 512 on long rows,
// launch_rows_unsplit). The block and split kernels fit in 32 registers, so that 2048 threads
// fill an SM (at 40, compensated sums lost 6-11% of their speed for the missing blocks); the
// group kernels hold more packs per thread and would spill.
// The block and split kernels stride their loads by the compile-time thread count rather
// than blockDim.x, so that a thread's packs in flight sit at immediate offsets of one address:
// with a runtime stride each took a 64-bit address of its own, and within 32 registers the
// float32 amax then had only 2 of its 4 packs in flight (SASS; 0.92-0.95x torch.compile at
// 4096 x 32768 on the H100 and H200).
constexpr int kRowsBlockThreads = 256;
// Partials a row of reduce_split_few_kernel that warp 0 of the last block folds; past them, the
// whole block (kBlockFold).
constexpr int64_t kWarpFoldPartials = 256;
constexpr int kRowsWideBlockThreads = 512;  // the block kernel's on long rows (launch_rows_unsplit)
#define REDUCE_OPS_ROWS_BOUNDS __launch_bounds__(256, 8)
#define REDUCE_OPS_GROUP_BOUNDS __launch_bounds__(256)

template <typename In, typename Out, typename R, int kWidth, int kUnroll>
__global__ void REDUCE_OPS_GROUP_BOUNDS reduce_rows_group_kernel(const In* __restrict__ x, Out* __restrict__ out, RowsArgs a, R r) {
  static_assert(kWidth <= kWarpSize, "a group lives inside one warp");
  // The same rounds for every lane (thread_reduce_packs) and the edges of unaligned rows loaded
  // first (thread_reduce_contiguous), where they were faster. H200, us, neither (6942782) ->
  // both, bench.py A/B in one run (h200_study/session50_rows.txt): float32 sums 16384 x 1000
  // 24.5 -> 20.0, 32768 x 197 15.7 -> 12.3, 65536 x 77 13.1 -> 11.4, amaxes 22.1 -> 18.9,
  // 12.4 -> 10.8, 10.4 -> 9.8; bfloat16 16384 x 1000 14.2 -> 12.3; no case of the "models"
  // and default presets more than 2% slower. The variants left out were timed by the
  // session's first try, whose log was lost: for 16-bit types the edges are up to 14 elements,
  // and loaded first they cost registers (69 against 59 for a warp of 8 packs a lane: 3 blocks
  // an SM, not 4) and instructions: unaligned bfloat16 rows lost 4-16% (442368 x 100 26.6 ->
  // 30.9, 16384 x 1021 14.7 -> 15.3); the same rounds alone took 16384 x 1021 to 13.8 but lost
  // 7-12% for groups under a warp (32768 x 197 8.7 -> 9.7), whose last round's unused packs are
  // folded too.
  constexpr bool kEdgesFirst = kMaxVec<In> <= 4;
  constexpr bool kSameRounds = kEdgesFirst || kWidth == kWarpSize;
  const int64_t items = a.rows * a.splits;
  const int lane = threadIdx.x % kWidth;
  const int64_t groups_per_block = blockDim.x / kWidth;
  // Whole warps step together so that every lane reaches the shuffles.
  for (int64_t w = blockIdx.x * groups_per_block + threadIdx.x / kWidth;
       w - threadIdx.x % kWarpSize / kWidth < items; w += gridDim.x * groups_per_block) {
    typename R::Acc acc = R::identity();
    if (w < items) {
      int64_t n;
      const In* seg = segment_start(x, a, w, &n);
      acc = thread_reduce_segment<kUnroll, kWidth, kSameRounds, kEdgesFirst>(seg, n, a, lane, r);
    }
    acc = warp_all_reduce<kWidth>(acc, r);
    if (w < items && lane == 0) out[w] = static_cast<Out>(r.finish(acc));
  }
}

// Short rows (one segment per row, plain rows: inner == 1, elements adjacent), at most kWidth packs
// of kVec elements each (kWidth of 1 to 32 lanes): a group of kWidth lanes takes kRows rows at once,
// a pack of each row per lane, so kRows loads are in flight per lane before the first shuffle; the
// grid covers every row, no loop. The block's groups take its rows in turn (row first + j x kGroups
// for j < kRows, as row_norm_rows_kernel), so that each of the block's loads reads consecutive rows.
// A row is folded as one pairwise tree (within each pack, then across the lanes: depth <= 8, error
// <= 8 u sum|x|) in the reducer's Value type: compensation pays off only along a thread's long
// sequential sums, and here it cost 22% (442368 x 128 float32). Aligned rows (a.aligned) take
// 16-byte packs and kShortRows rows; rows whose length, start or stride is not whole 16-byte packs
// take the widest of 8-, 4- and 2-byte packs that divides all three (reduce.cu's
// launch_narrow_rows), and more rows a lane where the rows fill the GPU, as many bytes in flight.
constexpr int kShortRows = 4;
// The unsigned word of kBytes (16, 8, 4 or 2): one pack's load.
template <int kBytes>
using PackWord = std::conditional_t<
    kBytes == 16, uint4,
    std::conditional_t<kBytes == 8, uint2, std::conditional_t<kBytes == 4, uint32_t, unsigned short>>>;
template <typename In, typename Out, typename R, int kWidth, int kVec = kMaxVec<In>, int kRows = kShortRows>
__global__ void REDUCE_OPS_GROUP_BOUNDS reduce_short_rows_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                 RowsArgs a, R r) {
  static_assert(kWidth <= kWarpSize, "a group lives inside one warp");
  constexpr int kGroups = kBlock / kWidth;
  using P = Pack<In, kVec>;
  using W = PackWord<sizeof(P)>;
  static_assert(sizeof(P) == sizeof(W), "packs of 2 to 16 bytes");
  using V = typename R::Value;
  const int lane = threadIdx.x % kWidth;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kGroups * kRows) + threadIdx.x / kWidth;
  // The warp's first row is its first group's row 0: past the end, so are all of the warp's rows
  // (no lane of it is left for a shuffle).
  if (first - threadIdx.x % kWarpSize / kWidth >= a.rows) return;
  const auto row = [&](int j) { return first + j * kGroups; };
  const bool lane_in_row = lane < a.cols / kVec;
  // Every row's pack starts as the identity's, as one word (W), and is loaded over it under
  // the row's condition; then every pack folds. With each fold under its load's condition,
  // ptxas put row 0's fold, and its wait for the load, before the other rows' loads (16-bit
  // maxes, float32 rows of lane groups of 8 and 16): one more trip to memory, which CUDA graphs
  // of small inputs show. With the select made on 16-bit values rather than on the word, it went
  // a value at a time (48 PRMTs in the bfloat16 amax of 16 lanes, where the word takes 1), the
  // same speed in more instructions. H200, us, CUDA graph (h200_study/session82.txt section 6):
  // bfloat16 amax 1024 x 128 2.57 -> 2.05 (torch.compile 2.0), float32 sum 1024 x 64 3.05 ->
  // 2.04; the large inputs even (442368 x 128, 1048576 x 64: 0.985-1.001).
  const Pack<In, kMaxVec<In>> none = identity_pack<In>(r);
  W none_word;
  memcpy(&none_word, &none, sizeof(W));
  P v[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    W w = none_word;
    if (lane_in_row && row(j) < a.rows) w = *reinterpret_cast<const W*>(x + row(j) * a.outer_stride + lane * kVec);
    memcpy(&v[j], &w, sizeof(W));
  }
  V acc[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) acc[j] = pack_value(v[j], r);
  const auto fold = [&r](V p, V q) { return r.reduce(p, q); };
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) acc[j] = fold(acc[j], shfl_xor(acc[j], mask, kWidth));
  }
  // Lane j of a group stores its row j.
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (lane == j % kWidth && row(j) < a.rows) out[row(j)] = static_cast<Out>(acc[j]);
  }
}

// The staged and tiny rows' loads (load_streaming, primitives.cuh) take rows of at least this many
// values as a stream (where their output fits in the L2: reduce.cu's stream_rows): their lines go
// first when the L1 and the L2 make room. H200, us, plain -> streaming loads
// (h200_study/session87.txt, section 6; events after bench.py's flush, which leaves the L2 dirty
// for rows of up to 8 values, clean past): staged float32 4194304 x 5 sum 30.78 -> 29.66, x 7
// 39.94 -> 36.70, x 9 41.09 -> 39.07, x 17 71.42 -> 66.56; bfloat16 x 9 23.68 -> 22.94, x 20 43.58
// -> 41.02, x 33 68.58 -> 63.81; float64 x 5 54.69 -> 54.08, x 9 78.34 -> 75.71; tiny bfloat16 x 5
// 21.73 -> 18.98, x 7 28.51 -> 25.15; CUDA graphs within 1% (bfloat16 262144 x 5 3.13 -> 2.86).
// Rows of 2-3 values, whose output is a third of the input or more, lost: float64 4194304 x 3
// 37.89 -> 38.48, 16777216 x 3 127.98 -> 137.25; float32 16777216 x 3 68.38 -> 71.52, x 2 53.28 ->
// 55.65.
constexpr int kStreamMinCols = 4;

// Rows shorter than a 16-byte pack (kCols < kVec elements), dense (row i at x + i * kCols) from
// a 16-byte aligned x: kVec rows are kCols whole packs. A thread takes kVec rows, loads their
// kCols packs (all in flight), folds each row's values in order (at most 7: their error stays
// under the short rows' tree's) and writes its kVec results, as whole 16-byte words where `out`
// is 16-byte aligned. The last rows, under kVec, go element by element. Before, these rows took
// the group kernel's unaligned path a row at a time: H200, bfloat16 sum of 16777216 x 4, 660 us
// against torch.compile's 52.7, now 47 (h200_study/session83.txt, section 3). kStream: the packs
// load as a stream (load_streaming; reduce.cu's stream_rows says when).
template <typename In, typename Out, typename R, int kCols, bool kStream>
__global__ void REDUCE_OPS_GROUP_BOUNDS reduce_tiny_rows_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                int64_t rows, bool out_aligned, R r) {
  constexpr int kVec = kMaxVec<In>;
  static_assert(kCols >= 2 && kCols < kVec, "rows of 2 or more, shorter than a pack");
  using P = Pack<In, kVec>;
  using V = typename R::Value;
  const int64_t tile = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row0 = tile * kVec;
  if (row0 >= rows) return;
  const bool whole = row0 + kVec <= rows;
  In v[kVec * kCols];
  if (whole) {
    P p[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const P* src = reinterpret_cast<const P*>(x) + tile * kCols + c;
      p[c] = kStream ? load_streaming(src) : *src;
    }
    memcpy(v, p, sizeof(p));
  } else {
    const In none = static_cast<In>(r.finish(R::identity()));
    const int64_t n = (rows - row0) * kCols;
#pragma unroll
    for (int e = 0; e < kVec * kCols; ++e) v[e] = e < n ? x[row0 * kCols + e] : none;
  }
  Pack<Out, kVec> o;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    V acc = static_cast<V>(v[i * kCols]);
#pragma unroll
    for (int c = 1; c < kCols; ++c) acc = r.reduce(acc, static_cast<V>(v[i * kCols + c]));
    o.v[i] = static_cast<Out>(acc);
  }
  constexpr int kWords = sizeof(o) % sizeof(uint4) == 0 ? sizeof(o) / sizeof(uint4) : 0;
  if (kWords > 0 && whole && out_aligned) {
    uint4 w[kWords > 0 ? kWords : 1];
    memcpy(w, &o, kWords * sizeof(uint4));
#pragma unroll
    for (int k = 0; k < kWords; ++k) reinterpret_cast<uint4*>(out + row0)[k] = w[k];
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (row0 + i < rows) out[row0 + i] = o.v[i];
  }
}

// The fold of n values load(0), ..., load(n - 1), n the same in every lane (no value past n is
// read, none is masked): pairwise trees of 8 values in order, then one tree each of 4, 2 and 1
// values as n's bits say.
template <typename T, typename Load, typename Fold>
__device__ __forceinline__ T fold_run(T acc, int n, const Load& load, const Fold& fold) {
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    T v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = load(k + j);
    acc = fold(acc, tree_fold(v, fold));
  }
  if (n & 4) {
    T v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = load(k + j);
    acc = fold(acc, tree_fold(v, fold));
    k += 4;
  }
  if (n & 2) {
    acc = fold(acc, fold(load(k), load(k + 1)));
    k += 2;
  }
  if (n & 1) acc = fold(acc, load(k));
  return acc;
}

// The value of the staged row of cols values from element `start` of the stage. 16-bit rows are
// read by 32-bit words, (cols + 1) / 2 of them: a row of odd length starts on a word's high half
// every other row and ends on a low half the others, the other half the neighbour's, replaced by
// the identity; a max folds the words packed (kPackedMax) and widens one word, a sum widens each
// word's halves. Other rows are read by elements. kWide (rows of whole 8-byte words, 16- and
// 32-bit values): by 8-byte words. The row is at least 2 values (9 for 16-bit).
template <typename In, bool kWide, typename R>
__device__ __forceinline__ typename R::Value staged_row_value(const uint4* stage, int start, int cols, const R& r) {
  using V = typename R::Value;
  const auto fold = [&r](V a, V b) { return r.reduce(a, b); };
  // A 32-bit word's value: two 16-bit values folded, or one float (generic: 8-byte values, read by
  // elements, never instantiate it).
  const auto value = [&r](auto word) {
    const uint32_t w[1] = {word};
    if constexpr (sizeof(In) == 2) {
      return r.reduce(widen_element<In, V>(w, 0), widen_element<In, V>(w, 1));
    } else {
      return widen_element<In, V>(w, 0);
    }
  };
  if constexpr (kWide) {
    const uint2* units = reinterpret_cast<const uint2*>(stage) + start * static_cast<int>(sizeof(In)) / 8;
    const int n = cols * static_cast<int>(sizeof(In)) / 8;
    if constexpr (kPackedMax<R, In, 2>) {
      const PackedMaxFold<In> packed;
      const auto unit = [&](int k) { return packed(units[k].x, units[k].y); };
      return word_max<In>(fold_run(unit(0), n - 1, [&](int k) { return unit(1 + k); }, packed));
    } else {
      const auto unit = [&](int k) { return fold(value(units[k].x), value(units[k].y)); };
      return fold_run(unit(0), n - 1, [&](int k) { return unit(1 + k); }, fold);
    }
  } else if constexpr (sizeof(In) == 2) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(stage) + start / 2;
    const int n = (cols + 1) / 2;
    const uint32_t none = identity_word<In>(r);
    uint32_t first = words[0], last = words[n - 1];
    if (start % 2) first = (first & 0xffff0000u) | (none & 0xffffu);
    if ((start + cols) % 2) last = (last & 0xffffu) | (none & 0xffff0000u);
    const auto middle = [words](int k) { return words[1 + k]; };
    if constexpr (kPackedMax<R, In, 2>) {
      const PackedMaxFold<In> packed;
      return word_max<In>(fold_run(packed(first, last), n - 2, middle, packed));
    } else {
      return fold_run(fold(value(first), value(last)), n - 2, [&](int k) { return value(middle(k)); }, fold);
    }
  } else {
    const In* row = reinterpret_cast<const In*>(stage) + start;
    return fold_run(static_cast<V>(row[0]), cols - 1, [row](int k) { return static_cast<V>(row[1 + k]); }, fold);
  }
}

// Dense rows (row i at x + i * cols, a 16-byte aligned x) of up to 128 bytes that are not whole
// 16-byte packs (reduce.cu's launch_rows_unsplit, from 32 KB-4 MB of them, any size past 64 bytes a
// row): a block takes block_rows rows (128, or a multiple of 256: their span is whole 16-byte
// packs, at most 16 KB), loads the span with every thread's packs in flight (at most kStagedPacks)
// into shared memory, and each thread then folds its rows from there (staged_row_value). The last
// block's elements past its last whole pack go element by element. Before, these rows took the
// group kernel's unaligned path a row at a time (float32 rows of 5-15 values: this kernel with a
// row a thread, 256 rows a block): H200, us, bfloat16 sum of 4194304 x 9 190 -> 27.7 (torch.compile
// 60.4), float32 4194304 x 5 43.9 -> 31.0 (30.9) (h200_study/session84.txt). The fold read a value
// at a time, 8 to a tree with a predicate and a select each (the slots past the row the identity):
// the kernel was issue-bound (82% of issue slots, bfloat16 x 9). By words, 16-bit maxes packed
// (staged_row_value), H200, us, that fold -> this (session86.txt, section 3): bfloat16 4194304 x 9
// sum 27.36 -> 23.52, amax 27.23 -> 23.14, x 17 sum 44.00 -> 38.00, x 63 132.86 -> 127.25; float16
// x 9 amax 27.17 -> 22.98; float32 x 17 79.10 -> 76.80, 442368 x 30 19.17 -> 17.98. kStream: the
// span loads as a stream (load_streaming; reduce.cu's stream_rows says when).
constexpr int kStagedPacks = 4;  // a block's span is at most kStagedPacks x kBlock packs (16 KB)
template <typename In, typename Out, typename R, bool kWide, bool kStream>
__global__ void __launch_bounds__(kBlock) reduce_staged_rows_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                    int64_t rows, int cols, int block_rows, R r) {
  constexpr int kVec = kMaxVec<In>, kPacks = kStagedPacks;
  extern __shared__ uint4 staged_words[];
  In* staged = reinterpret_cast<In*>(staged_words);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * block_rows;
  const int n_rows = rows - row0 < block_rows ? static_cast<int>(rows - row0) : block_rows;
  const int n = n_rows * cols;
  const int packs = n / kVec;
  const In* span = x + row0 * cols;  // block_rows x cols x sizeof(In) is whole 16-byte packs
  uint4 w[kPacks];
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = threadIdx.x + k * kBlock;
    if (p < packs) {
      const uint4* src = reinterpret_cast<const uint4*>(span) + p;
      w[k] = kStream ? load_streaming(src) : *src;
    }
  }
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = threadIdx.x + k * kBlock;
    if (p < packs) staged_words[p] = w[k];
  }
  for (int e = packs * kVec + threadIdx.x; e < n; e += kBlock) staged[e] = span[e];
  __syncthreads();
  // Not unrolled: unrolled 4 times (the compiler's choice), the rows' uniform branches kept each
  // row's shared reads apart and the code doubled, and float32 rows of 5-15 values were 2-10%
  // slower. H200, us, not unrolled against unrolled (session86.txt, sections 2 and 4): float32
  // 4194304 x 7 sum 39.73 against 43.74, x 9 41.02 against 43.17, 65536 x 9 in a CUDA graph 2.52
  // against 2.78. (With 256 rows of 65-128 bytes a block, 8 packs a thread, unrolled was faster:
  // float32 4194304 x 17 73.28 against 76.75; 128 rows a block beat both, 71.36.)
#pragma unroll 1
  for (int i = threadIdx.x; i < n_rows; i += kBlock) {
    out[row0 + i] = static_cast<Out>(staged_row_value<In, kWide>(staged_words, i * cols, cols, r));
  }
}

// The block's fold of every thread's v (kWarps warps, 1-D), for every thread, after one barrier:
// each warp folds the warps' values itself where block_all_reduce has warp 0 fold them and
// broadcast them after a second barrier (0.09 us of a 1024-float sum in a CUDA graph, H100,
// h100_study/session42_small_rows.txt). With kGroupWarps < kWarps, the fold of each group of
// kGroupWarps adjacent warps for that group's threads (several outputs a block); no barrier where a
// group is one warp. Its slots are written once: a kernel calls it once.
template <int kWarps, int kGroupWarps = kWarps, typename Acc, typename Op>
__device__ __forceinline__ Acc block_fold_once(Acc v, Op op) {
  static_assert(kWarps >= 1 && kWarps <= kWarpSize && (kWarps & (kWarps - 1)) == 0, "1 to 32 warps, a power of two");
  static_assert(kGroupWarps >= 1 && kWarps % kGroupWarps == 0 && (kGroupWarps & (kGroupWarps - 1)) == 0,
                "groups of a power of two warps that divide the block");
  v = warp_all_reduce<kWarpSize>(v, op);
  if constexpr (kGroupWarps == 1) {
    return v;
  } else {
    __shared__ Acc warp_results[kWarps];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    const int first = kGroupWarps == kWarps ? 0 : warp - warp % kGroupWarps;  // the group's first warp
    return warp_all_reduce<kGroupWarps>(lane < kGroupWarps ? warp_results[first + lane] : Op::identity(), op);
  }
}

// kPacks packs a thread of a run of npacks (>= 1) 16-byte packs, thread t taking t, t + kThreads,
// ..., all loaded before the first fold; each thread folds its packs as a tree with the reducer's
// merge (compensated sums stay compensated). A pack past npacks is a load of the last one (no
// predicate: load_pinned) replaced by a pack of the identity; a run the block covers exactly (a
// whole split segment, 1024 floats) skips that clamp and select (the clamped addresses cost the
// one-round split's float32 amax 2-3%, H100 A/B, h100_study/session44_loads.txt). Each path folds
// on its own: one fold after the branch (16% less code; ptxas predicated the two load paths into
// one) made 16-bit sums 1.5-4% slower in CUDA graphs, exact runs or not, float32 even (H100,
// h100_study/session45_cols.txt).
template <int kThreads, int kPacks, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_fold_packs_once(const Pack<In, kMaxVec<In>>* packs, int npacks,
                                                                  const R& r) {
  using P = Pack<In, kMaxVec<In>>;
  const int t = threadIdx.x;
  P v[kPacks];
  typename R::Acc acc[kPacks];
  if (npacks == kThreads * kPacks) {  // the whole block's packs: one address, immediate offsets
#pragma unroll
    for (int p = 0; p < kPacks; ++p) v[p] = load_pinned(packs + t + p * kThreads);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) acc[p] = r.add(R::identity(), pack_value(v[p], r));
    return tree_fold(acc, r);
  }
#pragma unroll
  for (int p = 0; p < kPacks; ++p) v[p] = load_pinned(packs + min(t + p * kThreads, npacks - 1));
  const P none = identity_pack<In>(r);
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    acc[p] = r.add(R::identity(), pack_value(select_pack(t + p * kThreads < npacks, v[p], none), r));
  }
  return tree_fold(acc, r);
}

// Few short aligned rows (plain rows, one segment each: a whole small tensor, typically), a block
// of kWarps warps per row: block b reduces the row at x + b * row_stride, of npacks <= kWarps x 32
// x kPacks packs, all loaded before the first fold; then the warps' butterflies and, with several
// warps, block_fold_once's one barrier. No loop, and only the pointers, the stride and npacks as
// arguments. In a CUDA graph on an H100 a kernel storing one value takes ~1.15 us a call, and a
// 1024-float sum took 1.90 us by the block kernel: its grid-stride loop and segment_start alone
// cost 0.15 us, and the second barrier of block_all_reduce 0.09
// (h100_study/session42_small_rows.txt).
template <typename In, typename Out, typename R, int kWarps, int kPacks>
__global__ void __launch_bounds__(kWarps * kWarpSize) reduce_few_rows_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                             int64_t row_stride, int npacks, R r) {
  using P = Pack<In, kMaxVec<In>>;
  const P* packs = reinterpret_cast<const P*>(x + blockIdx.x * row_stride);
  const typename R::Acc folded = block_fold_once<kWarps>(thread_fold_packs_once<kWarps * kWarpSize, kPacks>(packs, npacks, r), r);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<Out>(r.finish(folded));
}

// ---- Two groups of reduced dims --------------------------------------------------------------

// A small reduction whose reduced dims make two groups that no single view joins (dims 0 and 2 of
// (N, C, L), a column slice reduced whole): out[o * inner + i] folds x[o * outer_stride + i *
// inner_stride + q * q_stride + m * m_stride] over q < qs and m < ms, in one launch where the
// binding's stages (ops.cpp) take two.
struct TwoGroupsArgs {
  int64_t inner, outer_stride, inner_stride, q_stride, m_stride;
  int qs, ms;          // qs * ms < 2^31
  int q_step, m_step;  // the block's thread count as (q, m): threads / ms, threads % ms
};

// A block of kWarps warps an output: thread t takes values t, t + kThreads, ... (kPer of them)
// of the qs x ms in index order (m fastest: adjacent lanes read adjacent elements where m_stride
// is 1), every load before the first fold, folded as a tree with the reducer's merge; then
// block_fold_once. A value past qs x ms loads the output's first element (no branch: a 16-bit
// load in a branch kept the next ones waiting, as they converted in it) and folds the identity.
template <typename In, typename Out, typename R, int kWarps, int kPer>
__global__ void __launch_bounds__(kWarps * kWarpSize) reduce_two_groups_kernel(const In* __restrict__ x,
                                                                               Out* __restrict__ out,
                                                                               TwoGroupsArgs a, R r) {
  const int64_t o = blockIdx.x / a.inner, i = blockIdx.x - o * a.inner;
  const In* base = x + o * a.outer_stride + i * a.inner_stride;
  int q = threadIdx.x / a.ms, m = threadIdx.x - q * a.ms;
  In v[kPer];
  bool in[kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    in[p] = q < a.qs;
    v[p] = base[in[p] ? q * a.q_stride + m * a.m_stride : 0];
    q += a.q_step;
    m += a.m_step;
    if (m >= a.ms) {
      m -= a.ms;
      ++q;
    }
  }
  typename R::Acc acc[kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    acc[p] = in[p] ? r.add(R::identity(), static_cast<typename R::Value>(v[p])) : R::identity();
  }
  const typename R::Acc folded = block_fold_once<kWarps>(tree_fold(acc, r), r);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<Out>(r.finish(folded));
}

// Folds into acc the published partials j, j + nthreads, ..., j + (kInFlight - 1) * nthreads of
// slots, in that order, each slot put back to zero once read. A slot whose flag is not up yet (its
// store still on its way; its block has arrived, so it comes) is read again.
template <int kInFlight, typename R>
__device__ __forceinline__ void fold_published_run(Slot* slots, int64_t j, int nthreads, typename R::Acc& acc,
                                                   const R& r) {
  using Acc = typename R::Acc;
  constexpr int kWords = kSlotWords<Acc>;
  Slot s[kInFlight][kWords];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) s[u][i] = load_slot(slots + (j + u * nthreads) * kWords + i);
  }
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
    unsigned words[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      Slot* slot = slots + (j + u * nthreads) * kWords + i;
      while (!(s[u][i] & kSlotFlag)) s[u][i] = load_slot(slot);
      store_slot(slot, 0);
      words[i] = static_cast<unsigned>(s[u][i]);
    }
    Acc v;
    memcpy(&v, words, sizeof(Acc));
    acc = r(acc, v);
  }
}

// Folds into acc the published partials j, j + nthreads, ... < n of slots, in that order: runs of
// kInFlight partials while they last, then of half as many, and so on down to one.
template <int kInFlight, typename R>
__device__ __forceinline__ void fold_published_from(Slot* slots, int64_t j, int64_t n, int nthreads,
                                                    typename R::Acc& acc, const R& r) {
  for (; j + (kInFlight - 1) * nthreads < n; j += kInFlight * nthreads) {
    fold_published_run<kInFlight>(slots, j, nthreads, acc, r);
  }
  if constexpr (kInFlight > 1) fold_published_from<kInFlight / 2>(slots, j, n, nthreads, acc, r);
}

// Thread tid's fold of the partials published (publish_partial) in slots: partials tid, tid +
// nthreads, ... < n, in that order, each slot put back to zero once read, up to kSlots slots in
// flight (whole partials, at least one; a power of two): the last block of a split row folds up
// to ~512 partials (1056 when this was measured), 2-5 L2 round trips one after another a thread
// without (H200: 2^24-element sums 2% faster).
template <int kSlots, typename R>
__device__ __forceinline__ typename R::Acc fold_published(Slot* slots, int64_t n, int tid, int nthreads, const R& r) {
  constexpr int kWords = kSlotWords<typename R::Acc>;
  typename R::Acc acc = R::identity();
  fold_published_from<(kSlots > kWords ? kSlots / kWords : 1)>(slots, tid, n, nthreads, acc, r);
  return acc;
}

// Thread 0's end of split item w of row `row` (`splits` items a row), acc its block's fold:
// publishes acc as partial w of `slots` and arrives at the row's counter; true where that arrival
// completes the row's count (its block then folds the row's partials).
template <typename Acc>
__device__ __forceinline__ bool publish_and_arrive_row(const Acc& acc, int64_t w, int64_t row, int64_t splits,
                                                       Slot* slots, unsigned* counters) {
  publish_partial(slots + w * kSlotWords<Acc>, acc);
  return arrive_relaxed(counters + row) == static_cast<unsigned>(splits - 1);
}

// Few split rows, latency first: block b reduces segment seg = b % splits of row b / splits (the
// row at x + row * row_stride, row_packs aligned packs), kSegPacks = 256 x kPacks packs, every
// load in flight at once, one barrier; thread 0 then publishes the partial and arrives, and in the
// row's last block warp 0 (kBlockFold: the whole block) folds the row's partials (in index order)
// and resets the row's counter and slots (fold_published). A segment is one pairwise tree (depth
// log2 of its values, <= 14), so a compensated sum adds it plain (TreeReducer) and compensates the
// partials' fold only: the error stays bounded whatever the row's length, at about (14 + 2) ulps
// of sum |x| instead of ~8. H200, CUDA graph, float32 sums, us, compensated segments -> plain
// (h200_study/session82.txt, section 1): 2^14 whole 3.05 -> 2.99, 2^20 4.23 -> 4.11, 2^22 7.58 ->
// 7.38, 4 x 65536 over dim -1 3.41 -> 3.35.
// Against reduce_rows_split_kernel (its grid-stride loop, segment_start, two barriers for the
// block's fold, two more for the last block's), H100, CUDA graph: 2^20 float32 sum 4.53 ->
// 3.77 us (torch.compile 4.86), 4 x 65536 over dim -1 3.86 -> 3.26 (3.68)
// (h100_study/session43_small.txt). counters and slots must be zero when the kernel starts; they
// are zero again when it ends. The bound of 2 blocks an SM lets ptxas hold 8 packs a thread at
// once: left to itself it kept the kernel at 32 registers and issued half the loads after the
// first folds.
// kBlockFold (the launcher's choice past kWarpFoldPartials partials a row): the last block's 256
// threads fold the partials, 4 slots in flight each, then as a block. H200, CUDA graph, us, warp
// -> block (h200_study/session107.txt, calls 2 and 3): 2^22 float32 sum 7.63 -> 7.11, amax 7.42
// -> 6.96, 2^23 bfloat16 sum 7.63 -> 7.06, amax 7.50 -> 6.98 (512 partials: the warp's 16-32
// slots a lane, one after another in its fold, and its resets); rows of 256 partials or fewer
// lose 0.02-0.09 us by the block (its barrier, its fold), 4 x 65536 (16) up to 0.85.
template <typename In, typename Out, typename R, int kPacks, bool kBlockFold = false>
__global__ void __launch_bounds__(kRowsBlockThreads, 2) reduce_split_few_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                            int64_t row_stride, int64_t row_packs,
                                                                            int splits, Slot* __restrict__ slots,
                                                                            unsigned* __restrict__ counters, R r) {
  using Acc = typename R::Acc;
  using Tree = typename TreeReducer<R>::type;
  using P = Pack<In, kMaxVec<In>>;
  constexpr int kSegPacks = kRowsBlockThreads * kPacks;
  // The last warp's slots in flight a lane: a 2^22-element float32 sum's 512 two-word partials
  // (32 slots a lane) in two round trips, where 4 slots a lane took 8. H200, CUDA graph, us: 8.61
  // with 4 slots, 7.62 with 16, 7.31 with session 105's fenced partials (4 in flight)
  // (h200_study/session106.txt, calls 4 and 5); since session 107 rows of that many partials
  // take kBlockFold, and 16 slots a lane fold up to 256 two-word partials in one round trip. 32
  // slots made no difference there and spilled (session107.txt, call 2).
  constexpr int kFoldSlots = 16;
  const int row = blockIdx.x / splits, seg = blockIdx.x - row * splits;
  const int64_t first = static_cast<int64_t>(seg) * kSegPacks;
  const int npacks = row_packs - first < kSegPacks ? static_cast<int>(row_packs - first) : kSegPacks;
  const P* packs = reinterpret_cast<const P*>(x + row * row_stride) + first;
  const typename Tree::Acc segment =
      block_fold_once<kRowsBlockThreads / kWarpSize>(thread_fold_packs_once<kRowsBlockThreads, kPacks>(packs, npacks, Tree{}), Tree{});
  Acc acc = as_running<R, Tree>(segment, r);
  Slot* row_slots = slots + static_cast<int64_t>(row) * splits * kSlotWords<Acc>;
  if constexpr (kBlockFold) {
    __shared__ bool last;
    if (threadIdx.x == 0) last = publish_and_arrive_row(acc, blockIdx.x, row, splits, slots, counters);
    __syncthreads();
    if (!last) return;
    acc = block_all_reduce(fold_published<4>(row_slots, splits, threadIdx.x, kRowsBlockThreads, r), r);
  } else {
    if (threadIdx.x >= kWarpSize) return;
    const int lane = threadIdx.x;
    unsigned last = 0;
    if (lane == 0) last = publish_and_arrive_row(acc, blockIdx.x, row, splits, slots, counters);
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    acc = warp_all_reduce<kWarpSize>(fold_published<kFoldSlots>(row_slots, splits, lane, kWarpSize, r), r);
  }
  if (threadIdx.x == 0) {
    out[row] = static_cast<Out>(r.finish(acc));
    counters[row] = 0u;
  }
}

// Work item w's segment reduced by the whole block of kThreads threads; every thread gets the
// result.
template <int kUnroll, bool kWordWiden = false, int kThreads = kRowsBlockThreads, typename In, typename R>
__device__ __forceinline__ typename R::Acc block_reduce_item(const In* x, const RowsArgs& a, int64_t w, const R& r) {
  int64_t n;
  const In* seg = segment_start(x, a, w, &n);
  return block_all_reduce(thread_reduce_segment<kUnroll, kThreads, false, false, kWordWiden>(seg, n, a, threadIdx.x, r),
                          r);
}

// A block of kThreads (kRowsBlockThreads or kRowsWideBlockThreads: launch_rows_unsplit) a row.
// 16-bit packs are widened from their words: 16 fewer instructions a round of 4 bfloat16 packs
// (SASS: 92 -> 76), H200, us, base -> word-widened, separate processes
// (h200_study/session80.txt, section 1): bfloat16 sum 4096 x 32768 64.45 -> 64.19, 4096 x 32000
// 62.91 -> 62.72, amax within 0.1%. The packs after the whole rounds too (the one-round rows of
// block_round take only those): bfloat16 sums 16384 x 4608 37.75 -> 37.65, 16384 x 6400 50.48 ->
// 50.32, 16384 x 7680 59.71 -> 59.52, 4096 x 32000 62.32 -> 62.18, amaxes alike; float16 even
// (session81.txt, section 1). (The split kernel keeps the conversion: the whole 2^28 bfloat16 sum
// lost 1.5% with it, session79.txt section 7.)
template <typename In, typename Out, typename R, int kUnroll, int kThreads = kRowsBlockThreads>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads)
    reduce_rows_block_kernel(const In* __restrict__ x, Out* __restrict__ out, RowsArgs a, R r) {
  const int64_t items = a.rows * a.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const typename R::Acc acc = block_reduce_item<kUnroll, true, kThreads>(x, a, w, r);
    if (threadIdx.x == 0) out[w] = static_cast<Out>(r.finish(acc));
  }
}

// The end of split item w = row * splits + seg, its block's fold acc (every thread's): acc is
// published as partial w of `slots`, and the block whose arrival completes the row's count folds
// the row's partials (in index order, the same for every run) into out[row] and resets
// counters[row] and the row's slots to 0 (fold_published), so that counters and slots are all zero
// again when the kernel ends. `last` is the block's shared flag.
template <typename Out, typename R>
__device__ __forceinline__ void arrive_and_fold_row(typename R::Acc acc, int64_t w, int64_t row, int64_t splits,
                                                    Slot* slots, unsigned* counters, Out* out, bool& last,
                                                    const R& r) {
  if (threadIdx.x == 0) last = publish_and_arrive_row(acc, w, row, splits, slots, counters);
  __syncthreads();
  if (last) {
    acc = fold_published<4>(slots + row * splits * kSlotWords<typename R::Acc>, splits, threadIdx.x, blockDim.x, r);
    acc = block_all_reduce(acc, r);
    if (threadIdx.x == 0) {
      out[row] = static_cast<Out>(r.finish(acc));
      counters[row] = 0u;
    }
  }
  __syncthreads();  // `last` is rewritten by the next item
}

// Split rows in one launch: item w = row * splits + seg reduces its segment into partial w of
// `slots` (arrive_and_fold_row). counters and slots must be zero when the kernel starts.
template <typename In, typename Out, typename R, int kUnroll>
__global__ void REDUCE_OPS_ROWS_BOUNDS reduce_rows_split_kernel(const In* __restrict__ x, Out* __restrict__ out, RowsArgs a,
                                         Slot* __restrict__ slots, unsigned* __restrict__ counters, R r) {
  __shared__ bool last;
  const int64_t items = a.rows * a.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const typename R::Acc acc = block_reduce_item<kUnroll>(x, a, w, r);
    arrive_and_fold_row(acc, w, w / a.splits, a.splits, slots, counters, out, last, r);
  }
}

// ---- Two groups of reduced dims, runs of them ------------------------------------------------

// A reduction over two groups of reduced dims whose inner group is contiguous (dims 0 and 2 of
// (N, C, L), (0, 2, 3) of NCHW), past the block-an-output kernel's size: output row = o * inner +
// i folds runs q < runs of run_packs adjacent packs (kVec elements each) at x + o * outer_stride +
// i * inner_stride + q * q_stride (strides in packs). A row's run_packs x runs packs, in index
// order (the run's packs fastest), are cut into `splits` segments of `chunk` packs, work item w =
// row * splits + segment.
struct TwoGroupsRunsArgs {
  int64_t rows, inner, outer_stride, inner_stride, q_stride;
  int64_t row_packs, splits, chunk;
  int run_packs;
  int step_packs;     // a thread's stride S (kThreads, or kThreads * kAdjacent) % run_packs: its step
  int64_t step_ptr;   // within a run, and in memory: (S / run_packs) * q_stride + step_packs
  int64_t wrap_ptr;   // a step that passes a run's end moves on by q_stride - run_packs more
};

// A thread's place in a row's runs (TwoGroupsRunsArgs), packs of type P: found once from pack
// index f (a division), then moved by step() (a.step_packs / step_ptr: an add and a compare).
template <typename P>
struct RunCursor {
  const P* p;  // the pack at f
  int j;       // its place in its run
  __device__ __forceinline__ RunCursor(const P* row, const TwoGroupsRunsArgs& a, int64_t f) {
    const int64_t q = f / a.run_packs;
    j = static_cast<int>(f - q * a.run_packs);
    p = row + q * a.q_stride + j;
  }
  __device__ __forceinline__ void step(const TwoGroupsRunsArgs& a) {
    p += a.step_ptr;
    j += a.step_packs;
    if (j >= a.run_packs) {
      j -= a.run_packs;
      p += a.wrap_ptr;
    }
  }
  // The pack k after p, in the next run where k passes this one's end (runs hold more than k).
  __device__ __forceinline__ const P* at(const TwoGroupsRunsArgs& a, int k) const {
    return j + k < a.run_packs ? p + k : p + k + a.wrap_ptr;
  }
};

// This thread's partial over packs tid, tid + kThreads, ... of [start, end) of a row whose runs
// start at `row` (TwoGroupsRunsArgs), its place kept by a RunCursor: kUnroll packs in flight as one
// tree (add_round_tree); the packs left after the whole rounds as one more round, those past the
// end the identity (one at a time, each load waited for the fold of the one before: 2-7 trips to
// memory where one does).
template <int kVec, int kUnroll, int kThreads, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_runs(const In* row, const TwoGroupsRunsArgs& a, int64_t start,
                                                              int64_t end, const R& r) {
  using P = Pack<In, kVec>;
  const int64_t f = start + threadIdx.x;
  int64_t left = f < end ? (end - f + kThreads - 1) / kThreads : 0;  // this thread's packs
  RunCursor<P> c(reinterpret_cast<const P*>(row), a, f);
  typename R::Acc acc = R::identity();
  for (; left >= kUnroll; left -= kUnroll) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = *c.p;
      c.step(a);
    }
    acc = add_round_tree(acc, v, r);
  }
  if (left > 0) {
    const P none = identity_pack<In, kVec>(r);
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = none;
      if (u < left) v[u] = *c.p;
      c.step(a);
    }
    acc = add_round_tree(acc, v, r);
  }
  return acc;
}

// thread_reduce_runs for runs read element by element, kAdj elements adjacent a thread as
// torch.compile's reductions load them: thread t the elements f .. f + kAdj - 1, f = start + kAdj *
// t, then f + kThreads * kAdj (a.step_packs / step_ptr step by kThreads * kAdj), kGroups such groups
// in flight as one tree. An element past its run's end lies at + wrap_ptr (runs hold at least kAdj
// elements, so it is in the next run). The elements left after the whole rounds come as one more
// round, those at or past `end` the identity. kWarpUniform: the whole rounds end where the warp's
// last thread's round is no longer whole, so that no warp takes both a whole round and the guarded
// one, one after the other (two trips to memory where its neighbours take one). The guarded round
// still covers what a thread has left: its warp's span, kWarpSize * kAdj, is at most a step.
template <int kAdj, int kGroups, int kThreads, bool kWarpUniform, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_runs_adjacent(const In* row, const TwoGroupsRunsArgs& a,
                                                                       int64_t start, int64_t end, const R& r) {
  using V = typename R::Value;
  constexpr int64_t kStride = static_cast<int64_t>(kThreads) * kAdj;
  int64_t f = start + threadIdx.x * kAdj;  // this thread's next group's first element
  RunCursor<In> c(row, a, f);
  const auto step = [&] {
    f += kStride;
    c.step(a);
  };
  const auto at = [&](int k) { return c.at(a, k); };
  const auto reduce = [&r](V x, V y) { return r.reduce(x, y); };
  typename R::Acc acc = R::identity();
  static_assert(kThreads >= kWarpSize, "one guarded round covers what a warp's whole rounds leave");
  const int64_t whole_end =
      kWarpUniform ? end - (kWarpSize - 1 - static_cast<int>(threadIdx.x % kWarpSize)) * kAdj : end;
  for (; f + (kGroups - 1) * kStride + kAdj <= whole_end;) {  // whole rounds
    V v[kGroups * kAdj];
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
#pragma unroll
      for (int k = 0; k < kAdj; ++k) v[u * kAdj + k] = static_cast<V>(*at(k));
      step();
    }
    acc = r.add(acc, tree_fold(v, reduce));
  }
  if (f < end) {
    const V none = r.finish(R::identity());
    V v[kGroups * kAdj];
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
#pragma unroll
      for (int k = 0; k < kAdj; ++k) v[u * kAdj + k] = f + k < end ? static_cast<V>(*at(k)) : none;
      step();
    }
    acc = r.add(acc, tree_fold(v, reduce));
  }
  return acc;
}

// Thread tid's partial over elements tid, tid + kThreads, ... of [start, end): rounds of kLoads loads,
// every load of a round issued before its first fold (a load past `end` gives the identity), so one
// trip to memory a round where rounds of 8 took several. Without kRounds the segment holds at most
// kThreads x kLoads elements: one round. With it, whole rounds come first and the last, guarded one
// makes the 1-kLoads loads left. Its place in the runs is kept in 32 bits, an offset from `row` (the
// row's runs span less than 2^31 elements: launch_two_groups_runs checks), and its loads are counted
// once (`left`), so that a load costs a compare, two adds, a select and an address (RunCursor's 64-bit
// pointer and a 64-bit bound a load took 200 instructions for the 16 loads where these take 110, and
// these small kernels wait on issue; session95.txt section 3). Offsets past the span wrap harmlessly:
// only the loads counted are made. A round's 8-32 values fold to 8 by hand, then as 8
// (tree_fold left 16 rolled in local memory, session 93). kVec > 1: a load is a pack of kVec elements
// (a's places and steps in packs), folded to one value as it arrives (the short kernel's packs).
template <int kLoads, int kThreads, bool kRounds, int kVec = 1, typename In, typename R>
__device__ __forceinline__ typename R::Acc thread_reduce_runs_once(const In* row, const TwoGroupsRunsArgs& a,
                                                                   int64_t start, int64_t end, int tid, const R& r) {
  using V = typename R::Value;
  static_assert(kLoads >= 8 && kLoads <= 32 && kLoads % 4 == 0, "folds to 8 by hand, then tree_fold's 8");
  const int64_t f = start + tid;
  int left = f < end ? static_cast<int>((end - f + kThreads - 1) / kThreads) : 0;  // kLoads at most without kRounds
  const uint32_t run = static_cast<uint32_t>(a.run_packs), at = static_cast<uint32_t>(f);
  uint32_t j = at % run;                                        // its place in its run
  uint32_t off = (at / run) * static_cast<uint32_t>(a.q_stride) + j;  // and in memory, from row
  const uint32_t step_j = static_cast<uint32_t>(a.step_packs), step_off = static_cast<uint32_t>(a.step_ptr),
                 wrap = static_cast<uint32_t>(a.wrap_ptr);
  // Opaque to the compiler, so that a load's address is one multiply-add (base + off): else it folded
  // row's own sum into each load's, a 64-bit add and shift and a reload of x a load. Its loads by
  // __ldg (load_read_only): the opaque pointer lost the read-only path (LD, not LDG.CONSTANT).
  using P = std::conditional_t<kVec == 1, In, Pack<In, kVec>>;  // a load: an element, or a pack of kVec
  const P* base = reinterpret_cast<const P*>(row);
  asm("" : "+l"(base));
  const V none = r.finish(R::identity());
  const auto reduce = [&r](V x, V y) { return r.reduce(x, y); };
  const auto round = [&](int count) {  // kLoads loads, the first `count` made, folded
    V v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if constexpr (kVec == 1) {
        v[u] = u < count ? static_cast<V>(load_read_only(base + off)) : none;
      } else {
        v[u] = u < count ? pack_value(load_read_only(base + off), r) : none;
      }
      off += step_off;
      j += step_j;
      if (j >= run) {
        j -= run;
        off += wrap;
      }
    }
    // w[k] folds v[k], v[k + 8], v[k + 16] and v[k + 24], those there are: (k, k + 16) with (k + 8, k + 24).
    V w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      // Indices past the round are not taken; clamped to its last, they stay in bounds.
      const auto in_round = [](int i) { return i < kLoads ? i : kLoads - 1; };
      const V low = k + 16 < kLoads ? reduce(v[k], v[in_round(k + 16)]) : v[k];
      if (k + 8 < kLoads) {
        const V high = k + 24 < kLoads ? reduce(v[in_round(k + 8)], v[in_round(k + 24)]) : v[in_round(k + 8)];
        w[k] = reduce(low, high);
      } else {
        w[k] = low;
      }
    }
    return tree_fold(w, reduce);
  };
  typename R::Acc acc = R::identity();
  if constexpr (kRounds) {
    for (; left > kLoads; left -= kLoads) acc = r.add(acc, round(kLoads));
  }
  return r.add(acc, round(left));
}

// Runs of two reduced groups in one launch: a block of kRowsBlockThreads an item (TwoGroupsRunsArgs), its
// segment's partial folded by arrive_and_fold_row where rows split (counters and slots zero at the
// start, as reduce_rows_split_kernel's), else written out. Against the binding's two stages, each
// segment reads its output's runs as they lie, and no second launch waits on the first.
// kMinBlocks: the blocks an SM the registers must allow (launch_two_groups_runs says which);
// kAdjacent > 1: elements kAdjacent adjacent a thread (thread_reduce_runs_adjacent, kVec 1);
// kAdjacent 0: segments of at most kThreads x kUnroll elements in one round, -1: segments of any
// length in rounds of kUnroll, both a row's runs within 2^31 elements (thread_reduce_runs_once, kVec 1).
// kThreads: the block's threads, kRowsBlockThreads but for 16-bit rows' one round
// (kOnceWideBlockThreads, launch_two_groups_runs).
template <typename In, typename Out, typename R, int kVec, int kUnroll, int kMinBlocks, int kAdjacent,
          int kThreads = kRowsBlockThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    reduce_two_groups_runs_kernel(const In* __restrict__ x, Out* __restrict__ out, TwoGroupsRunsArgs a,
                                  Slot* __restrict__ slots, unsigned* __restrict__ counters, R r) {
  __shared__ bool last;
  const int64_t items = a.rows * a.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t row = a.splits == 1 ? w : w / a.splits, seg = w - row * a.splits;
    const int64_t o = a.inner == 1 ? row : row / a.inner;
    const In* base = x + (o * a.outer_stride + (row - o * a.inner) * a.inner_stride) * kVec;
    const int64_t start = seg * a.chunk, end = a.row_packs - start < a.chunk ? a.row_packs : start + a.chunk;
    typename R::Acc part;
    if constexpr (kAdjacent <= 0) {
      static_assert(kVec == 1 && kAdjacent >= -1, "rounds by elements");
      part = thread_reduce_runs_once<kUnroll, kThreads, (kAdjacent < 0)>(base, a, start, end, threadIdx.x, r);
    } else if constexpr (kAdjacent > 1) {
      static_assert(kThreads == kRowsBlockThreads, "the one round only on wider blocks");
      // Warp-uniform whole rounds on the 4-block kernel only: on the 8-block one they lost amaxes
      // 4% (launch_two_groups_runs).
      part = thread_reduce_runs_adjacent<kAdjacent, kUnroll / kAdjacent, kRowsBlockThreads, kMinBlocks == 4>(
          base, a, start, end, r);
    } else {
      part = thread_reduce_runs<kVec, kUnroll, kRowsBlockThreads>(base, a, start, end, r);
    }
    const typename R::Acc acc = block_all_reduce(part, r);
    if (a.splits > 1) {
      arrive_and_fold_row(acc, w, row, a.splits, slots, counters, out, last, r);
    } else {
      if (threadIdx.x == 0) out[row] = static_cast<Out>(r.finish(acc));
    }
  }
}

// Rows of runs shorter than one round of the runs kernel (TwoGroupsRunsArgs of elements, or of packs
// of kVec elements; rows whole), kItemThreads threads an output in one round of kShortLoads loads a
// thread (thread_reduce_runs_once), kRowsBlockThreads / kItemThreads adjacent outputs a block,
// bounded to 8 blocks an SM (32 registers; 4 blocks, 64 registers, for packs past 8 bytes), each
// output's warps folded by block_fold_once's groups (one barrier; none where an output is one warp).
// Outputs past a.rows (the last block's) load and write nothing.
constexpr int kShortLoads = 8;
template <typename In, typename Out, typename R, int kItemThreads, int kVec = 1>
__global__ void __launch_bounds__(kRowsBlockThreads, kVec * sizeof(In) > 8 ? 4 : 8)
    reduce_two_groups_short_kernel(const In* __restrict__ x, Out* __restrict__ out, TwoGroupsRunsArgs a, R r) {
  static_assert(kRowsBlockThreads % kItemThreads == 0 && kItemThreads % kWarpSize == 0, "whole warps an output");
  constexpr int kItems = kRowsBlockThreads / kItemThreads;
  const int t = threadIdx.x % kItemThreads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kItems + threadIdx.x / kItemThreads;
  typename R::Acc part = R::identity();
  if (row < a.rows) {
    const int64_t o = a.inner == 1 ? row : row / a.inner;
    const In* base = x + (o * a.outer_stride + (row - o * a.inner) * a.inner_stride) * kVec;
    part = thread_reduce_runs_once<kShortLoads, kItemThreads, false, kVec>(base, a, 0, a.row_packs, t, r);
  }
  part = block_fold_once<kRowsBlockThreads / kWarpSize, kItemThreads / kWarpSize>(part, r);
  if (t == 0 && row < a.rows) out[row] = static_cast<Out>(r.finish(part));
}

// ---- Columns -----------------------------------------------------------------------------

template <typename Out, typename R, int kVec>
__device__ __forceinline__ void store_columns(Out* dst, const typename R::Acc (&acc)[kVec], const R& r) {
  Pack<Out, kVec> o;
#pragma unroll
  for (int k = 0; k < kVec; ++k) o.v[k] = static_cast<Out>(r.finish(acc[k]));
  *reinterpret_cast<Pack<Out, kVec>*>(dst) = o;
}

// A column reduction whose reduced dim one block reads at once (reduce_cols_few_kernel), in the
// vectorized layout (inner contiguous, every pack 16-byte aligned).
struct ColsFewArgs {
  int64_t outer_stride, reduced_stride;  // in elements
  int reduced, inner_packs;
};

// Small column reductions, latency first: block (tile, o) reduces all `reduced` (<= kBy x
// kPacks) rows of the kBx column packs of tile `tile` of outer index o. Thread (cx, ry) loads rows
// ry, ry + kBy, ... (kPacks of them, all in flight at once) and folds them: each 4 rows pairwise,
// then the reducer's merge as a tree; the thread rows of a warp fold by butterfly, and where the
// block has several warps (kBx == 1: 128 or 256 rows of threads), thread 0 folds the warps' after
// one barrier. The order is fixed by the block shape. No split over blocks, no loop, no 64-bit
// division, and the block shape at compile time: the same kernel with blockDim-dependent
// strides, shuffles and folds ran about 3x the instructions (576 against 200 in the SASS for
// 4 x 65536 bfloat16), and a latency-bound kernel pays for each (1024 x 128 float32 sum in a CUDA
// graph, H100: 2.96 against 2.32 us). H100, CUDA graph, against reduce_cols_kernel's wave plan (a
// 5-level shared-memory tree of its 32 thread rows, a split over 8 blocks and their last-block
// fold): 1024 x 128 float32 sum over dim 0 5.03 -> 2.31 us (torch.compile 3.68), 64 x 4096
// 2.80 -> 1.87 (1.95) (h100_study/session43_small.txt).
template <typename In, typename Out, typename R, int kBx, int kBy, int kPacks>
__global__ void __launch_bounds__(kBx * kBy) reduce_cols_few_kernel(const In* __restrict__ x, Out* __restrict__ out,
                                                                  ColsFewArgs a, R r) {
  static_assert(kBx * kBy <= kWarpSize || kBx == 1, "several warps only as thread rows of one column");
  static_assert(kPacks % 4 == 0, "rows fold in fours");
  constexpr int kVec = kMaxVec<In>;
  using P = Pack<In, kVec>;
  using V = typename R::Value;
  using Acc = typename R::Acc;
  // A fold launch (fold_row_groups_kernel, where this kernel reduced row groups' wide columns) may
  // start as this grid's blocks leave their SMs; it waits for their results. Else a no-op. H200,
  // CUDA graphs, us, without -> with (h200_study/session115.txt, call 2): sums over dim 0 float32
  // 136 x 77 3.98 -> 3.21, 8192 x 77 5.55 -> 4.28, bfloat16 1024 x 1002 5.12 -> 4.22 (0.77-0.83x).
  allow_dependents();
  const int cx = threadIdx.x % kBx, ry = threadIdx.x / kBx;
  const int cp = blockIdx.x * kBx + cx;  // this thread's column pack
  // A lane past the columns reads the last one and stores nothing: no predicate in the fold.
  const int load_cp = cp < a.inner_packs ? cp : a.inner_packs - 1;
  const In* col = x + blockIdx.y * a.outer_stride + static_cast<int64_t>(load_cp) * kVec + ry * a.reduced_stride;
  const int64_t step = kBy * a.reduced_stride;
  P v[kPacks];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (ry + p * kBy < a.reduced) v[p] = *reinterpret_cast<const P*>(col + p * step);
  }
  Acc acc[kVec];
  if constexpr (kPackedMax<R, In, kVec>) {  // a tree of the rows' words, packed, then widened
    uint32_t m[kVec / 2];
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) {
      uint32_t t[kPacks];
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        uint32_t w[kVec / 2];
        memcpy(w, &v[p], sizeof(w));
        t[p] = ry + p * kBy < a.reduced ? w[k] : identity_word<In>(r);
      }
      m[k] = tree_fold(t, PackedMaxFold<In>{});
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = widen_element<In, V>(m, k);
  } else {
    const V none = r.finish(R::identity());  // 0 for sums, -inf for max: rows past the end
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      // Each 4 rows pairwise in the value type, then one step of the reducer, then a tree (the
      // launcher runs the tree's reducer, so a sum adds plain here; reduce_cols_kernel's
      // compensated sums pay their error-free addition so, once per 4 rows).
      Acc quads[kPacks / 4];
#pragma unroll
      for (int q = 0; q < kPacks / 4; ++q) {
        V e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) e[j] = ry + (4 * q + j) * kBy < a.reduced ? widen<V>(v[4 * q + j], k) : none;
        quads[q] = r.add(R::identity(), tree_fold(e, [&](V s, V t) { return r.reduce(s, t); }));
      }
      acc[k] = tree_fold(quads, r);
    }
  }
  // The thread rows within a warp: butterfly over the lane bits above the column bits.
#pragma unroll
  for (int mask = kBx; mask < kWarpSize && mask < kBx * kBy; mask *= 2) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = r(acc[k], shfl_xor(acc[k], mask, kWarpSize));
  }
  constexpr int kWarps = kBx * kBy / kWarpSize;
  if constexpr (kWarps > 1) {
    __shared__ Acc warp_results[kWarps][kVec];
    if (threadIdx.x % kWarpSize == 0) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) warp_results[threadIdx.x / kWarpSize][k] = acc[k];
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      Acc w[kWarps];
#pragma unroll
      for (int j = 0; j < kWarps; ++j) w[j] = warp_results[j][k];
      acc[k] = tree_fold(w, r);
    }
  }
  if (ry == 0 && cp < a.inner_packs) {
    store_columns<Out>(out + (blockIdx.y * static_cast<int64_t>(a.inner_packs) + cp) * kVec, acc, r);
  }
}

// A column thread's running state: acc, one value per column, or for a 16-bit max the packs'
// 32-bit words (kPackedMax), widened into acc after the rows (reduce_cols_kernel and
// reduce_cols_packed_small_kernel).
template <typename R, typename In, int kVec>
constexpr int kColumnWords = kPackedMax<R, In, kVec> ? kVec / 2 : 1;

// A column thread's state before its rows: acc at the reducer's identity and, for a 16-bit max,
// the words at the identity word.
template <typename In, int kVec, typename R, int kWords>
__device__ __forceinline__ void start_columns(typename R::Acc (&acc)[kVec], uint32_t (&m)[kWords], const R& r) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = R::identity();
#pragma unroll
  for (int k = 0; k < kWords; ++k) m[k] = identity_word<In>(r);
}

// A column thread's state after its rows: a 16-bit max's words widened into acc; acc as it is
// otherwise.
template <typename In, int kVec, typename R, int kWords>
__device__ __forceinline__ void finish_columns(typename R::Acc (&acc)[kVec], const uint32_t (&m)[kWords]) {
  if constexpr (kPackedMax<R, In, kVec>) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = widen_element<In, typename R::Value>(m, k);
  }
}

// Four rows of a thread's kVec columns into its state: each column's 4 values pairwise, then one
// step of the reducer. A compensated sum pays its error-free addition once per 4 rows (as the row
// kernels once per pack), which took bfloat16's column sums off the ALU bound.
template <typename R, typename In, int kVec, int kWords>
__device__ __forceinline__ void add_four_rows(typename R::Acc (&acc)[kVec], uint32_t (&m)[kWords],
                                              const Pack<In, kVec>* v, const R& r) {
  using V = typename R::Value;
  if constexpr (kPackedMax<R, In, kVec>) {
    uint32_t w[4][kWords];
#pragma unroll
    for (int j = 0; j < 4; ++j) memcpy(w[j], &v[j], sizeof(w[j]));
    const PackedMaxFold<In> mx;
#pragma unroll
    for (int k = 0; k < kWords; ++k) m[k] = mx(m[k], mx(mx(w[0][k], w[1][k]), mx(w[2][k], w[3][k])));
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const V s01 = r.reduce(widen<V>(v[0], k), widen<V>(v[1], k));
      const V s23 = r.reduce(widen<V>(v[2], k), widen<V>(v[3], k));
      acc[k] = r.add(acc[k], r.reduce(s01, s23));
    }
  }
}

// One row of a thread's kVec columns into its state (a round's last rows).
template <typename R, typename In, int kVec, int kWords>
__device__ __forceinline__ void add_one_row(typename R::Acc (&acc)[kVec], uint32_t (&m)[kWords],
                                            const Pack<In, kVec>& v, const R& r) {
  using V = typename R::Value;
  if constexpr (kPackedMax<R, In, kVec>) {
    uint32_t w[kWords];
    memcpy(w, &v, sizeof(w));
#pragma unroll
    for (int k = 0; k < kWords; ++k) m[k] = packed_extreme<In, true>(m[k], w[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = r.add(acc[k], widen<V>(v, k));
  }
}

// Packed row groups (reduce_cols_kernel<..., kPackedRound > 0>): the kernel reduced the
// (reduced / groups, groups * cols) view of dense rows of `cols` columns in one column tile, so
// that wide column w holds column w % cols of rows w / cols, w / cols + groups, ... After the rows
// of threads fold, thread row 0's values go through shared memory and each column folds its
// `groups` values in order, from group 0, into out, or with splits > 1 into the block's row of
// partials: `cols` values padded with the identity to whole 16-byte words (a.outer of them in a
// row, [outer][padded]), which a second launch folds (fold_partial_words_kernel). `smem` holds
// the block's threads * kVec values.
template <typename Out, typename R, int kVec>
__device__ __forceinline__ void fold_packed(typename R::Acc (&acc)[kVec], const ColsArgs& a,
                                            const ColsScratch<typename R::Acc>& scratch, int64_t seg, int64_t o,
                                            int64_t i, bool in_range, typename R::Acc* smem, Out* out, const R& r) {
  using Acc = typename R::Acc;
  fold_thread_rows(acc, smem, r);
  if (threadIdx.y == 0 && in_range) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) smem[i + k] = acc[k];
  }
  __syncthreads();
  const int cols = static_cast<int>(a.group_cols);
  const int groups = static_cast<int>(a.inner / a.group_cols);
  const int t = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  constexpr int kW = kPartialsPerWord<Acc>;
  const int padded = (cols + kW - 1) / kW * kW;
  const int64_t width = a.outer * padded;  // a row of partials
  for (int c = t; c < padded; c += threads) {
    Acc s = R::identity();
    if (c < cols) {
      s = smem[c];
      for (int j = 1; j < groups; ++j) s = r(s, smem[j * cols + c]);
    }
    if (a.splits == 1) {
      if (c < cols) out[o * cols + c] = static_cast<Out>(r.finish(s));
    } else {
      scratch.partial[seg * width + o * padded + c] = s;
    }
  }
  __syncthreads();  // smem is rewritten by the next item's folds
}

// Block: blockDim.x threads across columns (kVec each), blockDim.y across the reduced dim.
// kPackedRound > 0: the view is packed row groups (fold_packed; one column tile), each
// thread loading kPackedRound rows of packs at once.
template <typename In, typename Out, typename R, int kVec, int kPackedRound = 0>
__global__ void reduce_cols_kernel(const In* __restrict__ x, Out* __restrict__ out, ColsArgs a,
                                   ColsScratch<typename R::Acc> scratch, R r) {
  using Acc = typename R::Acc;
  using V = typename R::Value;
  // 4 rows of 16-byte loads in flight per thread; 8 held more registers and lost blocks
  // (H200: 65536 x 1024 float32 over dim 0 fell from 73% to 63% of copy). At the streaming plan's
  // 4 blocks an SM, 8 rows (bounded to 64 registers, all 8 loads issued together) were even: H200,
  // 36 cases over dim 0, 0.99-1.03x, geomean 1.00x (h200_study/session46_cols.txt). Columns that
  // are not whole 16-byte packs (kVec == 1: an odd number of columns, say) load one element a row,
  // so they take 16 rows a round: of a 4-byte type, the bytes of 4 rows of packs.
  // They had loaded one row at a time: H200, bfloat16 sum of 2048 x 50257 over dim 0 199 us
  // (torch.compile 68; h200_study/session49_models.txt).
  constexpr int kUnroll = kPackedRound > 0 ? kPackedRound : kVec > 1 ? kColsRound : 4 * kColsRound;
  static_assert(kUnroll % 4 == 0, "the pairwise fold below takes 4 rows at a time");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);  // [blockDim.y][blockDim.x][kVec]
  __shared__ bool last;
  // A fold launch (fold_partial_words_kernel: the packed kernel's, a.fold_launch's) may start as
  // this grid's blocks leave their SMs; it waits for their partials. Without one this is a no-op.
  allow_dependents();
  const int64_t tile_cols = static_cast<int64_t>(blockDim.x) * kVec;
  const int64_t tiles = a.tiles;
  const int64_t items = a.splits * a.outer * tiles;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    // w = (seg * outer + o) * tiles + tile, with no 64-bit division where a factor is 1 (each
    // costs ~25 dependent instructions before the loads can go out; in a CUDA graph, H200,
    // 4 x 65536 float32 over dim 0: 3.43 -> 2.73 us without the three it had).
    int64_t seg = w, o = 0, tile = 0;
    if (a.splits == 1 && a.outer == 1) {
      seg = 0;
      tile = w;
    } else {
      if (tiles > 1) {
        seg = w / tiles;
        tile = w - seg * tiles;
      }
      if (a.outer > 1) {
        const int64_t q = seg / a.outer;
        o = seg - q * a.outer;
        seg = q;
      }
    }
    const int64_t i = tile * tile_cols + threadIdx.x * kVec;
    const bool in_range = i < a.inner;
    const int64_t r0 = seg * a.chunk, r1 = (a.reduced - r0 < a.chunk) ? a.reduced : r0 + a.chunk;
    // A 16-bit max runs on the packs' words (kPackedMax), widened into acc after the rows.
    Acc acc[kVec];
    uint32_t m[kColumnWords<R, In, kVec>];
    start_columns<In, kVec>(acc, m, r);
    if (in_range) {
      using P = Pack<In, kVec>;
      const In* base = x + o * a.outer_stride + i * a.inner_stride;
      int64_t row = r0 + threadIdx.y;
      const int64_t step = blockDim.y;
      // float32's compensated sum steps a pointer by the launcher's row_gap: with the row index
      // times the stride, ptxas 13.0 (sm_90) reloads blockDim.y in the loop and issues 3 of a
      // round's 4 loads before its first add, the 4th after, a second memory round trip a round.
      // H100, tune_cols.py, us (h100_study/session45_cols.txt): 1024 x 262144 over dim 0 365.4 ->
      // 350.7 (torch.compile 349.9; the plain sum 350.4), 442368 x 128 85.9 -> 84.4 (84.0),
      // 16384 x 4096 94.5 -> 95.9 (97.2); H200, 1024 x 262144 262.1 -> 243.9, 442368 x 128 61.9 ->
      // 60.6, 16384 x 4096 68.1 -> 68.8. Every other kernel keeps the index form: it issues its
      // loads together already, and the pointer took registers off some (bfloat16 max 48 -> 40),
      // which changed their plans' resident blocks (bfloat16 columns 1-3% slower, session 26).
      constexpr bool kStepPointer = std::is_same_v<In, float> && !std::is_same_v<Acc, V> && kVec > 1;
      const In* src = base + row * a.reduced_stride;
      for (; row + (kUnroll - 1) * step < r1; row += kUnroll * step) {
        P v[kUnroll];
        if constexpr (kStepPointer) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) v[u] = *reinterpret_cast<const P*>(src + u * a.row_gap);
          src += kUnroll * a.row_gap;
        } else {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            v[u] = *reinterpret_cast<const P*>(base + (row + u * step) * a.reduced_stride);
          // 16-bit elements: a CTA fence after the round's loads (no memory op follows in the
          // round). Without it ptxas 13.0 (sm_90) put the first adds of a plain sum after 7 of the
          // 16 loads and the rest between them, so that each thread waited on its first loads
          // with half the round still to issue; with it all 16 go out first, as the compensated
          // sum's schedule had them. H200, us, HEAD -> fence, same inputs (h200_study/session112.txt,
          // call 5): bfloat16 sums over dim 0 8133 x 6150 57.1 -> 39.7, 4065 x 6150 31.6 -> 23.0,
          // 1385 x 6150 14.7 -> 12.4, 24575 x 1001 26.5 -> 21.8; amaxes (13 loads, then an add,
          // then 3) 0-12% (8133 x 6150 45.0 -> 39.7, 7141 x 7002 42.9 -> 43.2); compensated sums
          // even. float32 keeps its schedule: its amaxes moved both ways (735 x 5701 10.8 ->
          // 10.4, 3573 x 7001 32.0 -> 33.7), its sums even.
          if constexpr (kVec == 1 && sizeof(In) == 2) asm volatile("fence.acq_rel.cta;" ::: "memory");
        }
#pragma unroll
        for (int q = 0; q < kUnroll; q += 4) add_four_rows(acc, m, v + q, r);
      }
      // The last segment's partial round: up to kUnroll - 1 rows, loaded together (one at a
      // time they waited on each other). Rows past r1 load `row` again and are not added:
      // predicated loads held 8-12 more registers (float32 max 48 -> 60) and cost blocks.
      if (row < r1) {
        P v[kUnroll - 1];
#pragma unroll
        for (int u = 0; u < kUnroll - 1; ++u) {
          const int64_t rr = row + u * step < r1 ? row + u * step : row;
          v[u] = *reinterpret_cast<const P*>(base + rr * a.reduced_stride);
        }
#pragma unroll
        for (int u = 0; u < kUnroll - 1; ++u) {
          if (row + u * step < r1) add_one_row(acc, m, v[u], r);
        }
      }
    }
    finish_columns<In, kVec, R>(acc, m);
    if constexpr (kPackedRound > 0) {
      fold_packed<Out>(acc, a, scratch, seg, o, i, in_range, smem, out, r);
      continue;
    }
    const int64_t col = o * a.inner + i;  // this thread's first column in out and the partials
    if (!fold_segments(acc, a, scratch, seg, o * tiles + tile, col, in_range, smem, &last, r)) continue;
    if (threadIdx.y == 0 && in_range) {
      if constexpr (kVec > 1) {
        store_columns<Out>(out + col, acc, r);
      } else {
        out[col] = static_cast<Out>(r.finish(acc[0]));
      }
    }
  }
}

// Packed row groups under kPackedSmallMaxBytes (reduce.cu's launch_cols_packed, its short rounds):
// reduce_cols_kernel<..., kPackedRound>'s view and block, without its prologue and fold tree.
// The input is under 2^31 elements, so indices are 32-bit; a block takes one work item (segment
// blockIdx.x of outer index blockIdx.y), so there is no item loop; its rows of threads load rounds
// of kColsRound rows of packs. Then one barrier: each thread's kVec values go to shared memory
// ([rows of threads][groups * cols]), and 2^lanes_log2 lanes a column fold its by * groups values,
// lane q the values q, q + lanes, ... in order (value v: row of threads v >> groups_log2, group
// v & (groups - 1)), then a butterfly over the lanes: the same order on every run. Lane 0 writes
// the segment's partial of the column into its row of partials (padded to whole 16-byte words
// with the identity, as fold_packed's), which fold_partial_words_kernel folds: there are always
// several segments (launch_cols_packed_small leaves a launch of one to the kPackedRound kernel).
// F folds the block's values: TreeReducer<R>'s. A compensated sum's threads add their rows
// compensated and finish them (one rounding each), then the block folds those floats plain (a
// lane's values in order, then the butterfly) into float partials, which the second launch adds
// compensated: the block's fold had been half of a block's time in dependent compensated steps
// (Nsight Compute, session 120), and float partials are half the bytes. Others: F is R.
struct PackedSmallArgs {
  int rows;          // rows of the (reduced / groups, groups * cols) view
  int chunk;         // its rows a segment
  int outer_stride;  // elements between outer slabs
  int cols;          // columns of a dense row
  int padded;        // cols rounded up to whole 16-byte words of partials
  int groups_log2;   // log2 of the dense rows a row of the view holds
  int lanes_log2;    // log2 of the lanes that fold a column (at most 5)
};

template <typename In, typename R, int kVec, typename F = typename TreeReducer<R>::type>
__global__ void reduce_cols_packed_small_kernel(const In* __restrict__ x, typename F::Acc* __restrict__ partial,
                                                PackedSmallArgs a, R r) {
  using Acc = typename R::Acc;
  using FAcc = typename F::Acc;
  using P = Pack<In, kVec>;
  const F f{};
  extern __shared__ __align__(16) unsigned char smem_raw[];
  FAcc* smem = reinterpret_cast<FAcc*>(smem_raw);  // [blockDim.y][blockDim.x * kVec]
  allow_dependents();                            // fold_partial_words_kernel waits for the partials
  const int seg = blockIdx.x, o = blockIdx.y, by = blockDim.y;
  const int t = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * by;
  const int wide = blockDim.x * kVec;  // elements of a row of the view
  const int r1 = min(a.rows, (seg + 1) * a.chunk);
  int row = seg * a.chunk + threadIdx.y;
  const In* src = x + (o * a.outer_stride + row * wide + threadIdx.x * kVec);
  const int step = by * wide;
  Acc acc[kVec];
  uint32_t m[kColumnWords<R, In, kVec>];
  start_columns<In, kVec>(acc, m, r);
  for (; row + 3 * by < r1; row += 4 * by, src += 4 * step) {
    P v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = *reinterpret_cast<const P*>(src + u * step);
    add_four_rows(acc, m, v, r);
  }
  if (row < r1) {  // up to 3 rows, loaded together; rows past r1 load `row` again, not added
    P v[3];
#pragma unroll
    for (int u = 0; u < 3; ++u) v[u] = *reinterpret_cast<const P*>(src + (row + u * by < r1 ? u * step : 0));
#pragma unroll
    for (int u = 0; u < 3; ++u) {
      if (row + u * by < r1) add_one_row(acc, m, v[u], r);
    }
  }
  finish_columns<In, kVec, R>(acc, m);
  // A compensated sum's one rounding; a plain reducer's finish is its state as it is.
#pragma unroll
  for (int k = 0; k < kVec; ++k) smem[t * kVec + k] = r.finish(acc[k]);
  __syncthreads();
  // Whole groups of lanes only (a group lies in one warp: lanes divides 32); a group takes
  // columns c, c + (its count), ... up to the padded width.
  const int lanes = 1 << a.lanes_log2, lane_groups = threads >> a.lanes_log2, c0 = t >> a.lanes_log2;
  if (c0 >= lane_groups) return;
  const int q = t & (lanes - 1), values = by << a.groups_log2, group_mask = (1 << a.groups_log2) - 1;
  const unsigned members = lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1) << ((t & (kWarpSize - 1)) & ~(lanes - 1));
  for (int c = c0; c < a.padded; c += lane_groups) {
    FAcc s = F::identity();
    if (c < a.cols) {
      for (int v = q; v < values; v += lanes) s = f(s, smem[(v >> a.groups_log2) * wide + (v & group_mask) * a.cols + c]);
    }
    for (int mask = lanes / 2; mask > 0; mask /= 2) s = f(s, shfl_xor(s, mask, lanes, members));
    if (q == 0) partial[(seg * gridDim.y + o) * a.padded + c] = s;
  }
}

// The second launch of a split column reduction (reduce.cu's launch_fold_partial_words), a
// programmatic dependent of the first: `partial` holds `splits` rows of `width` values (R::Acc),
// outer index o's `cols` columns at o * padded, padded with the identity to whole 16-byte words
// (padded / kPartialsPerWord of them). Item = o * words + word folds one word's kPartialsPerWord
// columns with kItemThreads threads, a warp or the whole block: thread t the rows t, t +
// kItemThreads, ... in order (kBatch words in flight), then the warp by butterfly and, in a block,
// the warps' results in order: the same tree on every run. Each item reads its word's rows only.
// Partials of Value (PartialT, a compensated sum's finished floats:
// reduce_cols_packed_small_kernel's) add a thread's batch of kBatch rows pairwise, then one
// compensated step, and the warp's butterfly adds the threads' finished values plain (TreeReducer):
// a tree of 5 levels. The packed kernel's partials (reduce_cols_kernel<..., kPackedRound>): H200,
// against the last block of the first launch folding every row with all its threads (one block
// reading 40-400 KB of partials at ~20-100 GB/s; h200_study/session54_columns.txt, section 6), time
// of the call's kernels, us (h200_study/session55_columns.txt, section 2): bfloat16 sums 16384 x
// 197 8.37 -> 6.61, 32768 x 197 10.13 -> 8.45, 65536 x 77 7.94 -> 7.84; float32 32768 x 197 12.80
// -> 11.10; back to back in a CUDA graph 0.5-2.2 us a call less in all 10 cases measured.
template <typename Out, typename R, int kItemThreads, int kThreads, typename PartialT = typename R::Acc>
__global__ void __launch_bounds__(kThreads) fold_partial_words_kernel(const PartialT* __restrict__ partial,
                                                                      Out* __restrict__ out, int64_t splits,
                                                                      int64_t width, int cols, int padded,
                                                                      int64_t items, R r) {
  static_assert(kItemThreads % kWarpSize == 0 && kThreads % kItemThreads == 0, "whole warps an item");
  static_assert(kItemThreads == kWarpSize || kItemThreads == kThreads,
                "a warp an item (no shared memory), or the block (its barriers and warp_results)");
  using Acc = typename R::Acc;
  using F = typename TreeReducer<R>::type;
  constexpr bool kFinished = !std::is_same_v<PartialT, Acc>;  // finished values, added as above
  static_assert(!kFinished || std::is_same_v<PartialT, typename F::Acc>, "a compensated sum's floats");
  constexpr int kW = kPartialsPerWord<PartialT>, kBatch = 4, kWarps = kItemThreads / kWarpSize;
  constexpr int kSlots = kThreads / kItemThreads;  // items a block folds at once
  __shared__ Acc warp_results[kWarps][kW];
  wait_for_prerequisite();
  // A row groups' fold (fold_row_groups_kernel) may start as this grid's blocks leave; it waits
  // for these results. Without one this is a no-op.
  allow_dependents();
  const int words = padded / kW, t = threadIdx.x % kItemThreads, lane = threadIdx.x % kWarpSize;
  // Whole items step together: a block's threads all reach its barriers, a warp's lanes its shuffles.
  for (int64_t item = blockIdx.x * static_cast<int64_t>(kSlots) + threadIdx.x / kItemThreads; item < items;
       item += static_cast<int64_t>(gridDim.x) * kSlots) {
    const int64_t o = item / words;
    const int word = static_cast<int>(item - o * words);
    const PartialT* col = partial + o * padded + word * kW;
    Acc acc[kW];
#pragma unroll
    for (int k = 0; k < kW; ++k) acc[k] = R::identity();
    for (int64_t j = t; j < splits; j += kBatch * kItemThreads) {
      PartialT v[kBatch][kW];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (j + b * kItemThreads < splits) {
          PartialRun<PartialT, kW>::load(col + (j + b * kItemThreads) * width, v[b]);
        } else if constexpr (kFinished) {
#pragma unroll
          for (int k = 0; k < kW; ++k) v[b][k] = F::identity();
        }
      }
      if constexpr (kFinished) {
        static_assert(kBatch == 4, "the pairwise batch below");
        const F f{};
#pragma unroll
        for (int k = 0; k < kW; ++k) acc[k] = r.add(acc[k], f(f(v[0][k], v[1][k]), f(v[2][k], v[3][k])));
      } else {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (j + b * kItemThreads < splits) {
#pragma unroll
            for (int k = 0; k < kW; ++k) acc[k] = r(acc[k], v[b][k]);
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      if constexpr (kFinished) {
        acc[k] = as_running<R, F>(warp_all_reduce<kWarpSize>(r.finish(acc[k]), F{}), r);
      } else {
        acc[k] = warp_all_reduce<kWarpSize>(acc[k], r);
      }
    }
    if constexpr (kWarps == 1) {
      if (lane == 0) {
#pragma unroll
        for (int k = 0; k < kW; ++k) {
          if (word * kW + k < cols) out[o * cols + word * kW + k] = static_cast<Out>(r.finish(acc[k]));
        }
      }
    } else {
      const int warp = t / kWarpSize;
      if (lane == 0) {
#pragma unroll
        for (int k = 0; k < kW; ++k) warp_results[warp][k] = acc[k];
      }
      __syncthreads();
      if (t < kW) {
        const int k = t, c = word * kW + k;
        Acc s = warp_results[0][k];
        for (int w = 1; w < kWarps; ++w) s = r(s, warp_results[w][k]);
        if (c < cols) out[o * cols + c] = static_cast<Out>(r.finish(s));
      }
      __syncthreads();  // warp_results is rewritten by the next item
    }
  }
}

// The second launch of a column reduction over rows that are not whole 16-byte packs (reduce.cu's
// launch_cols_row_groups): `partial` holds, for each outer index, `groups` rows of `inner`
// results, one for each residue of the reduced index modulo `groups` (finished values of R);
// out[o * inner + c] folds partial[o][0..groups)[c] in that order with R. One thread a column.
// A programmatic dependent of the first launch's last kernel: it waits for `partial` first.
template <typename Out, typename R>
__global__ void fold_row_groups_kernel(const typename R::Value* __restrict__ partial, Out* __restrict__ out,
                                       int64_t columns, int64_t inner, int groups, R r) {
  wait_for_prerequisite();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < columns; i += step) {
    // partial[o][j][c] with o = i / inner, c = i - o * inner: o * (groups - 1) * inner + i + j * inner.
    const typename R::Value* p = partial + (i / inner) * (groups - 1) * inner + i;
    typename R::Acc acc = R::identity();
    for (int j = 0; j < groups; ++j) acc = r.add(acc, p[j * inner]);
    out[i] = static_cast<Out>(r.finish(acc));
  }
}

}  // namespace cuda
}  // namespace reduce_ops
