// Row-normalizing algorithms: softmax and ReduceScale, each a Policy over the same strategies.
//
// Both ops take a row max first (of x for softmax, of |x| for ReduceScale), turn it into a row
// statistic, optionally sum a transform of the row (softmax: exp(x - max)), then write
// finish(transform(x)). Strategies by row length, as OneFlow's softmax; passes over memory:
//
//   row_norm_warp_kernel      kWidth (<= 32) lanes per row, the row in registers
//                             (kPacks packs of kVec per lane): one read, one write.
//                             row_norm_rows_kernel: the same, kRows rows a lane group at once
//                             (16-bit rows of 8-byte packs, rows of 2, float32 element rows of
//                             33-256). row_norm_warp_capped_kernel: the same, its registers
//                             capped at 64.
//   row_norm_regs_kernel      kCluster = false ("block"): a block per row, kPacks 16-byte packs
//                             per thread in registers: one read, one write.
//                             kCluster = true ("cluster", sm_90+): C blocks of a thread block
//                             cluster share a row, each holding its segment in registers; the
//                             partial max / sum meet through distributed shared memory:
//                             one read, one write. kStaged: half of each block's share
//                             waits in its shared memory instead, so a block holds twice as much.
//   row_norm_cluster_row_kernel
//                             ("cluster_row", sm_90+) a cluster per row for every row at once,
//                             the row in registers, the partials exchanged through the blocks'
//                             shared memory on an mbarrier (no barrier): one read, one write.
//   row_norm_smem_kernel      ("smem") a block per row, the row kept in shared memory: one read,
//                             one write; for rows the register kernels cannot take (no clusters
//                             on the device). row_norm_smem_peeled_kernel: the same for unaligned
//                             rows, each row's aligned middle moved by packs (one bulk copy in on
//                             sm_90+), its head and tail an element at a time.
//   row_norm_partial_kernel + row_norm_apply_kernel
//                             ("split") several blocks per row write partial statistics, then
//                             each block combines its row's partials and writes its segment:
//                             two reads, one write; any row length, whole GPU busy on one row.
//
// The warp, block (kCluster = false) and cluster_row kernels also take unaligned rows "peeled"
// (kPeeled): each row's 16-byte-aligned middle by packs, its head and tail an element a thread
// (RowPacks, RowEdges).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/column_fold.cuh"
#include "cuda/launch.h"
#include "cuda/primitives.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {

// In-place ReduceScale passes y == x to these kernels. Their pointers are still __restrict__:
// every element is read once, by the thread that later writes it, before that write, and never
// read again, so no load can observe (or be reordered past) a store to the same address.

// A policy names the row's reduction key, its statistic, the transform summed (softmax only)
// and, through finisher(stat, sum), the per-row functor that turns transform(x) into the output.
template <typename Acc>
struct SoftmaxPolicy {
  static constexpr bool kNeedsSum = true;
  struct Finish {
    Acc inv_sum;
    __device__ Acc operator()(Acc e) const { return e * inv_sum; }
    // For e = exp(x - m) taken against a max m below the row's: r = exp(m - row max) (0 where
    // m = -inf), one multiply per value instead of two.
    __device__ Finish rescaled(Acc r) const { return {inv_sum * r}; }
  };
  static constexpr bool kAbsKey = false;
  __device__ static Acc key(Acc x) { return x; }
  __device__ Acc stat(Acc max) const { return max; }
  // kNormal: the caller knows x - max > -87 (exp_is_normal), so exp needs no subnormal care.
  template <bool kNormal = false>
  __device__ static Acc transform(Acc x, Acc max) {
    const Acc c = exp_offset(max);  // loop-invariant in the callers' element loops: hoisted
    return offset_exp_for<kNormal>(x, c);
  }
  // Whether exp(x - max) is a normal float for every x in [lo, max] (false for NaN, and for
  // lo = -inf, whose exp is 0 either way).
  __device__ static bool exp_is_normal(Acc lo, Acc max) { return max - lo < Acc(87); }
  __device__ static Finish finisher(Acc, Acc sum) { return {Acc(1) / sum}; }
  __device__ void write_stat(int64_t, Acc) const {}
  template <int kN>
  __device__ void write_stats(int64_t, const Acc (&)[kN]) const {}
};

template <typename Acc>
struct ReduceScalePolicy {
  static constexpr bool kNeedsSum = false;
  Acc eps;
  Acc* scale;  // one per row
  bool scale_evict_last;  // scale stored by store_evict_last (else plainly)
  static constexpr bool kAbsKey = true;
  __device__ static Acc key(Acc x) { return fabs(x); }  // |-0| = +0, as torch's x.abs()
  __device__ Acc stat(Acc absmax) const { return clamp_min_keep_nan(absmax, eps); }
  template <bool kNormal = false>
  __device__ static Acc transform(Acc x, Acc) { return x; }
  __device__ static bool exp_is_normal(Acc, Acc) { return false; }  // no exp taken
  // x / scale (0 for a zero row) with no division per element: a division is a ~10-instruction
  // subroutine that made ReduceScale compute-bound where softmax is not.
  __device__ static ScaleDivider<Acc> finisher(Acc s, Acc) { return ScaleDivider<Acc>(s); }
  __device__ void write_stat(int64_t row, Acc s) const {
    if (scale_evict_last) store_evict_last(scale + row, s);
    else scale[row] = s;
  }
  // The stats of kN consecutive rows from `row`: one 8- or 16-byte store where scale + row lies on
  // its boundary (row_norm_packed_rows_kernel: a thread's 2-4 rows, which a lane a row apart would
  // store as kN scattered 4-byte stores a warp), else write_stat each.
  template <int kN>
  __device__ void write_stats(int64_t row, const Acc (&s)[kN]) const {
    using Stats = Pack<Acc, kN>;
    if constexpr (sizeof(Stats) == 8 || sizeof(Stats) == 16) {
      if (reinterpret_cast<uintptr_t>(scale + row) % sizeof(Stats) == 0) {
        Stats pk;
#pragma unroll
        for (int k = 0; k < kN; ++k) pk.v[k] = s[k];
        Stats* p = reinterpret_cast<Stats*>(scale + row);
        if (scale_evict_last) store_evict_last(p, pk);
        else *p = pk;
        return;
      }
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) write_stat(row + k, s[k]);
  }
};

template <typename T, int kVec>
__device__ __forceinline__ void load_pack(const T* p, T (&v)[kVec]) {
  const Pack<T, kVec> pk = *reinterpret_cast<const Pack<T, kVec>*>(p);
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = pk.v[k];
}

// A 16-byte pack is stored by one st.global.v4: as a plain store, a pack computed in two
// branches (the split kernels' exp modes) was split into 2- and 4-byte stores.
template <typename Out, typename Acc, int kVec>
__device__ __forceinline__ void store_pack(Out* p, const Acc (&v)[kVec]) {
  Pack<Out, kVec> pk;
#pragma unroll
  for (int k = 0; k < kVec; ++k) pk.v[k] = static_cast<Out>(v[k]);
  if constexpr (sizeof(pk) == sizeof(uint4)) {
    uint4 w;
    memcpy(&w, &pk, sizeof(w));
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
  } else {
    *reinterpret_cast<Pack<Out, kVec>*>(p) = pk;
  }
}

// One pack of kVec In values (8 or 16 bytes) as 32-bit words.
template <typename In, int kVec>
struct PackWords {
  static_assert(kVec * sizeof(In) % 4 == 0, "whole 32-bit words");
  static constexpr int kWords = kVec * sizeof(In) / 4;
  uint32_t w[kWords];
  __device__ __forceinline__ void load(const In* p) {
    const Pack<uint32_t, kWords> pk = *reinterpret_cast<const Pack<uint32_t, kWords>*>(p);
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = pk.v[i];
  }
  // As load, the line marked evict_last (load_evict_last; 16-byte packs).
  __device__ __forceinline__ void load_evict_last(const In* p) {
    static_assert(kWords == 4, "16-byte packs");
    const uint4 u = reduce_ops::cuda::load_evict_last(reinterpret_cast<const uint4*>(p));
    memcpy(w, &u, sizeof(u));
  }
  // load_evict_last where kEvictLast, else load.
  template <bool kEvictLast>
  __device__ __forceinline__ void load_marked(const In* p) {
    if constexpr (kEvictLast) load_evict_last(p);
    else load(p);
  }
  template <typename Acc>
  __device__ __forceinline__ Acc get(int k) const { return widen_element<In, Acc, kWords>(w, k); }
};

// A thread's running max of Policy::key(x) over its values of a row and, for softmax, their
// min (with_exp_mode). 16-bit packs fold as they are, two values per 32-bit word and instruction
// (max.NaN / min on bf16x2 or f16x2: exact, NaN-propagating as MaxOp for the max; the min skips
// NaN, as fmin), where the float fold costs a conversion, a max and a min per value.
// (primitives.cuh's packed_extreme; older targets than sm_80 fold floats.)
template <typename In, typename Acc, typename Policy>
struct MaxFold {
  static constexpr bool kPacked = kPackedMinMax && std::is_same_v<Acc, float> &&
                                  (std::is_same_v<In, c10::BFloat16> || std::is_same_v<In, c10::Half>);
  static constexpr bool kBf16 = std::is_same_v<In, c10::BFloat16>;
  // Both halves -inf (max's identity) and +inf (min's).
  static constexpr uint32_t kNegInf = kBf16 ? 0xff80ff80u : 0xfc00fc00u;
  static constexpr uint32_t kPosInf = kBf16 ? 0x7f807f80u : 0x7c007c00u;
  Acc m = MaxOp<Acc>::identity();
  Acc lo = std::numeric_limits<Acc>::infinity();
  uint32_t pm = kNegInf, plo = kPosInf;

  __device__ __forceinline__ void add(Acc v) {
    m = MaxOp<Acc>()(m, Policy::key(v));
    if constexpr (Policy::kNeedsSum) lo = fmin(lo, v);
  }
  template <int kVec>
  __device__ __forceinline__ void add(const In (&raw)[kVec]) {
    if constexpr (kPacked && kVec % 2 == 0) {
      PackWords<In, kVec> p;
      memcpy(p.w, raw, sizeof(p.w));
      add(p);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(static_cast<Acc>(raw[k]));
    }
  }
  template <int kVec>
  __device__ __forceinline__ void add(const PackWords<In, kVec>& p) {
    if constexpr (kPacked) {
#pragma unroll
      for (int i = 0; i < PackWords<In, kVec>::kWords; ++i) {
        const uint32_t key = Policy::kAbsKey ? p.w[i] & 0x7fff7fffu : p.w[i];  // |x|: sign bits off
        pm = packed_extreme<In, true>(pm, key);
        if constexpr (Policy::kNeedsSum) plo = packed_extreme<In, false>(plo, p.w[i]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(p.template get<Acc>(k));
    }
  }
  // The thread's max of key(x) and min of x (+inf where not needed or no values).
  __device__ __forceinline__ Acc max() const {
    if constexpr (kPacked) {
      const uint32_t w[1] = {pm};
      return MaxOp<Acc>()(m, MaxOp<Acc>()(widen_element<In, Acc, 1>(w, 0), widen_element<In, Acc, 1>(w, 1)));
    } else {
      return m;
    }
  }
  __device__ __forceinline__ Acc min() const {
    if constexpr (kPacked && Policy::kNeedsSum) {
      const uint32_t w[1] = {plo};
      return fmin(lo, fmin(widen_element<In, Acc, 1>(w, 0), widen_element<In, Acc, 1>(w, 1)));
    } else {
      return lo;
    }
  }
};

// Packs per thread of each row up to which the warp kernels (this file's and
// softmax_backward.cuh's) and, under REDUCE_OPS_AHEAD=registers, the block-per-row register kernel
// load their next row into registers (Ahead::kRegisters): 2 packs (8 registers a row) keep them
// within the registers that let their blocks fill an SM.
constexpr int kMaxPrefetchPacks = 2;

// Where a register kernel's thread puts its next row while it reduces and writes the current
// one, so that loads stay in flight through the reductions' shuffles and barriers:
//   kNone       nowhere: the row is loaded when its turn comes;
//   kRegisters  kPacks more packs of registers (kPacks <= kMaxPrefetchPacks);
//   kShared     the block's dynamic shared memory, by one bulk copy of the block's share of the
//               row (sm_90+, 16-byte packs): kPacks x blockDim.x packs of shared memory and no
//               registers, so it serves kernels whose registers are full (1024 threads x 8
//               packs). (Per-thread cp.async copies were tried first: slower than plain loads,
//               H200 1024 x 262144 float32 ReduceScale 83% -> 72% of copy.)
enum class Ahead { kNone, kRegisters, kShared };

// The warp kernels' choice (this file's and softmax_backward.cuh's): registers where a lane
// holds few packs of whole 32-bit words, else nothing.
template <typename In, int kVec, int kPacks>
constexpr Ahead kWarpAhead = kPacks <= kMaxPrefetchPacks && kVec * sizeof(In) % 4 == 0 ? Ahead::kRegisters : Ahead::kNone;

// One thread's next row: packs first + p * step (p < kPacks) of it, those below `packs`.
// load(row) starts the loads (row == nullptr past the last row: nothing); wait() then take(p)
// give them back. Under kShared the block's packs [first - t, first - t + kPacks * blockDim.x)
// (thread t; step == blockDim.x, as the register kernels lay rows out) are one contiguous run,
// copied as is to `stage`, so thread t's pack p is at slot p * blockDim.x + t; thread 0 issues
// the copy, which completes on the mbarrier `arrival` (init() readies it, every thread calls
// it before the first load). Every thread must call load(), wait() and take() for the same rows,
// and under kShared load() after a block barrier that follows its last take() of the row before.
// kLastLoads: the loads (kRegisters: 16-byte packs) or the copy (kShared) mark their lines
// evict_last in the L2 (load_evict_last).
template <typename In, int kVec, int kPacks, Ahead kMode, bool kLastLoads = false>
struct NextRow {
  using Words = std::conditional_t<kMode == Ahead::kNone, char, PackWords<In, kVec>>;
  static constexpr int kPackBytes = kVec * sizeof(In);
  static_assert(kMode == Ahead::kNone || kPackBytes % 4 == 0, "packs of whole 32-bit words");
  static_assert(kMode != Ahead::kRegisters || kPacks <= kMaxPrefetchPacks, "registers: few packs");
  static_assert(kMode != Ahead::kShared || kPackBytes == 16, "bulk copies: 16-byte packs");
  int first, step, packs;
  In* stage;           // kShared: kPacks x blockDim.x packs of dynamic shared memory
  uint64_t* arrival;   // kShared: a __shared__ mbarrier
  unsigned phase = 0;  // kShared: parity of the arrival phase the next wait() waits for
  Words regs[kMode == Ahead::kRegisters ? kPacks : 1];

  __device__ __forceinline__ void init() {
    if constexpr (kMode == Ahead::kShared) {
      if (threadIdx.x == 0) mbarrier_init(arrival);
      __syncthreads();
    }
  }
  __device__ __forceinline__ void load(const In* row) {
    if (row == nullptr) return;
    if constexpr (kMode == Ahead::kRegisters) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int q = first + p * step;
        if (q < packs) regs[p].template load_marked<kLastLoads && kPackBytes == 16>(row + q * kVec);
      }
    } else if constexpr (kMode == Ahead::kShared) {
      if (threadIdx.x == 0) {
        const int block_first = first;  // thread 0's first pack is the block's
        const int n = packs - block_first < kPacks * step ? packs - block_first : kPacks * step;
        bulk_copy_to_shared<kLastLoads>(stage, row + block_first * kVec,
                                        n > 0 ? static_cast<unsigned>(n) * kPackBytes : 0u, arrival);
      }
    }
  }
  __device__ __forceinline__ void wait() {
    if constexpr (kMode == Ahead::kShared) {
      mbarrier_wait(arrival, phase);
      phase ^= 1u;
    }
  }
  __device__ __forceinline__ Words take(int p) const {
    if constexpr (kMode == Ahead::kShared) {
      Words w;
      w.load(stage + (p * step + static_cast<int>(threadIdx.x)) * kVec);
      return w;
    } else {
      return regs[kMode == Ahead::kRegisters ? p : 0];
    }
  }
};

// Elements between the 16-byte boundary at or before p and p (p is aligned to its element).
template <typename T>
__device__ __forceinline__ int misaligned_elements(const T* p) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(p) % 16 / sizeof(T));
}

// Elements at p before its first 16-byte boundary, at most n.
template <typename T>
__device__ __forceinline__ int64_t elements_to_16_bytes(const T* p, int64_t n) {
  constexpr int kV = kMaxVec<T>;
  const int64_t before = (kV - misaligned_elements(p)) % kV;
  return n < before ? n : before;
}

// Where a row's packs lie. Aligned rows (kPeeled false; the launcher guarantees cols % kVec == 0
// and rows starting on a whole pack): from the row's first element, cols / kVec packs. Peeled
// rows (kPeeled: rows that are not whole 16-byte packs or do not start on a 16-byte boundary,
// 16-byte packs, y's rows on x's misalignment, cols >= 2 x kVec, all checked by the launcher):
// the row's 16-byte-aligned middle, from its first 16-byte boundary (`head` elements in), as
// (cols - head) / kVec whole packs; the head and the tail after the last pack (under kVec
// elements each) are the row's edges (RowEdges). Pack q of the row is at row + head + q * kVec
// in x and in y.
template <typename In, int kVec, bool kPeeled>
struct RowPacks {
  int head;  // elements before the first pack: 0 unless kPeeled
  int packs;
  __device__ __forceinline__ RowPacks(const In* row, int64_t cols) {
    if constexpr (kPeeled) {
      static_assert(kVec * sizeof(In) == 16, "peeled rows: 16-byte packs");
      head = static_cast<int>(elements_to_16_bytes(row, cols));
      packs = static_cast<int>((cols - head) / kVec);
    } else {
      head = 0;
      packs = static_cast<int>(cols / kVec);
    }
  }
  // The element of the row that is edge e (the head's elements first, then the tail's), -1 past them.
  __device__ __forceinline__ int edge(int e, int64_t cols) const {
    const int tail = head + packs * kVec;
    return e < head ? e : (e - head < cols - tail ? tail + (e - head) : -1);
  }
};

// A thread's share of a peeled row's edges (RowPacks): its head [0, head) and tail [head + packs x
// kVec, cols), at most 2 x kVec - 2 elements, numbered head first, the thread `at` of the `width`
// holding the row holds edges at + i x width (i < kSlots; width x kSlots >= 2 x kVec - 2; an
// `at` of 2 x kVec or more holds none, as in a cluster's blocks past the first). Loaded
// where the row's packs are, folded into the row's max (and min), summed, written: an element
// a thread, so no access leaves the row. Nothing, and no registers, unless kPeeled.
template <typename In, typename Acc, typename Policy, int kSlots, bool kPeeled>
struct RowEdges {
  static constexpr int kN = kPeeled ? kSlots : 0;
  int col[kN > 0 ? kN : 1];    // the element, -1 for none
  In raw[kN > 0 ? kN : 1];     // x there
  Acc t[kN > 0 ? kN : 1];      // softmax: exp(x - stat), once summed

  template <int kVec>
  __device__ __forceinline__ void load(const In* row, const RowPacks<In, kVec, kPeeled>& at, int64_t cols, int index,
                                       int width) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      col[i] = at.edge(index + i * width, cols);
      if (col[i] >= 0) raw[i] = row[col[i]];
    }
  }
  // No edges (a row past the last, or a thread that holds none of it).
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kN; ++i) col[i] = -1;
  }
  template <typename Fold>
  __device__ __forceinline__ void fold(Fold& f) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col[i] >= 0) f.add(static_cast<Acc>(raw[i]));
    }
  }
  // Softmax: exp(x - stat) of each edge, kept for the write, and their sum.
  template <bool kNormal>
  __device__ __forceinline__ Acc sum(Acc stat) {
    Acc s = Acc(0);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col[i] >= 0) {
        t[i] = Policy::template transform<kNormal>(static_cast<Acc>(raw[i]), stat);
        s += t[i];
      }
    }
    return s;
  }
  // y's edges: finish(exp(x - stat)) as summed (softmax), finish(x) (ReduceScale).
  template <typename Out, typename Finish>
  __device__ __forceinline__ void store(Out* row, const Finish& finish, Acc stat) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col[i] >= 0) {
        row[col[i]] = static_cast<Out>(finish(Policy::kNeedsSum ? t[i] : Policy::transform(static_cast<Acc>(raw[i]), stat)));
      }
    }
  }
};

// Softmax: exp(x - stat) of a thread's packs that lie in the row (in_row(p)), in place in f,
// and their sum with its edges' (RowEdges::sum), added in that order.
template <bool kNormal, typename Policy, int kPacks, int kVec, typename Acc, typename Fragment, typename InRow,
          typename Edges>
__device__ __forceinline__ Acc exps_in_place(Fragment& f, const InRow& in_row, Edges& edges, Acc stat) {
  Acc sum = Acc(0);
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (in_row(p)) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const Acc t = Policy::template transform<kNormal>(f.get(p, k), stat);
        f.set(p, k, t);
        sum += t;
      }
    }
  }
  return sum + edges.template sum<kNormal>(stat);
}

// Runs body(std::true_type) where `normal` holds (every exp this thread is about to take is of
// a normal result: Policy::exp_is_normal over its values' min and the max subtracted), else
// body(std::false_type); the flag is per thread, so a thread with a wide range of values costs
// its warp a second pass only when its neighbours' are narrow.
template <typename Body>
__device__ __forceinline__ void with_exp_mode(bool normal, Body body) {
  if (normal) body(std::true_type{});
  else body(std::false_type{});
}

// Lane `lane` of a kWidth-lane group holds packs p * kWidth + lane, p < kPacks. With kVec > 1
// the launcher guarantees cols % kVec == 0, so a pack is wholly inside the row or wholly out;
// kPeeled rows hold their aligned middle so (RowPacks) and their edges an element a lane
// (RowEdges). kLastLoads (16-byte packs): the packs loaded by load_evict_last, as
// row_norm_regs_kernel's. kRawHeld (16-bit 16-byte packs, no next row ahead): each lane's packs
// held as their raw words from the load to the write, half the registers of floats, softmax's
// exps taken again at the write (launch_warp says where; softmax_backward.cuh's HeldPack does the
// same for the backward's warp).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, int kPacks, int kWidth,
          bool kPeeled, bool kLastLoads, bool kRawHeld = false>
__device__ __forceinline__ void row_norm_warp_rows(const In* __restrict__ x, Out* __restrict__ y, RowGeometry g,
                                                   Policy policy) {
  static_assert(kWidth <= kWarpSize, "a group lives inside one warp");
  static_assert(!kRawHeld ||
                    (sizeof(In) == 2 && kVec * sizeof(In) == 16 && kWarpAhead<In, kVec, kPacks> == Ahead::kNone),
                "raw words: 16-bit 16-byte packs, no next row ahead");
  using Packs = RowPacks<In, kVec, kPeeled>;
  using Edges = RowEdges<In, Acc, Policy, (2 * kVec - 2 + kWidth - 1) / kWidth, kPeeled>;
  const int lane = threadIdx.x % kWidth;
  const int64_t groups_per_block = blockDim.x / kWidth;
  const int group_in_warp = threadIdx.x % kWarpSize / kWidth;
  const int64_t row_step = gridDim.x * groups_per_block;
  // The group's next row is loaded into registers while this one is reduced and written (its
  // edges too).
  constexpr Ahead kAhead = kWarpAhead<In, kVec, kPacks>;
  NextRow<In, kVec, kPacks, kAhead, kLastLoads> next{lane, kWidth, static_cast<int>((g.cols + kVec - 1) / kVec),
                                                     nullptr, nullptr};
  Edges next_edges;
  auto load_next = [&](int64_t row) {
    if (row >= g.rows) return;
    const In* xr = x + row * g.x_row_stride;
    const Packs at(xr, g.cols);
    next.packs = at.packs;
    next.load(xr + at.head);
    next_edges.load(xr, at, g.cols, lane, kWidth);
  };
  const int64_t first_row = blockIdx.x * groups_per_block + threadIdx.x / kWidth;
  if constexpr (kAhead != Ahead::kNone) load_next(first_row);
  for (int64_t row = first_row; row - group_in_warp < g.rows; row += row_step) {
    const bool row_ok = row < g.rows;
    const In* xr = x + (row_ok ? row : 0) * g.x_row_stride;
    const Packs at(xr, g.cols);
    auto in_row = [&](int p) { return row_ok && p * kWidth + lane < at.packs; };
    Edges edges;
    if constexpr (kAhead != Ahead::kNone) edges = next_edges;
    else edges.load(xr, at, g.cols, lane, kWidth);
    if (!row_ok) edges.clear();
    // The lane's packs as floats (softmax's become its exps), or (kRawHeld) as raw words.
    Acc v[kRawHeld ? 1 : kPacks][kVec];
    std::conditional_t<kRawHeld, PackWords<In, kVec>, Acc> words[kRawHeld ? kPacks : 1];
    const auto held = [&](int p, int k) {
      if constexpr (kRawHeld) return words[p].template get<Acc>(k);
      else return v[p][k];
    };
    MaxFold<In, Acc, Policy> fold;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
        if constexpr (kAhead != Ahead::kNone) {
          const auto w = next.take(p);
#pragma unroll
          for (int k = 0; k < kVec; ++k) v[p][k] = w.template get<Acc>(k);
        } else if constexpr (kRawHeld) {
          words[p].template load_marked<kLastLoads>(xr + at.head + (p * kWidth + lane) * kVec);
        } else if constexpr (kLastLoads && kVec * sizeof(In) == 16) {
          PackWords<In, kVec> w;
          w.load_evict_last(xr + at.head + (p * kWidth + lane) * kVec);
#pragma unroll
          for (int k = 0; k < kVec; ++k) v[p][k] = w.template get<Acc>(k);
        } else {
          In raw[kVec];
          load_pack<In, kVec>(xr + at.head + (p * kWidth + lane) * kVec, raw);
#pragma unroll
          for (int k = 0; k < kVec; ++k) v[p][k] = static_cast<Acc>(raw[k]);
        }
      }
    }
    // The prefetched words fold while they are still held (16-bit: two values at a time, see
    // MaxFold), and so do held raw words. Loaded packs fold as values: folding their words as they
    // arrived made ptxas wait for the first pack before loading the last (bfloat16 ReduceScale, 4
    // packs a lane).
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
        if constexpr (kAhead != Ahead::kNone) {
          fold.add(next.take(p));
        } else if constexpr (kRawHeld) {
          fold.add(words[p]);
        } else {
#pragma unroll
          for (int k = 0; k < kVec; ++k) fold.add(v[p][k]);
        }
      }
    }
    edges.fold(fold);
    if constexpr (kAhead != Ahead::kNone) load_next(row + row_step);
    const Acc lo = fold.min();  // softmax: this lane's min (with_exp_mode)
    Acc m = warp_all_reduce<kWidth>(fold.max(), MaxOp<Acc>());
    const Acc stat = policy.stat(m);
    Acc sum = Acc(0);
    if constexpr (Policy::kNeedsSum) {
      Acc s = Acc(0);
      with_exp_mode(Policy::exp_is_normal(lo, stat), [&](auto normal) {
#pragma unroll
        for (int p = 0; p < kPacks; ++p) {
          if (in_row(p)) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              if constexpr (kRawHeld) {
                s += Policy::template transform<decltype(normal)::value>(held(p, k), stat);
              } else {
                v[p][k] = Policy::template transform<decltype(normal)::value>(v[p][k], stat);
                s += v[p][k];
              }
            }
          }
        }
        s += edges.template sum<decltype(normal)::value>(stat);
      });
      sum = warp_all_reduce<kWidth>(s, SumOp<Acc>());
    }
    if (!row_ok) continue;
    const auto finish = policy.finisher(stat, sum);
    Out* yr = y + row * g.y_row_stride;
    // Two copies of the write loop: one loop as a lambda for both moved ptxas' schedule of 42 of
    // the float kernels (cuobjdump -sass), which keep this one as it was.
    if constexpr (Policy::kNeedsSum && kRawHeld) {  // the exps taken again
      with_exp_mode(Policy::exp_is_normal(lo, stat), [&](auto normal) {
#pragma unroll
        for (int p = 0; p < kPacks; ++p) {
          if (in_row(p)) {
            Acc o[kVec];
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              o[k] = finish(Policy::template transform<decltype(normal)::value>(held(p, k), stat));
            }
            store_pack<Out, Acc, kVec>(yr + at.head + (p * kWidth + lane) * kVec, o);
          }
        }
      });
    } else {  // softmax's exps as summed, or ReduceScale's values
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        if (in_row(p)) {
          Acc o[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const Acc t = Policy::kNeedsSum ? v[p][k] : Policy::transform(held(p, k), stat);
            o[k] = finish(t);
          }
          store_pack<Out, Acc, kVec>(yr + at.head + (p * kWidth + lane) * kVec, o);
        }
      }
    }
    edges.store(yr, finish, stat);
    if (lane == 0) policy.write_stat(row, stat);
  }
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec, int kPacks, int kWidth,
          bool kPeeled = false, bool kLastLoads = false, bool kRawHeld = false>
__global__ void row_norm_warp_kernel(const In* __restrict__ x, Out* __restrict__ y, RowGeometry g,
                                     Policy policy) {
  row_norm_warp_rows<In, Out, Acc, Policy, kVec, kPacks, kWidth, kPeeled, kLastLoads, kRawHeld>(x, y, g, policy);
}

// row_norm_warp_kernel with its registers capped at 64, so that 4 blocks share an SM (launch_warp
// says where). A kernel of its own: __launch_bounds__(kBlock) alone, without the cap, moves ptxas'
// register and scheduling choices for every warp kernel (some lost 17%).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, int kPacks, int kWidth,
          bool kPeeled = false, bool kLastLoads = false>
__global__ void __launch_bounds__(kBlock, 4) row_norm_warp_capped_kernel(const In* __restrict__ x,
                                                                         Out* __restrict__ y, RowGeometry g,
                                                                         Policy policy) {
  row_norm_warp_rows<In, Out, Acc, Policy, kVec, kPacks, kWidth, kPeeled, kLastLoads>(x, y, g, policy);
}

// A lane's slot p of kPacks in an element row of `cols` (its element `col`), where the launcher
// gives each lane kPacks = ceil(cols / lanes) values: only the last slot can lie past the row's
// end, and it reads the row's last element again, so that no load needs a predicate (the
// element-row kernels: row_norm_rows_kernel, softmax_backward_rows_kernel).
template <int kPacks>
__device__ __forceinline__ int element_slot(int p, int col, int cols) {
  return p == kPacks - 1 ? min(col, cols - 1) : col;
}

// "warp" a lane group kRows rows at once: short rows of whole packs (kVec > 1, not peeled) or of
// float32 elements (kVec == 1, below), kWidth lanes a row with kPacks packs a lane, as
// row_norm_warp_kernel, but each lane group holds kRows rows (the block's rows first + r x
// kGroups, r < kRows), all their loads in flight before the first fold, and the block takes its
// kRows x kGroups rows once (no row loop, no next row held ahead). The rows' maxes, sums and
// shuffles go side by side, so the work a lane does per row besides its values (addresses,
// shuffles, the finisher) is kRows-fold independent, as in torch.compile's persistent reductions
// (XBLOCK rows a program). Plain loads (the launchers take it for 8-byte packs, rows of 2 and
// element rows, which row_loads_marked never marks). Softmax keeps its exps in registers where
// they take at most 32 (else takes them again for the write).
// Float32 element rows (launched with kPacks = ceil(cols / kWidth), so that only a lane's last
// slot can lie past the row's end) load every slot of a row with no predicate a load: the last
// slot's address is clamped to the row's last element, a repeat that leaves the row's max and
// min as they are (softmax's sum and the writes skip it), and a lane group past the last row
// loads nothing. Predicated a slot, ptxas ran out of predicate registers and issued loads after
// the first folds (4 loads before the first fold at 16 slots a lane, the rest one at a time
// between folds); clamping every slot's address cost more instructions than the last's
// (softmax_launch.h's launch_element_rows).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, int kPacks, int kWidth, int kRows>
__global__ void __launch_bounds__(kBlock) row_norm_rows_kernel(const In* __restrict__ x, Out* __restrict__ y,
                                                               RowGeometry g, Policy policy) {
  static_assert(kWidth <= kWarpSize && (kVec > 1 || sizeof(In) == 4),
                "a group lives inside one warp; whole packs, or float32 elements");
  constexpr bool kRepeatLast = kVec == 1;
  constexpr int kGroups = kBlock / kWidth;
  constexpr bool kHoldExps = Policy::kNeedsSum && kRows * kPacks * kVec <= 32;
  const int lane = threadIdx.x % kWidth;
  const int packs = static_cast<int>(g.cols / kVec);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kGroups * kRows) + threadIdx.x / kWidth;
  bool row_ok[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) row_ok[r] = first + r * kGroups < g.rows;
  auto held = [&](int r, int p) { return row_ok[r] && p * kWidth + lane < packs; };
  auto col = [&](int p) { return (p * kWidth + lane) * kVec; };
  PackWords<In, kVec> w[kRows][kPacks];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if constexpr (kRepeatLast) {
        if (row_ok[r]) w[r][p].load(x + (first + r * kGroups) * g.x_row_stride + element_slot<kPacks>(p, col(p), packs));
        else w[r][p] = {};
      } else if (held(r, p)) {
        w[r][p].load(x + (first + r * kGroups) * g.x_row_stride + col(p));
      }
    }
  }
  Acc stat[kRows], sum[kRows];
  bool normal = true;  // softmax: every exp this thread takes is of a normal result (with_exp_mode)
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    MaxFold<In, Acc, Policy> fold;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (kRepeatLast || held(r, p)) fold.add(w[r][p]);  // a row past the last folds zeros
    }
    stat[r] = fold.max();
    sum[r] = fold.min();  // the row's min until the max is known
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    stat[r] = policy.stat(warp_all_reduce<kWidth>(stat[r], MaxOp<Acc>()));
    normal = normal && Policy::exp_is_normal(sum[r], stat[r]);
  }
  Acc e[kHoldExps ? kRows : 1][kHoldExps ? kPacks : 1][kHoldExps ? kVec : 1];
  if constexpr (Policy::kNeedsSum) {
    with_exp_mode(normal, [&](auto mode) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        Acc s = Acc(0);
#pragma unroll
        for (int p = 0; p < kPacks; ++p) {
          if (held(r, p)) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              const Acc t = Policy::template transform<decltype(mode)::value>(w[r][p].template get<Acc>(k), stat[r]);
              if constexpr (kHoldExps) e[r][p][k] = t;
              s += t;
            }
          }
        }
        sum[r] = s;
      }
    });
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum[r] = warp_all_reduce<kWidth>(sum[r], SumOp<Acc>());
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (!row_ok[r]) continue;
    const int64_t row = first + r * kGroups;
    const auto finish = policy.finisher(stat[r], sum[r]);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (held(r, p)) {
        Acc o[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          Acc t;
          if constexpr (kHoldExps) t = e[r][p][k];
          else t = Policy::transform(w[r][p].template get<Acc>(k), stat[r]);
          o[k] = finish(t);
        }
        store_pack<Out, Acc, kVec>(y + row * g.y_row_stride + col(p), o);
      }
    }
    if (lane == 0) policy.write_stat(row, stat[r]);
  }
}

// "packed rows": rows of kCols values and 4 or 8 bytes, kRows = 2-4 of them a 16-byte pack, x and y
// contiguous on 16-byte boundaries. A thread loads one pack and takes its rows itself (no
// shuffles: a row never crosses a pack), a warp's packs one run of 512 bytes, where the lane-a-row
// kernel (row_norm_rows_kernel on 4- or 8-byte packs) moves a quarter or half of that a load. The
// stats of a thread's rows go as one store (Policy::write_stats). The rows after the last whole pack
// (under kRows) go a thread each in block 0. y may be x: a thread writes only the pack (or row) it
// has read whole.
template <typename In, typename Acc, typename Policy, int kCols>
__global__ void __launch_bounds__(kBlock) row_norm_packed_rows_kernel(const In* x, In* y, int64_t rows,
                                                                      Policy policy) {
  constexpr int kVec = 16 / sizeof(In);
  static_assert(kCols > 1 && kCols < kVec && kVec % kCols == 0, "2-4 whole rows a pack");
  constexpr int kRows = kVec / kCols;
  // The n rows of v[n][kCols] (a pack's, or a tail row) turned into y's values, their stats in stat[n].
  auto normalize = [&policy](auto& v, auto& stat) {
    constexpr int n = std::extent_v<std::remove_reference_t<decltype(stat)>>;
    Acc sum[n];
    bool normal = true;  // softmax: every exp taken is of a normal result (with_exp_mode)
#pragma unroll
    for (int r = 0; r < n; ++r) {
      Acc m = Policy::key(v[r][0]), lo = v[r][0];
#pragma unroll
      for (int k = 1; k < kCols; ++k) {
        m = MaxOp<Acc>()(m, Policy::key(v[r][k]));
        lo = fmin(lo, v[r][k]);
      }
      stat[r] = policy.stat(m);
      normal = normal && Policy::exp_is_normal(lo, stat[r]);
    }
    if constexpr (Policy::kNeedsSum) {
      with_exp_mode(normal, [&](auto mode) {
#pragma unroll
        for (int r = 0; r < n; ++r) {
          sum[r] = Acc(0);
#pragma unroll
          for (int k = 0; k < kCols; ++k) {
            v[r][k] = Policy::template transform<decltype(mode)::value>(v[r][k], stat[r]);
            sum[r] += v[r][k];
          }
        }
      });
    }
#pragma unroll
    for (int r = 0; r < n; ++r) {
      const auto finish = policy.finisher(stat[r], Policy::kNeedsSum ? sum[r] : Acc(0));
#pragma unroll
      for (int k = 0; k < kCols; ++k) v[r][k] = finish(Policy::kNeedsSum ? v[r][k] : Policy::transform(v[r][k], stat[r]));
    }
  };
  const int64_t packs = rows / kRows;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < packs) {
    Acc v[kRows][kCols], stat[kRows];
    PackWords<In, kVec> w;
    w.load(x + i * kVec);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kCols; ++k) v[r][k] = w.template get<Acc>(r * kCols + k);
    }
    normalize(v, stat);
    Acc o[kVec];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kCols; ++k) o[r * kCols + k] = v[r][k];
    }
    store_pack<In, Acc, kVec>(y + i * kVec, o);
    policy.write_stats(i * kRows, stat);
  }
  const int64_t tail = rows - packs * kRows;
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const int64_t row = packs * kRows + threadIdx.x;
    Acc v[1][kCols], stat[1];
#pragma unroll
    for (int k = 0; k < kCols; ++k) v[0][k] = static_cast<Acc>(x[row * kCols + k]);
    normalize(v, stat);
#pragma unroll
    for (int k = 0; k < kCols; ++k) y[row * kCols + k] = static_cast<In>(v[0][k]);
    policy.write_stat(row, stat[0]);
  }
}

// "tile": short rows that are not whole 16-byte packs, `tile_rows` consecutive rows a block at a
// time, as softmax_backward_tile_kernel (softmax_backward.cuh): x's and y's rows contiguous
// (row stride = cols), both on 16-byte boundaries, tile_rows x cols x sizeof(In) a multiple of
// 16, so a tile comes into shared memory by 16-byte packs (run_tile_pipeline: the block's next
// tile while it works on this one), kWidth lanes a row take its values into registers (kPer a lane:
// cols <= kWidth x kPer), reduce max (and sum) and write y over x's tile, which leaves by packs.
// Only the tensor's last partial pack goes an element a thread. Shared memory: two tiles. y may
// be x (in-place ReduceScale): a tile is read whole before any of it is written.
template <typename In, typename Out, typename Acc, typename Policy, int kWidth, int kPer>
__global__ void __launch_bounds__(kBlock) row_norm_tile_kernel(const In* x, Out* y, RowGeometry g, Policy policy,
                                                               int tile_rows) {
  static_assert(std::is_same_v<In, Out>, "y's tile is written over x's");
  constexpr int kGroupsPerWarp = kWarpSize / kWidth;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int cols = static_cast<int>(g.cols);
  const int lane = threadIdx.x % kWidth, group = threadIdx.x / kWidth;
  const int groups = blockDim.x / kWidth;
  In* const stages = reinterpret_cast<In*>(smem_raw);
  run_tile_pipeline<1>(x, x, y, g.rows, cols, tile_rows, stages, [&](int64_t tile, In* xs, int n) {
    const int rows = n / cols;
    // Whole warps go round (the shuffles take every lane): a group past the tile's rows folds nothing.
    for (int row = group; row - group % kGroupsPerWarp < rows; row += groups) {
      const bool row_ok = row < rows;
      const int base = (row_ok ? row : 0) * cols;
      Acc v[kPer];
      MaxFold<In, Acc, Policy> fold;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWidth;
        if (row_ok && c < cols) {
          v[i] = static_cast<Acc>(xs[base + c]);
          fold.add(v[i]);
        }
      }
      const Acc lo = fold.min();  // softmax: this lane's min (with_exp_mode)
      const Acc stat = policy.stat(warp_all_reduce<kWidth>(fold.max(), MaxOp<Acc>()));
      Acc sum = Acc(0);
      if constexpr (Policy::kNeedsSum) {
        Acc s = Acc(0);
        with_exp_mode(Policy::exp_is_normal(lo, stat), [&](auto normal) {
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            if (row_ok && lane + i * kWidth < cols) {
              v[i] = Policy::template transform<decltype(normal)::value>(v[i], stat);
              s += v[i];
            }
          }
        });
        sum = warp_all_reduce<kWidth>(s, SumOp<Acc>());
      }
      if (!row_ok) continue;
      const auto finish = policy.finisher(stat, sum);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWidth;
        if (c < cols) xs[base + c] = static_cast<Out>(finish(Policy::kNeedsSum ? v[i] : Policy::transform(v[i], stat)));
      }
      if (lane == 0) policy.write_stat(tile * tile_rows + row, stat);
    }
  });
}

// Partial statistics of one segment: its max of key(x) and, for softmax, sum of exp(x - max).
template <typename Acc>
struct RowPartial {
  Acc max, sum;
};

// A (max, sum of exp(x - max)) pair's sum moved to a max new_max >= max (online softmax). A pair
// whose max is -inf holds only -inf values, whose exp is 0: its sum is 0 rather than the NaN of
// -inf - -inf. The exp is taken either way and the result selected, so that callers moving
// several sums side by side (a thread's columns, a row's partials) get no branch around each exp:
// such branches kept ptxas from overlapping the exps (OnlineSoftmaxOp below).
template <typename Acc>
__device__ __forceinline__ Acc rescaled_sum(Acc sum, Acc max, Acc new_max) {
  const Acc moved = sum * exp_between(max, new_max);
  return max == -std::numeric_limits<Acc>::infinity() ? Acc(0) : moved;
}

// Combines two (max, sum of exp(x - max)) pairs into the pair of their union: the pair with the
// larger max keeps its sum, the other's is scaled by exp(its max - the larger), one exp and no
// branch (a NaN max gives NaN; two pairs of -inf only give sum 0). Two rescaled_sums, each a
// branch around its exp, made each combine a chain of ~16 dependent steps: the split inner
// softmax's folds (a tree of 4-5 levels of kV combines, then two levels of last-block folds)
// took ~4 us a stage against ~0.7 for the backward's float sums (H100 globaltimer trace,
// h100_study/session32_split_fold.txt).
template <typename Acc>
struct OnlineSoftmaxOp {
  __device__ static RowPartial<Acc> identity() { return {MaxOp<Acc>::identity(), Acc(0)}; }
  __device__ RowPartial<Acc> operator()(const RowPartial<Acc>& a, const RowPartial<Acc>& b) const {
    const bool a_top = !(a.max < b.max);
    const Acc top = a_top ? a.max : b.max, low = a_top ? b.max : a.max;
    const Acc kept = a_top ? a.sum : b.sum, scaled = a_top ? b.sum : a.sum;
    const Acc sum = scaled * exp_between(low, top) + kept;
    return {MaxOp<Acc>()(a.max, b.max), top == -std::numeric_limits<Acc>::infinity() ? Acc(0) : sum};
  }
};

// The kPacks packs of kVec elements that one thread holds of a row. Held widened to Acc where
// that costs at most kAccWords registers (32 by default), so softmax keeps exp(x - max) for the
// writing pass (exp computed once); past that (half / bfloat16 with 8 packs) the raw words stay
// and exp is computed again in the writing pass.
template <typename In, typename Acc, int kVec, int kPacks, bool kWantAcc, int kAccWords = 32>
struct RowFragment {
  static constexpr bool kHoldsAcc = kWantAcc && kPacks * kVec * sizeof(Acc) <= kAccWords * sizeof(uint32_t);
  PackWords<In, kVec> raw[kHoldsAcc ? 1 : kPacks];
  Acc v[kHoldsAcc ? kPacks : 1][kVec];
  __device__ __forceinline__ void load(int p, const In* src) {
    PackWords<In, kVec> pk;
    pk.load(src);
    take(p, pk);
  }
  // Folds pack p into `fold`: as raw words where they are held (16-bit packs fold two at a time).
  template <typename Fold>
  __device__ __forceinline__ void fold(int p, Fold& fold) const {
    if constexpr (kHoldsAcc) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) fold.add(v[p][k]);
    } else {
      fold.add(raw[p]);
    }
  }
  __device__ __forceinline__ void take(int p, const PackWords<In, kVec>& pk) {
    if constexpr (kHoldsAcc) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[p][k] = pk.template get<Acc>(k);
    } else {
      raw[p] = pk;
    }
  }
  __device__ __forceinline__ Acc get(int p, int k) const {
    if constexpr (kHoldsAcc) return v[p][k];
    else return raw[p].template get<Acc>(k);
  }
  __device__ __forceinline__ void set(int p, int k, Acc a) {
    if constexpr (kHoldsAcc) v[p][k] = a;
  }
};

// Where a block of the register kernels (this file's and softmax_backward.cuh's) stands in its
// rows: C = `blocks` blocks share a row (the cluster's, 1 without clusters), this one is `rank`
// among them and its thread holds packs first + p * blockDim.x of each row (p < kPacks); rows
// go round the grid in units of C blocks.
template <bool kCluster>
struct RowShare {
  int blocks, rank, first;
  template <int kPacks>
  __device__ static RowShare of() {
    const int blocks = kCluster ? cluster_blocks() : 1;
    const int rank = kCluster ? cluster_block_rank() : 0;
    return {blocks, rank, rank * kPacks * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)};
  }
  __device__ int64_t first_row() const { return blockIdx.x / blocks; }
  __device__ int64_t row_step() const { return gridDim.x / blocks; }
};

// The register kernels' clusters start kClusterStaggerPhases phases apart: cluster c sleeps
// (c % kClusterStaggerPhases) x stagger_ns before its first row (the launcher passes 0 where a
// cluster runs few rows, and for blocks without clusters). A row's loads, its reductions and
// exchange, and its stores come in turn; clusters that start together, two blocks of each SM,
// keep reaching their reductions together, when the SM moves no bytes. H200 (tune_rows.py,
// h200_study/session18_cluster_stagger.txt), % of copy, no stagger -> 4 phases of 4 us:
// bfloat16 softmax 1024 x 262144 75 -> 79, 2048 x 131072 79 -> 82, 128 x 1048576 57 -> 62;
// ReduceScale 128 x 1048576 float32 73 -> 76, bfloat16 72 -> 77; float32 softmax 128 x 1048576
// 59 -> 62; the rest even or +1.
constexpr int kClusterStaggerPhases = 4;
template <bool kCluster>
__device__ __forceinline__ void stagger_cluster_start(const RowShare<kCluster>& share, unsigned stagger_ns) {
  if constexpr (kCluster) {
    const unsigned ns = static_cast<unsigned>(blockIdx.x / share.blocks % kClusterStaggerPhases) * stagger_ns;
    if (ns > 0) __nanosleep(ns);
  }
}

// "block" (kCluster = false) and "cluster" (kCluster = true, sm_90+): a row is shared by the
// C blocks of a cluster (C = 1 without clusters); block `rank` holds packs
// [rank * kPacks * blockDim.x, (rank + 1) * kPacks * blockDim.x) of the row, thread t its packs
// rank * kPacks * blockDim.x + p * blockDim.x + t (p < kPacks, coalesced for each p), in
// registers from the one read to the one write. Requires cols % kVec == 0 and
// C * kPacks * blockDim.x * kVec >= cols (the launcher's plan); blockDim.x a multiple of 32.
// Rows go round the grid in units of C blocks, so every block of a cluster runs the same rows
// and meets the same cluster barriers; the last barrier keeps each block's shared memory alive
// until the others have read it.
// kStaged (sm_90+, 16-byte packs, not with Ahead::kShared): a block holds 2 x kPacks x blockDim.x
// packs of the row, the first half in registers as above, the second bulk-copied into its dynamic
// shared memory at the row's start (one copy, NextRow's kShared layout: thread t's packs there are
// first + (kPacks + p) * blockDim.x), so a cluster needs half the blocks and each SM moves twice
// the bytes per cluster barrier (softmax_backward_regs_kernel's kOutShared, for one row); blocks
// without clusters (C = 1) use it to hold a row in half the threads, so that two share an SM.
// kPeeled (no clusters, no Ahead::kShared): the row's aligned middle laid out so (RowPacks), its
// edges an element a thread of the first 2 x kVec - 2 (RowEdges), loaded with the packs.
// kLastLoads (16-byte packs): the row's packs loaded by load_evict_last (the next row's and the
// staged half's too, see NextRow), their lines kept in the L2 over the output's (softmax_launch.h's
// row_loads_marked).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, int kPacks, bool kCluster,
          Ahead kAhead = Ahead::kNone, bool kStaged = false, bool kPeeled = false, bool kLastLoads = false>
__global__ void __launch_bounds__(1024) row_norm_regs_kernel(const In* __restrict__ x, Out* __restrict__ y,
                                                             RowGeometry g, Policy policy, unsigned stagger_ns) {
  static_assert(!(kStaged && kAhead == Ahead::kShared), "one use of the shared memory at a time");
  static_assert(!kPeeled || (!kCluster && kAhead != Ahead::kShared), "peeled rows: blocks without a shared ring");
  static_assert(!kLastLoads || kVec * sizeof(In) == 16, "evict_last loads: 16-byte packs");
  using Fragment = RowFragment<In, Acc, kVec, kPacks, Policy::kNeedsSum>;
  using Packs = RowPacks<In, kVec, kPeeled>;
  using Edges = RowEdges<In, Acc, Policy, 1, kPeeled>;
  // The block's partial published to the cluster, by row parity (see cluster_all_reduce): its max,
  // or for softmax its (max, sum of exp(x - max)).
  __shared__ std::conditional_t<Policy::kNeedsSum, RowPartial<Acc>, Acc> exchange[2];
  // Ahead::kShared or kStaged: kPacks x blockDim.x packs, and the copies' mbarrier.
  extern __shared__ __align__(16) unsigned char stage_raw[];
  __shared__ uint64_t arrival;
  const auto share = RowShare<kCluster>::template of<kStaged ? 2 * kPacks : kPacks>();
  const int rank = share.rank, first = share.first;
  // 32-bit pack indices within the row: the launcher's rows hold at most 16 x 1024 x 16 packs.
  const int all_packs = static_cast<int>(g.cols / kVec);
  NextRow<In, kVec, kPacks, kAhead, kLastLoads> next{first, static_cast<int>(blockDim.x), all_packs,
                                                     reinterpret_cast<In*>(stage_raw), &arrival};
  // kStaged: the current row's second half (NextRow as a one-stage ring, loaded at the row's start).
  NextRow<In, kVec, kPacks, kStaged ? Ahead::kShared : Ahead::kNone, kLastLoads> staged{
      first + kPacks * static_cast<int>(blockDim.x), static_cast<int>(blockDim.x), all_packs,
      reinterpret_cast<In*>(stage_raw), &arrival};
  // A row's edges, an element a thread of the first 2 x kVec - 2 (peeled rows have no clusters).
  auto load_edges = [&](Edges& edges, const In* xr, const Packs& at) {
    edges.load(xr, at, g.cols, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  };
  // Row `row`'s packs into `ring` (nothing past the last row); kPeeled: its edges into `edges`.
  Edges next_edges;
  auto load_row = [&](auto& ring, int64_t row, Edges* edges) {
    if (row >= g.rows) return ring.load(nullptr);
    const In* xr = x + row * g.x_row_stride;
    const Packs at(xr, g.cols);
    ring.packs = at.packs;
    ring.load(xr + at.head);
    if (edges != nullptr) load_edges(*edges, xr, at);
  };
  next.init();
  staged.init();
  load_row(next, share.first_row(), kAhead == Ahead::kRegisters ? &next_edges : nullptr);
  int parity = 0;
  stagger_cluster_start(share, stagger_ns);
  for (int64_t row = share.first_row(); row < g.rows; row += share.row_step()) {
    const In* xr = x + row * g.x_row_stride;
    const Packs at(xr, g.cols);
    const int packs = at.packs;
    // Whether this thread's staged pack p is in the row.
    auto staged_ok = [&](int p) { return first + (kPacks + p) * static_cast<int>(blockDim.x) < packs; };
    Fragment f;
    Edges edges;
    if constexpr (kAhead != Ahead::kNone) edges = next_edges;
    if constexpr (kStaged) load_row(staged, row, nullptr);  // the copy flies while the registers load
    if constexpr (kAhead == Ahead::kNone) load_edges(edges, xr, at);
    next.wait();
    // Every load issued before the first is used (one loop each: folded in the loading loop,
    // ptxas waited for each pack before loading the next). Words widened as they arrive (16-bit
    // values held as floats) load without a branch: a guarded pack is a branch, and its widening
    // made the branch wait for the load, one pack in flight at a time. A pack past the row loads
    // the row's first pack instead, and is never used. (Not in clusters: the 1024-thread cluster
    // kernel then spilled 48-72 bytes and lost 5 points, bfloat16 -> float32 1024 x 262144.)
    constexpr bool kUnguarded = !kCluster && kAhead == Ahead::kNone && Fragment::kHoldsAcc && sizeof(In) < sizeof(Acc);
    const auto load_pack = [&](int p, const In* src) {
      if constexpr (kLastLoads) {
        PackWords<In, kVec> w;
        w.load_evict_last(src);
        f.take(p, w);
      } else {
        f.load(p, src);
      }
    };
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int q = first + p * static_cast<int>(blockDim.x);
      if constexpr (kUnguarded) {
        load_pack(p, xr + at.head + (q < packs ? q : 0) * kVec);
      } else if (q < packs) {
        if constexpr (kAhead != Ahead::kNone) f.take(p, next.take(p));
        else load_pack(p, xr + at.head + q * kVec);
      }
    }
    // From the prefetched words while they are still held (they become the next row's after the
    // fold), else from the fragment (16-bit words two values at a time, see MaxFold).
    MaxFold<In, Acc, Policy> fold;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (first + p * static_cast<int>(blockDim.x) < packs) {
        if constexpr (kAhead == Ahead::kRegisters) fold.add(next.take(p));
        else f.fold(p, fold);
      }
    }
    if constexpr (kStaged) {
      staged.wait();
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        if (staged_ok(p)) fold.add(staged.take(p));
      }
    }
    edges.fold(fold);
    Acc m = fold.max();
    const Acc lo = fold.min();  // softmax: this thread's min (with_exp_mode)
    // The next row's loads: into registers as soon as f holds this row's values, into shared
    // memory once every thread has passed the barrier after its reads (see NextRow).
    if constexpr (kAhead == Ahead::kRegisters) load_row(next, row + share.row_step(), &next_edges);
    m = block_all_reduce(m, MaxOp<Acc>());
    if constexpr (kAhead == Ahead::kShared) load_row(next, row + share.row_step(), nullptr);
    // A cluster's blocks meet once per row: ReduceScale's blocks on the row max; softmax's on
    // (max, sum) pairs, each block summing exp(x - its own max) first (online softmax), its
    // values then rescaled by exp(its max - the row's): one cluster barrier per row instead of
    // two (each waits for the cluster's slowest block).
    constexpr bool kOnline = kCluster && Policy::kNeedsSum;
    if constexpr (kCluster && !kOnline) m = cluster_all_reduce(m, &exchange[parity], MaxOp<Acc>());
    // A block whose values are all -inf sums exp(x - 0) = 0 rather than exp(-inf - -inf) = NaN.
    Acc stat = policy.stat(kOnline && m == MaxOp<Acc>::identity() ? Acc(0) : m);
    Acc sum = Acc(0), rescale = Acc(1);
    if constexpr (Policy::kNeedsSum) {
      with_exp_mode(Policy::exp_is_normal(lo, stat), [&](auto normal) {
        const auto in_row = [&](int p) { return first + p * static_cast<int>(blockDim.x) < packs; };
        sum = exps_in_place<decltype(normal)::value, Policy, kPacks, kVec>(f, in_row, edges, stat);
        if constexpr (kStaged) {  // summed only: the write takes exp of these again
#pragma unroll
          for (int p = 0; p < kPacks; ++p) {
            if (staged_ok(p)) {
              const PackWords<In, kVec> w = staged.take(p);
#pragma unroll
              for (int k = 0; k < kVec; ++k) {
                sum += Policy::template transform<decltype(normal)::value>(w.template get<Acc>(k), stat);
              }
            }
          }
        }
      });
      sum = block_all_reduce(sum, SumOp<Acc>());
      if constexpr (kOnline) {
        const RowPartial<Acc> whole = cluster_all_reduce(RowPartial<Acc>{m, sum}, &exchange[parity], OnlineSoftmaxOp<Acc>());
        rescale = rescaled_sum(Acc(1), m, whole.max);  // exp(m - row max); 0 for a block of -inf
        stat = policy.stat(whole.max);
        sum = whole.sum;
      }
    }
    const auto finish = policy.finisher(stat, sum);
    Out* yr = y + row * g.y_row_stride;
    // stat is the row's max here (a cluster's blocks summed against their own).
    with_exp_mode(Policy::kNeedsSum && !Fragment::kHoldsAcc && Policy::exp_is_normal(lo, stat), [&](auto normal) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int q = first + p * static_cast<int>(blockDim.x);
        if (q < packs) {
          Acc o[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            Acc t;
            if constexpr (Policy::kNeedsSum && Fragment::kHoldsAcc) t = kOnline ? f.get(p, k) * rescale : f.get(p, k);
            else t = Policy::template transform<decltype(normal)::value>(f.get(p, k), stat);
            o[k] = finish(t);
          }
          store_pack<Out, Acc, kVec>(yr + at.head + q * kVec, o);
        }
      }
    });
    edges.store(yr, finish, stat);
    if constexpr (kStaged) {
      with_exp_mode(Policy::kNeedsSum && Policy::exp_is_normal(lo, stat), [&](auto normal) {
#pragma unroll
        for (int p = 0; p < kPacks; ++p) {
          if (staged_ok(p)) {
            const PackWords<In, kVec> w = staged.take(p);
            Acc o[kVec];
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              o[k] = finish(Policy::template transform<decltype(normal)::value>(w.template get<Acc>(k), stat));
            }
            store_pack<Out, Acc, kVec>(yr + at.head + (first + (kPacks + p) * static_cast<int>(blockDim.x)) * kVec, o);
          }
        }
      });
      __syncthreads();  // every read of the stage before the next row's copy
    }
    if (rank == 0 && threadIdx.x == 0) policy.write_stat(row, stat);
    parity ^= 1;
  }
  if constexpr (kCluster) cluster_sync();
}

// "cluster_row" (sm_90+, Acc float): one cluster of C blocks per row, the grid covering every row
// (rows x C blocks, not persistent: a cluster's blocks leave once their share is written and the
// next row's cluster takes their place). Block `rank` holds packs [rank * kPacks * blockDim.x,
// (rank + 1) * kPacks * blockDim.x) of the row, thread t packs rank * kPacks * blockDim.x +
// p * blockDim.x + t (p < kPacks), held as Acc from the one read to the one write (softmax keeps
// exp(x - its own max): exp taken once; kHeldRaw, 16-bit softmax: the raw words, and exp(x - the
// row's max) taken again at the write). No block or cluster barrier per row: each warp folds its
// threads' partials (softmax: (max, sum of exp(x - max)) pairs, online), and lane r < C stores the
// warp's into slot (warp, rank) of block r's shared memory (store_to_cluster_peer); each block
// waits on its own mbarrier for all C x warps slots, and every warp folds them in the same order,
// so every block of the row gets the same bits. A block's slots are written only before it
// passes its wait, so it may leave as soon as its stores are issued.
// H200 (tune_rows.py, h200_study/session47_cluster_row.txt, call E), % of copy, the staged
// persistent clusters (row_norm_regs_kernel) -> this kernel: ReduceScale float32 1024 x 262144
// 89 -> 95, 4096 x 65536 91 -> 96; bfloat16 1024 x 262144 87 -> 97, 2048 x 131072 88 -> 97.
// Softmax took four more changes (h200_study/session48_cluster_row.txt, a harness timing this
// kernel outside torch, GB/s at bfloat16 1024 x 262144 / 4096 x 65536, float32 1024 x 262144):
// a kernel without a guard per pack where every block's share is whole (kWhole, power-of-two
// rows) and one multiply per value at the write, 3307 / 3687, 3885 -> 3473 / 3777, 4090; 16-bit
// packs folded before they are widened, -> 3559 / 3835; the rare thread whose exps reach a
// subnormal reading its packs again instead of the common path holding a second copy, -> 3752 /
// 4097 (copy 4190-4250 GB/s: 90 and 98%). Dropped earlier: the packs past the row replaced by
// -inf / 0 so the folds and exps need no branch (float32 softmax 92 -> 74% of copy).
// Requires cols % kVec == 0, C * kPacks * blockDim.x * kVec >= cols, blockDim.x a multiple of 32
// and at most kClusterRowThreads, C <= kClusterRowMaxBlocks (the launcher's plan).
constexpr int kClusterRowThreads = 256;
constexpr int kClusterRowMaxBlocks = 16;
// Values a thread of the cluster_row kernel holds (as Acc registers), and its blocks per SM: 64
// floats in 80 registers let 3 blocks of 256 threads share an SM. (Prototype, H200, 1024 x
// 262144: 2 blocks an SM at 86 registers lost 1.5 points on float32 and 19 on bfloat16; raw
// 16-bit words held instead, exp taken twice, spilled and lost 40.) The kernel that holds 16-bit
// softmax rows as raw words (kHeldRaw, session 75) fits 64 registers, spilling nothing: 4 blocks
// an SM (kClusterRowRawBlocksPerSM; softmax_launch.h's cluster_row_choice).
constexpr int kClusterRowValues = 64;
constexpr int kClusterRowBlocksPerSM = 3;
constexpr int kClusterRowRawBlocksPerSM = 4;

template <typename Acc, typename Policy>
using ClusterRowPartial = std::conditional_t<Policy::kNeedsSum, RowPartial<Acc>, Acc>;

// One block's share of the cluster_row kernel; kAllIn: every pack of the share lies in the row,
// so none needs a guard. kPeeled: the row's aligned middle laid out so (RowPacks), its edges an
// element a thread of the first block's first 2 x kVec - 2 (RowEdges). kHeldRaw: softmax's packs
// held as raw words, not exps (the edges keep theirs).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kAllIn, bool kPeeled, bool kHeldRaw>
__device__ __forceinline__ void cluster_row_share(const In* __restrict__ x, Out* __restrict__ y, const RowGeometry& g,
                                                  const Policy& policy, ClusterRowPartial<Acc, Policy>* slots,
                                                  uint64_t* arrival) {
  constexpr int kPacks = kClusterRowValues / kVec;
  constexpr bool kOnline = Policy::kNeedsSum;
  using Partial = ClusterRowPartial<Acc, Policy>;
  using Fold = std::conditional_t<kOnline, OnlineSoftmaxOp<Acc>, MaxOp<Acc>>;
  using Fragment = RowFragment<In, Acc, kVec, kPacks, Policy::kNeedsSum && !kHeldRaw, kClusterRowValues>;
  const auto share = RowShare<true>::template of<kPacks>();  // one row: the grid's blocks / C
  const int blocks = share.blocks, rank = share.rank, first = share.first;
  const int64_t row = share.first_row();
  const int threads = static_cast<int>(blockDim.x), warps = threads / kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const In* xr = x + row * g.x_row_stride;
  const RowPacks<In, kVec, kPeeled> at(xr, g.cols);
  const int packs = at.packs;
  const auto in_row = [&](int p) { return kAllIn || first + p * threads < packs; };
  if (threadIdx.x == 0) {
    mbarrier_init(arrival);
    mbarrier_arrive_expect(arrival, static_cast<unsigned>(warps * blocks * sizeof(Partial)));
  }
  // Released by the init's fence: no block stores into a peer's slots before that peer's
  // mbarrier is ready (the wait comes just before the first store).
  cluster_arrive(false);
  // Every pack loaded before any is widened, without a branch: a pack past the row loads the
  // row's first pack instead and is never used. (Guarded, each 16-bit pack's widening waited for
  // its load inside the branch: one pack in flight at a time, bfloat16 1024 x 262144 softmax at
  // 56% of copy.)
  PackWords<In, kVec> raw[kPacks];
  const auto load = [&] {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) raw[p].load(xr + at.head + (in_row(p) ? first + p * threads : 0) * kVec);
  };
  load();
  RowEdges<In, Acc, Policy, 1, kPeeled> edges;
  edges.load(xr, at, g.cols, rank == 0 ? static_cast<int>(threadIdx.x) : 2 * kVec, threads);
  // 16-bit packs fold as loaded, two values per instruction, before they are widened.
  MaxFold<In, Acc, Policy> fold;
  if constexpr (sizeof(In) < 4) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) fold.add(raw[p]);
    }
  }
  Fragment f;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) f.take(p, raw[p]);
  if constexpr (sizeof(In) == 4) {  // (folded from the raw words, float32 softmax spilled 372 bytes)
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) f.fold(p, fold);
    }
  }
  edges.fold(fold);
  const Acc m = fold.max();
  Partial mine;
  if constexpr (kOnline) {
    // A thread whose values are all -inf (or that has none) sums exp(x - 0) = 0 rather than NaN.
    const Acc stat = policy.stat(m == MaxOp<Acc>::identity() ? Acc(0) : m);
    Acc sum = Acc(0);
    const auto exps = [&](auto normal) {
      sum = exps_in_place<decltype(normal)::value, Policy, kPacks, kVec>(f, in_row, edges, stat);
    };
    if (Policy::exp_is_normal(fold.min(), stat)) {
      exps(std::true_type{});
    } else {
      // Values reaching down to a subnormal exp (rare): packs held as exps are read again
      // (nothing of this row is written before every block has summed), so the common path
      // keeps no copy; raw words are still held.
      if constexpr (Fragment::kHoldsAcc) {
        load();
#pragma unroll
        for (int p = 0; p < kPacks; ++p) f.take(p, raw[p]);
      }
      exps(std::false_type{});
    }
    mine = RowPartial<Acc>{m, sum};
  } else {
    mine = m;
  }
  const Partial warp_partial = warp_all_reduce<kWarpSize>(mine, Fold());
  cluster_wait();
  if (lane < blocks) store_to_cluster_peer(&slots[warp * blocks + rank], static_cast<unsigned>(lane), warp_partial, arrival);
  mbarrier_wait<true>(arrival, 0);
  Partial whole = Fold::identity();
  for (int i = lane; i < warps * blocks; i += kWarpSize) whole = Fold()(whole, slots[i]);
  whole = warp_all_reduce<kWarpSize>(whole, Fold());
  Acc stat;
  if constexpr (kOnline) stat = policy.stat(whole.max);
  else stat = policy.stat(whole);
  // Softmax: exp(x - m) x exp(m - row max) / sum as one multiply, by rescale / sum.
  const auto finish = [&] {
    if constexpr (kOnline) return policy.finisher(stat, whole.sum).rescaled(rescaled_sum(Acc(1), m, whole.max));
    else return policy.finisher(stat, Acc(0));
  }();
  Out* yr = y + row * g.y_row_stride;
  if constexpr (kOnline && !Fragment::kHoldsAcc) {
    // Raw words held: exp(x - row max) taken again, against the row's max, / sum.
    const auto whole_finish = policy.finisher(stat, whole.sum);
    with_exp_mode(Policy::exp_is_normal(fold.min(), stat), [&](auto normal) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        if (in_row(p)) {
          Acc o[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            o[k] = whole_finish(Policy::template transform<decltype(normal)::value>(f.get(p, k), stat));
          }
          store_pack<Out, Acc, kVec>(yr + at.head + (first + p * threads) * kVec, o);
        }
      }
    });
  } else {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (in_row(p)) {
        Acc o[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) o[k] = finish(kOnline ? f.get(p, k) : Policy::transform(f.get(p, k), stat));
        store_pack<Out, Acc, kVec>(yr + at.head + (first + p * threads) * kVec, o);
      }
    }
  }
  edges.store(yr, finish, stat);
  if (rank == 0 && threadIdx.x == 0) policy.write_stat(row, stat);
}

// kWhole: every block's share lies in the row (the launcher's C x blockDim.x x kPacks packs are
// the row's). Otherwise, for 16-bit softmax, the blocks whose share does take the guard-free
// code too (a second copy of it in the kernel). Harness, H200, GB/s, one copy -> two: bfloat16
// softmax 1000 x 200000 3071 -> 3244, 512 x 250000 3363 -> 3479, 2000 x 100000 3379 -> 3509,
// 4096 x 50000 3420 -> 3635; but float32 softmax 3608 -> 3732 on the first and 84-115 GB/s lost
// on the other three and 8192 x 20000, float32 ReduceScale -28 to +76, bfloat16 ReduceScale
// 4066 -> 3572 at 1000 x 200000.
// kPeeled: rows not whole 16-byte packs (cluster_row_share); never kWhole.
// kHeldRaw (16-bit softmax): the share held as raw words, exp taken again at the write
// (cluster_row_share), in 64 registers.
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kWhole, bool kPeeled = false,
          bool kHeldRaw = false>
__global__ void __launch_bounds__(kClusterRowThreads, kHeldRaw ? kClusterRowRawBlocksPerSM : kClusterRowBlocksPerSM)
    row_norm_cluster_row_kernel(const In* __restrict__ x, Out* __restrict__ y, RowGeometry g, Policy policy) {
  static_assert(std::is_same_v<Acc, float>, "pairs of 32-bit words between blocks");
  constexpr int kPacks = kClusterRowValues / kVec;
  constexpr bool kTwoCopies = Policy::kNeedsSum && sizeof(In) < 4;
  using Partial = ClusterRowPartial<Acc, Policy>;
  // Slot (warp, rank) holds that warp of block `rank`'s partial.
  __shared__ Partial slots[kClusterRowThreads / kWarpSize * kClusterRowMaxBlocks];
  __shared__ uint64_t arrival;
  static_assert(!(kWhole && kPeeled), "a peeled row's packs are not whole");
  const int end = (static_cast<int>(cluster_block_rank()) + 1) * kPacks * static_cast<int>(blockDim.x);
  const int packs = RowPacks<In, kVec, kPeeled>(x + blockIdx.x / cluster_blocks() * g.x_row_stride, g.cols).packs;
  if (kWhole || (kTwoCopies && end <= packs)) {
    cluster_row_share<In, Out, Acc, Policy, kVec, true, kPeeled, kHeldRaw>(x, y, g, policy, slots, &arrival);
  } else {
    cluster_row_share<In, Out, Acc, Policy, kVec, false, kPeeled, kHeldRaw>(x, y, g, policy, slots, &arrival);
  }
}

// "smem": a block per row; the row waits in dynamic shared memory (cols elements of In) between the
// passes. Each thread reads back only the packs it stored, so the passes need no barrier of
// their own beyond those inside block_all_reduce.
// Up to 1024 threads per block: the bound caps registers at 64 so every dtype can launch.
template <typename In, typename Out, typename Acc, typename Policy, int kVec>
__global__ void __launch_bounds__(1024) row_norm_smem_kernel(const In* __restrict__ x, Out* __restrict__ y, RowGeometry g,
                                      Policy policy) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  In* row_buf = reinterpret_cast<In*>(smem_raw);
  constexpr int kUnroll = 4;  // packs in flight per thread while the row streams in
  const int64_t packs = g.cols / kVec;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const In* xr = x + row * g.x_row_stride;
    Acc m = MaxOp<Acc>::identity();
    for (int64_t p0 = threadIdx.x; p0 < packs; p0 += kUnroll * blockDim.x) {
      In raw[kUnroll][kVec];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (p < packs) load_pack<In, kVec>(xr + p * kVec, raw[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (p < packs) {
          *reinterpret_cast<Pack<In, kVec>*>(row_buf + p * kVec) = *reinterpret_cast<Pack<In, kVec>*>(raw[u]);
#pragma unroll
          for (int k = 0; k < kVec; ++k) m = MaxOp<Acc>()(m, Policy::key(static_cast<Acc>(raw[u][k])));
        }
      }
    }
    m = block_all_reduce(m, MaxOp<Acc>());
    const Acc stat = policy.stat(m);
    Acc sum = Acc(0);
    if constexpr (Policy::kNeedsSum) {
      Acc s = Acc(0);
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) s += Policy::transform(static_cast<Acc>(row_buf[p * kVec + k]), stat);
      }
      sum = block_all_reduce(s, SumOp<Acc>());
    }
    const auto finish = policy.finisher(stat, sum);
    Out* yr = y + row * g.y_row_stride;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      Acc o[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        o[k] = finish(Policy::transform(static_cast<Acc>(row_buf[p * kVec + k]), stat));
      }
      store_pack<Out, Acc, kVec>(yr + p * kVec, o);
    }
    if (threadIdx.x == 0) policy.write_stat(row, stat);
  }
}

// The element of a row's head [0, head) or tail [tail, cols) (each under kV elements) that this
// thread moves: threads 0 .. head - 1 the head, kV .. kV + cols - tail - 1 the tail; -1 for the
// others (blocks of at least 2 x kV threads).
__device__ __forceinline__ int64_t edge_element(int64_t head, int64_t tail, int64_t cols, int kV) {
  const int t = threadIdx.x;
  if (t < head) return t;
  if (t >= kV && t - kV < cols - tail) return tail + (t - kV);
  return -1;
}

// "smem" for rows that are not whole 16-byte packs or do not start on a 16-byte boundary (an
// odd row length, say): row_norm_smem_kernel's passes, with each row's 16-byte-aligned middle
// moved by 16-byte loads and stores and only its head and tail (under 16 bytes each) an element
// at a time. Element j of x's row waits at row_buf[shift + j], shift being the row's misalignment
// in elements, so that its aligned packs land on aligned shared memory (ceil(cols /
// kMaxVec<In>) + 1 packs of it). The writes take y's own head, packs and tail; each pack reads
// its elements back as a pack where y's row is misaligned as x's (y a fresh tensor of x's shape,
// or x itself), else an element at a time. Element by element, as row_norm_smem_kernel<kVec = 1>
// did, a block kept 8 bytes of bfloat16 in flight a thread: H200, bfloat16 softmax of 2048 x
// 50257 249 us, torch eager 192 (h200_study/session49_models.txt).
// kBulk (sm_90+): the middle comes in by one bulk copy (Hopper's TMA) that thread 0 issues, all
// of it in flight at once, and the max is then taken from shared memory; without it, by loads of
// 4 packs a thread at a time. H200 (tune_rows.py, REDUCE_OPS_SMEM_LOAD=packs), % of copy, packs
// -> bulk: softmax bfloat16 2048 x 50257 53 -> 79, 8192 x 4097 43 -> 59, 16384 x 1021 28 -> 38,
// float32 2048 x 50257 66 -> 87, 16384 x 1021 60 -> 75; ReduceScale bfloat16 2048 x 50257
// 70 -> 86, float32 75 -> 91 (h200_study/session49_models.txt).
template <typename In, typename Out, typename Acc, typename Policy, bool kBulk>
__global__ void __launch_bounds__(1024) row_norm_smem_peeled_kernel(const In* __restrict__ x, Out* __restrict__ y,
                                                                    RowGeometry g, Policy policy) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  In* row_buf = reinterpret_cast<In*>(smem_raw);
  constexpr int kV = kMaxVec<In>, kVo = kMaxVec<Out>;
  constexpr int kUnroll = 4;  // packs in flight per thread while the row streams in (no kBulk)
  const int64_t cols = g.cols;
  __shared__ uint64_t arrival;  // kBulk: the bulk copy's mbarrier
  unsigned phase = 0;
  if constexpr (kBulk) {
    if (threadIdx.x == 0) mbarrier_init(&arrival);
    __syncthreads();
  }
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const In* xr = x + row * g.x_row_stride;
    const int shift = misaligned_elements(xr);  // buf[j] = row_buf[shift + j]: element j of the row
    const int64_t head = elements_to_16_bytes(xr, cols);
    const int64_t packs = (cols - head) / kV;
    const int64_t tail = head + packs * kV;  // first element after the packs
    In* buf = row_buf + shift;
    Acc m = MaxOp<Acc>::identity();
    // After the barrier that ends the row before (every read of row_buf done): see
    // bulk_copy_to_shared.
    if constexpr (kBulk) {
      if (threadIdx.x == 0) {
        bulk_copy_to_shared(buf + head, xr + head, static_cast<unsigned>(packs * 16), &arrival);
      }
    }
    // Head and tail, under kV elements each: a thread each.
    const int64_t j = edge_element(head, tail, cols, kV);
    if (j >= 0) {
      const In v = xr[j];
      buf[j] = v;
      m = Policy::key(static_cast<Acc>(v));
    }
    if constexpr (kBulk) {
      mbarrier_wait(&arrival, phase);
      phase ^= 1u;
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack<In, kV> v = *reinterpret_cast<const Pack<In, kV>*>(buf + head + p * kV);
#pragma unroll
        for (int k = 0; k < kV; ++k) m = MaxOp<Acc>()(m, Policy::key(static_cast<Acc>(v.v[k])));
      }
    } else {
      for (int64_t p0 = threadIdx.x; p0 < packs; p0 += kUnroll * blockDim.x) {
        In raw[kUnroll][kV];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
          if (p < packs) load_pack<In, kV>(xr + head + p * kV, raw[u]);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
          if (p < packs) {
            *reinterpret_cast<Pack<In, kV>*>(buf + head + p * kV) = *reinterpret_cast<Pack<In, kV>*>(raw[u]);
#pragma unroll
            for (int k = 0; k < kV; ++k) m = MaxOp<Acc>()(m, Policy::key(static_cast<Acc>(raw[u][k])));
          }
        }
      }
    }
    m = block_all_reduce(m, MaxOp<Acc>());  // its barriers also order the stores above
    const Acc stat = policy.stat(m);
    Acc sum = Acc(0);
    if constexpr (Policy::kNeedsSum) {
      // row_buf's packs, the first and last masked to the row: [shift, shift + cols).
      const int64_t buf_packs = (shift + cols + kV - 1) / kV;
      Acc s = Acc(0);
      for (int64_t q = threadIdx.x; q < buf_packs; q += blockDim.x) {
        const Pack<In, kV> v = *reinterpret_cast<const Pack<In, kV>*>(row_buf + q * kV);
        if (q == 0 || q == buf_packs - 1) {
#pragma unroll
          for (int k = 0; k < kV; ++k) {
            const int64_t i = q * kV + k;
            if (i >= shift && i < shift + cols) s += Policy::transform(static_cast<Acc>(v.v[k]), stat);
          }
        } else {
#pragma unroll
          for (int k = 0; k < kV; ++k) s += Policy::transform(static_cast<Acc>(v.v[k]), stat);
        }
      }
      sum = block_all_reduce(s, SumOp<Acc>());
    }
    const auto finish = policy.finisher(stat, sum);
    Out* yr = y + row * g.y_row_stride;
    const int64_t y_head = elements_to_16_bytes(yr, cols);
    const int64_t y_packs = (cols - y_head) / kVo;
    const int64_t y_tail = y_head + y_packs * kVo;
    const int64_t y_j = edge_element(y_head, y_tail, cols, kVo);
    if (y_j >= 0) yr[y_j] = static_cast<Out>(finish(Policy::transform(static_cast<Acc>(buf[y_j]), stat)));
    // y's packs read theirs back as packs where they sit on x's alignment in row_buf.
    const bool pack_reads = sizeof(In) == sizeof(Out) && y_head == head;
    for (int64_t p = threadIdx.x; p < y_packs; p += blockDim.x) {
      const In* src = buf + y_head + p * kVo;
      In v[kVo];
      if (pack_reads) {
        if constexpr (kVo == kV) load_pack<In, kV>(src, v);
      } else {
#pragma unroll
        for (int k = 0; k < kVo; ++k) v[k] = src[k];
      }
      Acc o[kVo];
#pragma unroll
      for (int k = 0; k < kVo; ++k) o[k] = finish(Policy::transform(static_cast<Acc>(v[k]), stat));
      store_pack<Out, Acc, kVo>(yr + y_head + p * kVo, o);
    }
    if (threadIdx.x == 0) policy.write_stat(row, stat);
    __syncthreads();  // the next row's stores into row_buf wait for this row's reads
  }
}

// Split rows: work item w = row * splits + seg covers cols [seg * chunk, min(cols, (seg+1) * chunk)).
struct SplitArgs {
  int64_t splits, chunk;
};

// Calls tile(p0, raw) for each tile of this thread's packs of `src` below `packs`: packs
// p0 + u * blockDim.x (u < kSplitUnroll; p0 = threadIdx.x, then kSplitUnroll x blockDim.x on),
// raw[u] holding pack p0 + u * blockDim.x's kVec values where that is below `packs`; the tiles
// first to last, or last to first where kBackToFront. A tile's packs are all loaded before it is
// used, so that several are in flight (one at a time: H200 8 x 2^24 bfloat16 softmax 46% of copy,
// 57% with four).
constexpr int kSplitUnroll = 4;

// Calls f(p) for p = first, first + step, ... below n, last to first (the split apply passes:
// what their partial passes read last is read first, from L2).
template <typename F>
__device__ __forceinline__ void for_each_stride_back(int64_t first, int64_t n, int64_t step, F f) {
  for (int64_t p = first + ((n + step - 1) / step - 1) * step; p >= 0; p -= step) {
    if (p < n) f(p);
  }
}

template <typename In, int kVec, bool kBackToFront = false, typename Tile>
__device__ __forceinline__ void for_each_split_tile(const In* src, int64_t packs, Tile tile) {
  const int64_t step = kSplitUnroll * static_cast<int64_t>(blockDim.x);
  auto load_tile = [&](int64_t p0) {
    In raw[kSplitUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      if (p < packs) load_pack<In, kVec>(src + p * kVec, raw[u]);
    }
    tile(p0, raw);
  };
  if constexpr (kBackToFront) {
    for_each_stride_back(threadIdx.x, packs, step, load_tile);
  } else {
    for (int64_t p0 = threadIdx.x; p0 < packs; p0 += step) load_tile(p0);
  }
}

// Calls body(p, v) for this thread's packs p = threadIdx.x, threadIdx.x + blockDim.x, ... below
// `packs` of `src`, v holding pack p's kVec values (loaded a tile at a time), in that order or,
// where kBackToFront, a tile at a time from the last.
template <typename In, int kVec, bool kBackToFront = false, typename Body>
__device__ __forceinline__ void for_each_split_pack(const In* src, int64_t packs, Body body) {
  for_each_split_tile<In, kVec, kBackToFront>(src, packs, [&](int64_t p0, const In (&raw)[kSplitUnroll][kVec]) {
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      if (p >= packs) break;
      body(p, raw[u]);
    }
  });
}

// Threads of the split kernels' blocks (softmax_backward's split kernels' too).
constexpr int kSplitThreads = 512;

// The partial pass: each block's work items' (max, sum of exp(x - max)). Two kernels below run it,
// with and without a register bound.
template <typename In, typename Acc, typename Policy, int kVec>
__device__ __forceinline__ void row_norm_partial_items(const In* __restrict__ x, RowPartial<Acc>* __restrict__ partial,
                                                       const RowGeometry& g, const SplitArgs& s) {
  allow_dependents();
  const int64_t items = g.rows * s.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t row = w / s.splits, c0 = (w % s.splits) * s.chunk;
    const int64_t n = (g.cols - c0 < s.chunk) ? g.cols - c0 : s.chunk;
    const In* xs = x + row * g.x_row_stride + c0;
    Acc m = MaxOp<Acc>::identity(), sum = Acc(0);
    // A tile of kSplitUnroll packs at a time: its max and min first (16-bit packs two values per
    // instruction, MaxFold), so that softmax rescales its running sum once per tile, then its exps
    // summed into two accumulators. H200, 8 x 2^24 bfloat16 softmax, against a rescale check and a
    // serial sum per pack: 57% -> 59% of copy (partial kernel 74.6 us, ReduceScale's 68.5;
    // h200_study/session18_max_fold_split_plain_sums.txt).
    const int64_t packs = n / kVec;
    for_each_split_tile<In, kVec>(xs, packs, [&](int64_t p0, const In (&raw)[kSplitUnroll][kVec]) {
      auto in_tile = [&](int u) { return p0 + u * static_cast<int64_t>(blockDim.x) < packs; };
      MaxFold<In, Acc, Policy> fold;
#pragma unroll
      for (int u = 0; u < kSplitUnroll; ++u) {
        if (in_tile(u)) fold.add(raw[u]);
      }
      if constexpr (Policy::kNeedsSum) {
        const Acc new_m = MaxOp<Acc>()(m, fold.max());
        if (!(new_m == m)) {
          sum = rescaled_sum(sum, m, new_m);
          m = new_m;
        }
        if (m != -std::numeric_limits<Acc>::infinity()) {
          with_exp_mode(Policy::exp_is_normal(fold.min(), m), [&](auto normal) {
            Acc part[2] = {Acc(0), Acc(0)};
#pragma unroll
            for (int u = 0; u < kSplitUnroll; ++u) {
              if (in_tile(u)) {
#pragma unroll
                for (int k = 0; k < kVec; ++k) {
                  part[k % 2] += Policy::template transform<decltype(normal)::value>(static_cast<Acc>(raw[u][k]), m);
                }
              }
            }
            sum += part[0] + part[1];
          });
        }
      } else {
        m = MaxOp<Acc>()(m, fold.max());
      }
    });
    const Acc block_m = block_all_reduce(m, MaxOp<Acc>());
    if constexpr (Policy::kNeedsSum) sum = block_all_reduce(rescaled_sum(sum, m, block_m), SumOp<Acc>());
    if (threadIdx.x == 0) partial[w] = {block_m, sum};
  }
}

// 4-byte inputs: 4 blocks of kSplitThreads per SM (32 registers, every thread slot of the SM),
// which they fit without spilling; 16-bit and double rows take the unbounded kernel (16-bit
// softmax needs 56 registers; bounded to 40 or 32 it spilled). H200 (scripts/profile_kernels.py,
// partial kernel, unbounded -> 4 blocks): float32 softmax 8 x 2^24 135.2 -> 130.2 us, 2^30 1034 ->
// 950; ReduceScale 8 x 2^24 137.8 -> 130.7; bfloat16 softmax 74.7 -> 178; 3 blocks (40 registers)
// gained nothing.
template <typename In, typename Acc, typename Policy, int kVec>
__global__ void row_norm_partial_kernel(const In* __restrict__ x, RowPartial<Acc>* __restrict__ partial, RowGeometry g,
                                        SplitArgs s) {
  row_norm_partial_items<In, Acc, Policy, kVec>(x, partial, g, s);
}
template <typename In, typename Acc, typename Policy, int kVec>
__global__ void __launch_bounds__(kSplitThreads, 4)
    row_norm_partial_kernel_4_blocks(const In* __restrict__ x, RowPartial<Acc>* __restrict__ partial, RowGeometry g,
                                     SplitArgs s) {
  row_norm_partial_items<In, Acc, Policy, kVec>(x, partial, g, s);
}

// The apply pass, launched as a programmatic dependent of the partial pass (launch_dependent): its
// blocks take SMs as the partial pass's last blocks leave them and wait there for its partials.
// It takes the work items last to first, and each item's tiles last to first, so that it starts on
// what the partial pass read last, still in L2 (50 MB on the H100), before its own reads and
// writes evict it. H100, us, neither -> both (each alone gave about half), outputs bitwise equal:
// float32 softmax 8 x 2^24 561.4 -> 556.4, 4 x 2^22 81.1 -> 76.6, ReduceScale 12 x 2^21 115.3 ->
// 112.3, bfloat16 softmax 8 x 2^24 289.1 -> 285.2; the 2^30 softmax even (4393 -> 4392;
// h100_study/session36_split_pdl.txt).
template <typename In, typename Out, typename Acc, typename Policy, int kVec>
__global__ void row_norm_apply_kernel(const In* __restrict__ x, Out* __restrict__ y,
                                      const RowPartial<Acc>* __restrict__ partial, RowGeometry g,
                                      SplitArgs s, Policy policy) {
  wait_for_prerequisite();
  const int64_t items = g.rows * s.splits;
  for (int64_t v = blockIdx.x; v < items; v += gridDim.x) {
    const int64_t w = items - 1 - v;
    const int64_t row = w / s.splits, seg = w % s.splits, c0 = seg * s.chunk;
    const RowPartial<Acc>* rp = partial + row * s.splits;
    Acc m = MaxOp<Acc>::identity();
    for (int64_t j = threadIdx.x; j < s.splits; j += blockDim.x) m = MaxOp<Acc>()(m, rp[j].max);
    m = block_all_reduce(m, MaxOp<Acc>());
    const Acc stat = policy.stat(m);
    Acc sum = Acc(0);
    if constexpr (Policy::kNeedsSum) {
      for (int64_t j = threadIdx.x; j < s.splits; j += blockDim.x) sum += rescaled_sum(rp[j].sum, rp[j].max, m);
      sum = block_all_reduce(sum, SumOp<Acc>());
    }
    const auto finish = policy.finisher(stat, sum);
    const int64_t n = (g.cols - c0 < s.chunk) ? g.cols - c0 : s.chunk;
    const In* xs = x + row * g.x_row_stride + c0;
    Out* ys = y + row * g.y_row_stride + c0;
    for_each_split_pack<In, kVec, true>(xs, n / kVec, [&](int64_t p, const In (&raw)[kVec]) {
      Acc lo = std::numeric_limits<Acc>::infinity();
#pragma unroll
      for (int k = 0; k < kVec; ++k) lo = fmin(lo, static_cast<Acc>(raw[k]));
      with_exp_mode(Policy::exp_is_normal(lo, stat), [&](auto normal) {
        Acc o[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          o[k] = finish(Policy::template transform<decltype(normal)::value>(static_cast<Acc>(raw[k]), stat));
        }
        store_pack<Out, Acc, kVec>(ys + p * kVec, o);
      });
    });
    if (seg == 0 && threadIdx.x == 0) policy.write_stat(row, stat);
  }
}

// The inner-dim kernels (softmax over the middle dim of a contiguous (outer, cols, inner)
// tensor, and its backward) work on tiles: a tile is blockDim.x packs of kV adjacent inner
// columns of one outer index, taken by one block, or, where tiles are too few to fill the GPU
// (kCluster), by the C blocks of a thread block cluster. The tile's rows of threads (blockDim.y
// in each of its blocks) split the cols: TileShare below. Each thread folds its share, the rows
// of threads combine theirs (warp shuffles and shared memory, the same order every run: see
// combine_tile), the blocks of a cluster theirs through distributed shared memory (in rank
// order), and the tile is written.
// Where kHold packs a thread cover its share the share stays in registers (one read, one
// write); past that a second pass re-reads it (mostly from L2). Before, a thread took a whole
// column: 4096 x 1024 over dim 0 ran 1024 threads at 1% of copy (H100: 877 us, torch.compile
// 73-164; blocks of 512 threads: 33). `benchmarks/inner_softmax.py`, results in
// `benchmarks/results/h100_study/session28_inner_softmax.txt`. kInnerThreads bounds a block
// (shared memory is sized for it); kInnerClusterTx (launch.h) bounds a cluster tile's blockDim.x.
constexpr int kInnerThreads = 512;
constexpr int kInnerHold = 8;
// Values a thread holds where the tiles load one at a time (an inner dim that is not a multiple
// of the 16-byte pack, or unaligned storage): 32 for 32- and 64-bit elements (16 in double's
// backward, where 32 spilled), where kInnerHold held a tenth of the bytes a thread has in flight
// and half the cols a block reaches; 16-bit elements keep kInnerHold (their loads, one value an
// instruction, set the pace: 32 lost). H100, us, 8 -> 32 values (h100_study/session34_wide_rows.txt,
// section 8): float32 over dim 0 (1024, 65535) forward 805 -> 382, backward 651 -> 451; over dim 1
// (32, 1024, 1023) 338 -> 178, 355 -> 192; float64 (1024, 65535) forward 1070 -> 793, backward
// (at 16) 1869 -> 905; bfloat16 (1024, 65535) forward 307 -> 360 at 32, even at 16.
template <typename T, bool kBackward>
constexpr int kInnerScalarHold = sizeof(T) == 2 ? kInnerHold : kBackward && sizeof(T) == 8 ? 16 : 32;
// 8-byte packs a thread holds where 16-bit inputs have an inner dim that is a multiple of 4 but
// not 8 (as many registers as kInnerHold 16-byte packs; the launchers give them no clusters).
// H100, us, scalar loads -> 8-byte packs: forward (h100_study/session34_wide_rows.txt, section
// 11) bfloat16 over dim 1 (32, 1024, 1020) 141.6 -> 91.2, (64, 256, 4092) 298.7 -> 143.5, (64,
// 256, 196) 22.4 -> 15.4, over dim 0 (1024, 65532) 269.5 -> 210.9, (4096, 1020) 38.0 -> 26.1,
// then 64-byte tile rows (launch.h's WideRows::kAlways; session35_tile_rows.txt, section 6)
// (2, 3000, 7004) over dim 1 220.2 -> 169.8, (1024, 65532) 209.5 -> 200.3; backward
// (h100_study/session35_tile_rows.txt), with tile rows of 32 bytes where only those
// hold (launch.h's WideRows::kHeldFirst), (32, 1024, 1020) 178.8 -> 92.6, (16, 2048, 1020) 172.9
// -> 114.8, (1024, 65532) 297.8 -> 209.8, (8192, 4092) 235.6 -> 184.1, but (2, 3000, 7004) 215.6
// -> 255.4 (streamed). float32 keeps its 32 scalars a thread (8-byte packs were mixed).
constexpr int kInnerHalfHold = 16;
// Packs of kVec elements a thread of the inner tiles holds: kInnerHold of 16 bytes,
// kInnerHalfHold of 8 (16-bit inputs'), kInnerScalarHold single values.
template <typename T, int kVec, bool kBackward>
constexpr int kInnerHoldFor = kVec * sizeof(T) == 16 ? kInnerHold
                              : kVec == 1                ? kInnerScalarHold<T, kBackward>
                                                         : kInnerHalfHold;

// Shared memory of an inner-dim kernel combining values of type T, kV per thread: `part` for the
// combine over a block's rows of threads (in two halves where the rows share warps) and, in
// clusters, two slots for the block's combined values, which the cluster's blocks read (used in
// turn: see combine_tile).
template <typename T, int kV, bool kCluster>
struct TileScratch {
  T part[kInnerThreads * kV];
  T slot[2][kCluster ? kInnerClusterTx * kV : 1];
};

// The thread's place in its block (threadIdx, blockDim), read from the special registers
// anew at each use: kept out of registers across the caller's loops. combine_tile's index
// arithmetic from threadIdx and blockDim was hoisted out of the tile loop and held ~7 registers
// through the whole kernel (bfloat16 held tiles 75 -> 84, float32 64 -> 76; nvdisasm
// --print-life-ranges: every point of the kernel ~7 higher).
struct BlockPlace {
  int tx, ty, x, y;
  __device__ __forceinline__ static BlockPlace read() {
    unsigned v[4];
    asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(v[0]));
    asm volatile("mov.u32 %0, %%ntid.y;" : "=r"(v[1]));
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v[2]));
    asm volatile("mov.u32 %0, %%tid.y;" : "=r"(v[3]));
    return {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), static_cast<int>(v[3])};
  }
};

// v[e] = op(v[e], the value of the lane `mask` away) for mask = from, 2 from, ... < to: the
// lanes' rows of threads combined, each lane getting the result (the ops commute, so every lane
// gets the same bits).
template <typename T, int kV, typename Op>
__device__ __forceinline__ void butterfly_rows(T (&v)[kV], int from, int to, Op op) {
  for (int mask = from; mask < to; mask *= 2) {
#pragma unroll
    for (int e = 0; e < kV; ++e) v[e] = op(v[e], shfl_xor(v[e], mask, kWarpSize));
  }
}

// Combines the tile's rows of threads' values v[0, kV) (one per thread; kV columns) and returns
// the result to every thread of its column: the same value in every thread (the ops commute)
// and the same bits every run (a fixed order).
// - Rows that share warps (blockDim.x < 32, whole warps): a butterfly over each warp's rows; then,
//   with more warps than one, each warp's result to shared memory (half `phase` of part) and,
//   after one barrier, every warp combines them the same way (a fixed set of warps a lane, in
//   order, then a butterfly). No barrier after the reads: the next combine writes the other half,
//   and the barrier it holds comes after every thread's reads of this one. The tree below took a
//   barrier a level (8 for 256 rows) and one after: H100, bfloat16 forward, us, over dim 0
//   (4096, 1024) 22.0 -> 19.4, (1024, 65536) 140.3 -> 125.0, over dim 1 (32, 1024, 1024) 77.1 ->
//   65.6, (64, 256, 4096) 110.8 -> 99.2, (128, 128, 128, 32) 104.5 -> 97.9; backward (8192, 4096)
//   over dim 0 123.1 -> 114.6; float32 within 1% but (1024, 65536) 259 -> 264 forward and 359 ->
//   364 backward, a shape that moved as much between builds of code that did not touch it
//   (h100_study/session33_combine_warps.txt).
// - Otherwise a tree over the block's rows of threads in shared memory into row 0.
// In a cluster, row 0 of each block then reads the blocks' results in rank order (so every block
// gets the same bits) and hands them to its block through part. A slot is written before a
// cluster barrier and read after it; the next write to it comes after the next combine's
// barrier, which every block reaches only after its reads: two slots need one cluster barrier a
// combine. `phase` (every thread's, 0 at the start) names the slot and the half, and flips.
template <bool kCluster, typename T, int kV, typename Op>
__device__ __forceinline__ void combine_tile(T (&v)[kV], TileScratch<T, kV, kCluster>& s, int& phase, Op op) {
  const BlockPlace b = BlockPlace::read();
  const int tx = b.tx, ty = b.ty, x = b.x, y = b.y, linear = y * tx + x;
  const bool in_warps = ty > 1 && tx < kWarpSize && tx * ty >= kWarpSize;  // block-uniform
  T* const part = s.part + (in_warps && phase ? kInnerThreads * kV / 2 : 0);
  const int at = x * kV;  // row 0's place in part
  if (in_warps) {
    butterfly_rows(v, tx, kWarpSize, op);
    const int warps = tx * ty / kWarpSize, rows = kWarpSize / tx;  // powers of two
    if (warps > 1) {
      const int lane = linear % kWarpSize, warp = linear / kWarpSize;
      if (lane < tx) {
#pragma unroll
        for (int e = 0; e < kV; ++e) part[(warp * tx + x) * kV + e] = v[e];
      }
      __syncthreads();
      // Lane row r takes warps r, r + rows, ... (warps <= rows: r % warps alone).
      const int group = warps < rows ? warps : rows, first = lane / tx % group;
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e] = part[(first * tx + x) * kV + e];
      for (int w = first + rows; w < warps; w += rows) {
#pragma unroll
        for (int e = 0; e < kV; ++e) v[e] = op(v[e], part[(w * tx + x) * kV + e]);
      }
      butterfly_rows(v, tx, tx * group, op);
    }
  } else if (ty > 1) {
    const int slot = linear * kV;
#pragma unroll
    for (int e = 0; e < kV; ++e) part[slot + e] = v[e];
    __syncthreads();
    for (int stride = ty / 2; stride > 0; stride /= 2) {
      if (y < stride) {
#pragma unroll
        for (int e = 0; e < kV; ++e) part[slot + e] = v[e] = op(v[e], part[slot + stride * tx * kV + e]);
      }
      __syncthreads();
    }
  }
  if constexpr (kCluster) {
    T* out = s.slot[phase];
    if (y == 0) {
#pragma unroll
      for (int e = 0; e < kV; ++e) out[at + e] = v[e];
    }
    // Row 0 is in warp 0 (blockDim.x <= kInnerClusterTx): the only writers.
    cluster_barrier(linear < kWarpSize);
    if (y == 0) {
      const unsigned blocks = cluster_blocks();
      const T* peer = cluster_peer(out, 0);
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e] = peer[at + e];
      for (unsigned r = 1; r < blocks; ++r) {
        peer = cluster_peer(out, r);
#pragma unroll
        for (int e = 0; e < kV; ++e) v[e] = op(v[e], peer[at + e]);
      }
      if (ty > 1) {
#pragma unroll
        for (int e = 0; e < kV; ++e) part[at + e] = v[e];
      }
    }
    // Every thread passed the cluster barrier, so the reads of part above are done.
    if (ty > 1) __syncthreads();
  }
  phase ^= 1;
  if (ty == 1 || (in_warps && !kCluster)) return;  // every thread holds the result
#pragma unroll
  for (int e = 0; e < kV; ++e) v[e] = part[at + e];
  if (!in_warps) __syncthreads();  // the tree's part is reused by the next combine
}

template <typename In, int kV>
__device__ __forceinline__ Pack<In, kV> load_inner_pack(const In* p) {
  return *reinterpret_cast<const Pack<In, kV>*>(p);
}

// A thread's share of its tile's cols: k = first, first + step, ... < cols. The rows of threads
// of the tile's blocks take turns: first = rank * blockDim.y + threadIdx.y, step = C * blockDim.y
// for block `rank` of C (a cluster's; 1 block without clusters).
struct TileShare {
  int64_t first, step, cols;

  template <bool kCluster>
  __device__ __forceinline__ static TileShare of(int64_t cols) {
    const int64_t blocks = kCluster ? cluster_blocks() : 1, rank = kCluster ? cluster_block_rank() : 0;
    return {rank * blockDim.y + threadIdx.y, blocks * blockDim.y, cols};
  }

  // Loads the share into held (the launch made kHold packs cover it).
  template <int kHold, typename P, typename Get>
  __device__ __forceinline__ void load(P (&held)[kHold], Get get) const {
#pragma unroll
    for (int u = 0; u < kHold; ++u) {
      if (first + u * step < cols) held[u] = get(first + u * step);
    }
  }

  // use(v, k) for the share's rows k: v = held[u] where kHold > 0 (loaded), else get(k), four
  // rows at a time so that their loads are in flight together.
  template <int kHold, typename P, typename Get, typename Use>
  __device__ __forceinline__ void each(const P (&held)[kHold > 0 ? kHold : 1], Get get, Use use) const {
    if constexpr (kHold > 0) {
#pragma unroll
      for (int u = 0; u < kHold; ++u) {
        if (first + u * step < cols) use(held[u], first + u * step);
      }
    } else {
      int64_t k = first;
      for (; k + 3 * step < cols; k += 4 * step) {
        P v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = get(k + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) use(v[u], k + u * step);
      }
      for (; k < cols; k += step) use(get(k), k);
    }
  }

  // round(v) for the share's rows kColsRound at a time (their loads in flight together), v[u] =
  // get(k) for rows k, k + step, ..., the last round padded with `absent` past the share (a count
  // of the rows present cost the adds a predicate an element).
  template <typename P, typename Get, typename Round>
  __device__ __forceinline__ void rounds(Get get, const P& absent, Round round) const {
    for (int64_t k = first; k < cols; k += kColsRound * step) {
      P v[kColsRound];
      if (k + (kColsRound - 1) * step < cols) {
#pragma unroll
        for (int u = 0; u < kColsRound; ++u) v[u] = get(k + u * step);
      } else {
#pragma unroll
        for (int u = 0; u < kColsRound; ++u) v[u] = k + u * step < cols ? get(k + u * step) : absent;
      }
      round(v);
    }
  }
};

// A thread's place in tile t (tiles_per_outer tiles of blockDim.x packs of kV columns an outer
// index): its first column i, its element offset at col 0 (o * cols * inner + i), and whether it
// has columns (inner is a multiple of kV).
struct InnerTileItem {
  int64_t i, base;
  bool active;

  // Column tile `tile` of the outer index whose col 0 starts at element outer_base.
  template <int kV>
  __device__ __forceinline__ static InnerTileItem at(int64_t tile, int64_t outer_base, int64_t inner) {
    const int64_t i = tile * (blockDim.x * kV) + threadIdx.x * kV;
    return {i, outer_base + i, i < inner};
  }
  template <int kV>
  __device__ __forceinline__ static InnerTileItem of(const InnerGeometry& g, int64_t t, int64_t tiles_per_outer) {
    return at<kV>(t % tiles_per_outer, (t / tiles_per_outer) * g.cols * g.inner, g.inner);
  }
};

// Runs tile(it) for the tiles of this block, `it` the thread's place in each (of its cluster
// where kCluster: every block of a cluster runs the same tiles, and so meets the same cluster
// barriers), then, in a cluster, waits for the cluster's blocks: their last reads of this block's
// slots.
template <bool kCluster, int kV, typename Tile>
__device__ __forceinline__ void for_each_tile(const InnerGeometry& g, int64_t tiles_per_outer, Tile tile) {
  const int64_t blocks = kCluster ? cluster_blocks() : 1, tiles = g.outer * tiles_per_outer;
  for (int64_t t = blockIdx.x / blocks; t < tiles; t += gridDim.x / blocks) {
    tile(InnerTileItem::of<kV>(g, t, tiles_per_outer));
  }
  if constexpr (kCluster) cluster_barrier(false);
}

// Each of a thread's kV columns' max (NaN if any) and min (NaN skipped) over the packs added:
// 16-bit packs two columns a word and instruction (packed_extreme), as MaxFold. The min tells
// with_exp_mode whether the column's exps are normal.
template <typename In, typename Acc, int kV>
struct ColumnRange {
  static constexpr bool kPacked = kPackedMinMax && std::is_same_v<Acc, float> && sizeof(In) == 2 && kV % 2 == 0;
  static constexpr int kWords = kPacked ? kV / 2 : 1;
  uint32_t mx[kWords], mn[kWords];  // packed: both halves start at -inf and +inf
  Acc hi[kPacked ? 1 : kV], lo[kPacked ? 1 : kV];

  __device__ __forceinline__ ColumnRange() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      mx[i] = MaxFold<In, Acc, SoftmaxPolicy<Acc>>::kNegInf;
      mn[i] = MaxFold<In, Acc, SoftmaxPolicy<Acc>>::kPosInf;
    }
#pragma unroll
    for (int e = 0; e < (kPacked ? 1 : kV); ++e) {
      hi[e] = MaxOp<Acc>::identity();
      lo[e] = std::numeric_limits<Acc>::infinity();
    }
  }
  __device__ __forceinline__ void add(const Pack<In, kV>& v) {
    if constexpr (kPacked) {
      uint32_t w[kWords];
      memcpy(w, &v, sizeof(w));
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        mx[i] = packed_extreme<In, true>(mx[i], w[i]);
        mn[i] = packed_extreme<In, false>(mn[i], w[i]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const Acc x = widen<Acc>(v, e);
        hi[e] = MaxOp<Acc>()(hi[e], x);
        lo[e] = fmin(lo[e], x);
      }
    }
  }
  __device__ __forceinline__ Acc max(int e) const { return kPacked ? widen_element<In, Acc, kWords>(mx, e) : hi[e]; }
  __device__ __forceinline__ Acc min(int e) const { return kPacked ? widen_element<In, Acc, kWords>(mn, e) : lo[e]; }
};

// Softmax over a middle dim as a policy of the split kernels (below, with the interface) and of
// the tiles (load, finish and apply): the online (max, sum of exp(x - max)) pair per column as
// Stat, as the streamed tiles'; the factor is (exp offset of the max, 1 / sum).
template <typename In, typename Out, typename Acc, int kV>
struct SoftmaxInner {
  const In* x;
  Out* y;
  using Stat = RowPartial<Acc>;
  struct Factor {
    Acc offset, inv_sum;
  };
  using Loaded = Pack<In, kV>;
  __device__ static Stat identity() { return OnlineSoftmaxOp<Acc>::identity(); }
  __device__ static Stat fold(const Stat& a, const Stat& b) { return OnlineSoftmaxOp<Acc>()(a, b); }
  __device__ Factor finish(const Stat& s) const {
    return {exp_offset(s.max), Acc(1) / s.sum};  // an all -inf column: NaN, as torch
  }
  __device__ Loaded load(int64_t at) const { return load_inner_pack<In, kV>(x + at); }
  // A row that adds nothing (a short last round's padding): -inf, whose exp is 0.
  __device__ static Loaded absent() {
    Loaded v;
#pragma unroll
    for (int e = 0; e < kV; ++e) v.v[e] = static_cast<In>(-std::numeric_limits<Acc>::infinity());
    return v;
  }
  // The round's max and min first (16-bit packs two columns per instruction), one rescaling of
  // the sum where the max rose, then one exp a value: the ex2 unit alone where every column's
  // exps are normal (with_exp_mode). The online pair a value at a time took ~53 instructions an
  // element: H100, bfloat16 65536 x 64 over dim 0, fold launch 6.9M -> 3.7M warp instructions,
  // 34.8 -> 31.9 us (ncu, h100_study/session30_inner_split.txt). Packed max and min, the exp
  // modes and whole rounds (no count of rows present, a predicate an element): fold launch
  // 25.6 -> 23.7 us, (1048576, 64) 83.0 -> 76.0; float32 unchanged (torch.profiler,
  // h100_study/session32_split_fold.txt).
  template <int kN>
  __device__ void add(Stat (&s)[kV], const Loaded (&v)[kN]) const {
    ColumnRange<In, Acc, kV> range;
#pragma unroll
    for (int u = 0; u < kN; ++u) range.add(v[u]);
    bool normal = true;
    Acc c[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const Acc m = MaxOp<Acc>()(s[e].max, range.max(e));
      if (!(m == s[e].max)) {
        s[e].sum = rescaled_sum(s[e].sum, s[e].max, m);
        s[e].max = m;
      }
      normal = normal && SoftmaxPolicy<Acc>::exp_is_normal(range.min(e), m);
      c[e] = exp_offset(m);
    }
    with_exp_mode(normal, [&](auto is_normal) {
      constexpr bool kNormal = decltype(is_normal)::value;
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        if (!kNormal && s[e].max == -std::numeric_limits<Acc>::infinity()) continue;  // only -inf so far: exp 0
#pragma unroll
        for (int u = 0; u < kN; ++u) {
          const Acc x = widen<Acc>(v[u], e);
          s[e].sum += offset_exp_for<kNormal>(x, c[e]);
        }
      }
    });
  }
  // kNormal: every exp of v is normal (with_exp_mode).
  template <bool kNormal = false>
  __device__ void apply(const Factor (&f)[kV], const Loaded& v, int64_t at) const {
    Acc o[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const Acc x = widen<Acc>(v, e);
      o[e] = offset_exp_for<kNormal>(x, f[e].offset) * f[e].inv_sum;
    }
    store_pack<Out, Acc, kV>(y + at, o);
  }
};

// Softmax over the middle dim (tiles above). Held shares: the max, its combine, the sum of
// exp(x - max), its combine, the writes from registers. Streamed shares: an online (max, sum)
// fold, its combine, then a second read for the writes. kTwoBlocks: registers for two blocks of
// kInnerThreads an SM (64 a thread), for the launches of such blocks (launch_inner_tiles): held
// 16-bit shares take ~76, so one such block an SM ran its phases (loads, combines, exps, writes)
// with nothing to overlap them; capped, 24-32 bytes spill. H100, bfloat16 forward, us: (2048,
// 8192) over dim 0 51.9 -> 42.5, (16, 2048, 1024) over dim 1 89.1 -> 74.0. The cap for every
// held plain block of several rows of threads (four of 256 an SM) lost 5-13 us on (1024, 65536),
// (32, 1024, 1024), (64, 256, 4096) and (128, 128, 128, 32) (h100_study/session33_combine_warps.txt).
// Elsewhere the bound stays unset (a minimum of 0 blocks: a minimum of 1 made ptxas take more
// registers in the streamed kernels: 64 -> 87).
template <typename In, typename Out, typename Acc, int kV, int kHold, bool kCluster, bool kTwoBlocks = false>
__global__ void __launch_bounds__(kInnerThreads, kTwoBlocks ? 2 : 0)
    softmax_inner_kernel(const In* __restrict__ x, Out* __restrict__ y, InnerGeometry g, int64_t tiles_per_outer) {
  using Policy = SoftmaxInner<In, Out, Acc, kV>;
  __shared__ TileScratch<std::conditional_t<(kHold > 0), Acc, RowPartial<Acc>>, kV, kCluster> s;
  const Policy policy{x, y};
  const TileShare share = TileShare::of<kCluster>(g.cols);
  int phase = 0;
  for_each_tile<kCluster, kV>(g, tiles_per_outer, [&](const InnerTileItem& it) {
    auto get = [&](int64_t k) { return policy.load(it.base + k * g.inner); };
    Pack<In, kV> held[kHold > 0 ? kHold : 1];
    typename Policy::Factor f[kV];
    bool normal = kHold > 0;  // held: every exp the thread takes is normal (below)
    if constexpr (kHold > 0) {
      // The columns' max (combined over the tile), then their sum of exp(x - max) (again): one
      // exp a value and no rescaling. The online pairs' rescaling diverged often over 8 values
      // and their tree took two exps a value a level (bfloat16 32 x 1024 x 1024 over dim 1: 30%
      // of copy). The exps are the ex2 unit alone where the thread's every value is within 87 of
      // its column's max (with_exp_mode, as the rows').
      Acc m[kV], sum[kV], offset[kV];
      ColumnRange<In, Acc, kV> range;
      if (it.active) {
        share.load(held, get);
        share.each<kHold>(held, get, [&](const Pack<In, kV>& v, int64_t) { range.add(v); });
      }
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        m[e] = range.max(e);
        sum[e] = Acc(0);
      }
      combine_tile(m, s, phase, MaxOp<Acc>());
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        offset[e] = exp_offset(m[e]);
        normal = normal && SoftmaxPolicy<Acc>::exp_is_normal(range.min(e), m[e]);
      }
      if (it.active) {
        with_exp_mode(normal, [&](auto is_normal) {
          share.each<kHold>(held, get, [&](const Pack<In, kV>& v, int64_t) {
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              const Acc x = widen<Acc>(v, e);
              sum[e] += offset_exp_for<decltype(is_normal)::value>(x, offset[e]);
            }
          });
        });
      }
      combine_tile(sum, s, phase, SumOp<Acc>());
      if (!it.active) return;
#pragma unroll
      for (int e = 0; e < kV; ++e) f[e] = {offset[e], Acc(1) / sum[e]};  // an all -inf column: NaN, as torch
    } else {
      RowPartial<Acc> p[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) p[e] = Policy::identity();
      if (it.active) share.rounds(get, Policy::absent(), [&](const Pack<In, kV> (&v)[kColsRound]) { policy.add(p, v); });
      combine_tile(p, s, phase, OnlineSoftmaxOp<Acc>());
      if (!it.active) return;
#pragma unroll
      for (int e = 0; e < kV; ++e) f[e] = policy.finish(p[e]);
    }
    with_exp_mode(normal, [&](auto is_normal) {
      share.each<kHold>(held, get, [&](const Pack<In, kV>& v, int64_t k) {
        policy.template apply<decltype(is_normal)::value>(f, v, it.base + k * g.inner);
      });
    });
  });
}

// ---- Split inner-dim kernels ------------------------------------------------------------------
// Softmax (and its backward) over the middle dim when the tiles are too few to fill the GPU and
// the cols many (e.g. 65536 x 64 over dim 0: one 128-byte tile). Two launches over the same work
// items, reduce_cols_kernel's (column_fold.cuh's ColsArgs over (outer, cols, inner): a block
// takes blockDim.x packs of kV adjacent columns and a segment of `chunk` cols, its rows of
// threads taking turns over the segment, four rows' loads in flight):
//   inner_split_fold_kernel   folds each column's segment into a statistic, the segments' folded
//                             as a column reduction's (fold_segments: last block of a group,
//                             then of the groups, in a fixed order), and writes the column's
//                             factor (P::finish) to `factors`;
//   inner_split_apply_kernel  writes each element from its column's factor.
// Two reads (the second from L2 where the input fits: 50 MB on the H100), one write, and the
// whole GPU busy however few the columns. Tried and dropped (h100_study/session31_split_clusters.txt):
// the fold launch on clusters of 4-16 blocks, each cluster combining its segments through
// distributed shared memory into one partial row, no counters, and each apply block folding its
// tile's partial rows. Slower everywhere (bfloat16 65536 x 64 over dim 0: 34.8 -> 43.5 us at 8
// blocks, 38.7 at 4): the fold launch took as long as with the last-block folds (ncu 30.9 against
// 31.9 us; torch's own sum over dim 0 of those 8 MB takes 29.3 there), and the apply launch's
// fold of the partials added 8-10 us (128 registers a thread, the loads waiting for it). Also
// dropped (session 36, h100_study/session36_split_pdl.txt): the apply launched as a programmatic
// dependent of the fold, as the row split's is. A single call gained up to 1.4 us (float32
// 16384 x 256 backward 40.3 -> 38.9), but back to back in a CUDA graph 4 of 6 shapes lost up to
// 1.25 us (that backward 31.5 -> 32.75, bfloat16 8192 x 4096 81.3 -> 82.2); taking the items last
// to first gained nothing either.
//
// A policy P (kV columns a thread) gives Stat (a column's running statistic), static identity()
// and fold(Stat, Stat), Factor and finish(Stat), Loaded and load(offset) (the input packs at
// element offset o * cols * inner + k * inner + i), absent() (a row that adds nothing),
// add(Stat (&)[kV], const Loaded (&)[kN]) (adds a round of rows) and
// apply(const Factor (&)[kV], Loaded, offset) (writes the outputs there).
constexpr int kInnerSplitThreads = 256;

// A policy's fold as a column reducer (column_fold.cuh's R).
template <typename P>
struct StatFold {
  using Acc = typename P::Stat;
  __device__ static Acc identity() { return P::identity(); }
  __device__ Acc operator()(const Acc& a, const Acc& b) const { return P::fold(a, b); }
};

// Work item w of a split inner launch: w = (seg * outer + o) * tiles + tile; the thread's place
// in the tile as the tiles' (i, base, active).
struct InnerSplitItem : InnerTileItem {
  int64_t seg, o, tile;
  TileShare share;  // the thread's cols of the segment

  template <int kV>
  __device__ __forceinline__ static InnerSplitItem of(const ColsArgs& a, int64_t w) {
    InnerSplitItem it;
    it.tile = w % a.tiles;
    const int64_t so = w / a.tiles;
    it.o = so % a.outer;
    it.seg = so / a.outer;
    static_cast<InnerTileItem&>(it) = InnerTileItem::at<kV>(it.tile, it.o * a.outer_stride, a.inner);
    const int64_t r0 = it.seg * a.chunk;
    it.share = {r0 + threadIdx.y, blockDim.y, a.reduced - r0 < a.chunk ? a.reduced : r0 + a.chunk};
    return it;
  }
};

template <typename P, int kV>
__global__ void __launch_bounds__(kInnerSplitThreads)
    inner_split_fold_kernel(P p, ColsArgs a, ColsScratch<typename P::Stat> scratch,
                            typename P::Factor* __restrict__ factors) {
  using Stat = typename P::Stat;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Stat* smem = reinterpret_cast<Stat*>(smem_raw);  // [blockDim.y][blockDim.x][kV]
  __shared__ bool last;
  const int64_t items = a.splits * a.outer * a.tiles;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const InnerSplitItem it = InnerSplitItem::of<kV>(a, w);
    Stat acc[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) acc[e] = P::identity();
    if (it.active) {
      it.share.rounds([&](int64_t k) { return p.load(it.base + k * a.inner); }, P::absent(),
                      [&](const typename P::Loaded (&v)[kColsRound]) { p.add(acc, v); });
    }
    const int64_t col = it.o * a.inner + it.i;
    if (!fold_segments(acc, a, scratch, it.seg, it.o * a.tiles + it.tile, col, it.active, smem, &last, StatFold<P>())) {
      continue;
    }
    if (threadIdx.y == 0 && it.active) {
#pragma unroll
      for (int e = 0; e < kV; ++e) factors[col + e] = p.finish(acc[e]);
    }
  }
}

template <typename P, int kV>
__global__ void __launch_bounds__(kInnerSplitThreads)
    inner_split_apply_kernel(P p, ColsArgs a, const typename P::Factor* __restrict__ factors) {
  const int64_t items = a.splits * a.outer * a.tiles;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const InnerSplitItem it = InnerSplitItem::of<kV>(a, w);
    if (!it.active) continue;
    typename P::Factor f[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) f[e] = factors[it.o * a.inner + it.i + e];
    typename P::Loaded none[1];
    it.share.each<0>(none, [&](int64_t k) { return p.load(it.base + k * a.inner); },
                     [&](const typename P::Loaded& v, int64_t k) { p.apply(f, v, it.base + k * a.inner); });
  }
}

}  // namespace cuda
}  // namespace reduce_ops
