// Device building blocks shared by every CUDA kernel: vector packs, warp and block all-reduce.
// No knowledge of tensors or torch here (only c10's 16-bit number types).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/numeric.h"

namespace reduce_ops {
namespace cuda {

constexpr int kWarpSize = 32;

// kVec elements moved by one memory access (16 bytes at the widest).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// Elements of T in one 16-byte access.
template <typename T>
constexpr int kMaxVec = 16 / sizeof(T);

// Element k of a pack of kVec In values held as 32-bit words (little-endian: element 0 in the
// low bits), widened to Acc with bit operations. Packs are kept as words because a half /
// bfloat16 array lives one element per 32-bit register (twice the registers, and spills).
template <typename In, typename Acc, int kWords>
__device__ __forceinline__ Acc widen_element(const uint32_t (&w)[kWords], int k) {
  if constexpr (std::is_same_v<In, float>) {
    return static_cast<Acc>(__uint_as_float(w[k]));
  } else if constexpr (std::is_same_v<In, double>) {
    return static_cast<Acc>(__hiloint2double(static_cast<int>(w[2 * k + 1]), static_cast<int>(w[2 * k])));
  } else if constexpr (std::is_same_v<In, c10::BFloat16>) {
    return static_cast<Acc>(__uint_as_float(k % 2 ? w[k / 2] & 0xffff0000u : w[k / 2] << 16));
  } else {
    static_assert(std::is_same_v<In, c10::Half>, "float, double, half or bfloat16");
    return static_cast<Acc>(__half2float(__ushort_as_half(static_cast<unsigned short>(w[k / 2] >> (16 * (k % 2))))));
  }
}

// Element k of a Pack held in registers (a local copy: through a reference to global memory the
// word copy below would read bytes), widened to Acc. 16-bit packs go through their 32-bit
// words: the bfloat16 element of a word's high half is one AND of the word, where a conversion
// of the element itself first moves it to the low half (two instructions instead of one; the
// column sums of bfloat16 issue a conversion per element loaded: 442368 x 128 over dim 0,
// 40.3 -> 39.5 us on the H200). The group and split row kernels keep the plain conversion:
// with this one, ptxas interleaved the warp-per-row kernel's 8 loads with the arithmetic, one
// or two in flight instead of 4 (16384 x 4096 bfloat16 sums 36 -> 43 us); the block kernel
// widens (reduce.cuh's reduce_rows_block_kernel).
template <typename Acc, typename In, int kVec>
__device__ __forceinline__ Acc widen(const Pack<In, kVec>& p, int k) {
  if constexpr (sizeof(In) == 2 && kVec % 2 == 0) {
    uint32_t w[kVec / 2];
    memcpy(w, &p, sizeof(w));
    return widen_element<In, Acc>(w, k);
  } else {
    return static_cast<Acc>(p.v[k]);
  }
}

// Packed 16-bit max / min (sm_80+; older targets fold floats): row_norm.cuh's MaxFold and
// column max, reduce.cuh's 16-bit maxes.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kPackedMinMax = false;
#else
constexpr bool kPackedMinMax = true;
#endif
// Packed 16-bit max (kMax: NaN-propagating) or min (NaN skipped, as fmin) of two words, each
// half one value: bfloat16x2 or half2.
template <typename In, bool kMax>
__device__ __forceinline__ uint32_t packed_extreme(uint32_t a, uint32_t b) {
  constexpr bool kBf16 = std::is_same_v<In, c10::BFloat16>;
  uint32_t r;
  if constexpr (kMax && kBf16) asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else if constexpr (kMax) asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else if constexpr (kBf16) asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

inline bool is_aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// __shfl_xor_sync for any trivially copyable value whose size is a multiple of 4 bytes
// (numbers, and small structs such as a compensated sum), word by word; `members`: the lanes
// that take part (each of them must call it), by default the whole warp.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int mask, int width, unsigned members = 0xffffffffu) {
  if constexpr (std::is_arithmetic_v<T>) {
    return __shfl_xor_sync(members, v, mask, width);
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffled values are whole 32-bit words");
    unsigned words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) words[i] = __shfl_xor_sync(members, words[i], mask, width);
    memcpy(&v, words, sizeof(T));
    return v;
  }
}

// A 16-byte load of data read once (ld.global.cs, "cache streaming": its lines go into the L1 and
// the L2 first in line for eviction, so the stream does not push out what others left there).
// For the reductions' staged and tiny rows (reduce.cuh), where it made them 2-17% faster than
// plain (read-only) loads on the H200 (h200_study/session87.txt, section 6).
template <typename T>
__device__ __forceinline__ T load_streaming(const T* p) {
  static_assert(sizeof(T) == 16, "one 16-byte pack");
  const uint4 w = __ldcs(reinterpret_cast<const uint4*>(p));
  T v;
  memcpy(&v, &w, sizeof(T));
  return v;
}

// A load through L2 only (never a possibly stale L1 line), for data other blocks wrote during
// this kernel; any trivially copyable value of whole 32-bit words.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, uint4>) {  // one load instruction
    return __ldcg(p);
  } else {
    static_assert(sizeof(T) % 4 == 0, "loaded values are whole 32-bit words");
    unsigned words[sizeof(T) / 4];
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) words[i] = __ldcg(reinterpret_cast<const unsigned*>(p) + i);
    T v;
    memcpy(&v, words, sizeof(T));
    return v;
  }
}

// One element, or a pack of 4, 8 or 16 bytes, by the read-only path (ld.global.nc, __ldg): __ldg has
// no overload for at::Half, at::BFloat16 or Pack, so those load as a word of their size.
template <typename T>
__device__ __forceinline__ T load_read_only(const T* p) {
  if constexpr (std::is_arithmetic_v<T>) {
    return __ldg(p);
  } else {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                  "a 16-bit element or a 4-, 8- or 16-byte pack");
    using Word = std::conditional_t<
        sizeof(T) == 2, unsigned short,
        std::conditional_t<sizeof(T) == 4, unsigned, std::conditional_t<sizeof(T) == 8, uint2, uint4>>>;
    const Word w = __ldg(reinterpret_cast<const Word*>(p));
    T v;
    memcpy(&v, &w, sizeof(T));
    return v;
  }
}

// A 16-byte read-only load (ld.global.nc) for kernels that issue every load before their first
// fold: a load past the data reads a clamped address, and the fold selects the identity for it
// with select_pack, so that the loaded value is used on every path and no load is predicated.
// With a predicate a load, ptxas ran out of predicate registers (7) at 8 packs a thread and
// issued the last loads after the first packs' folds (a second memory round trip;
// reduce_few_rows_kernel's float32 amax of 1024 elements, 2 of 8), and where a fold sat in a
// branch per pack, each load came after the fold of the pack before. Where the fold itself was
// conditional, the compiler moved even this asm load into the branch.
template <typename T>
__device__ __forceinline__ T load_pinned(const T* p) {
  static_assert(sizeof(T) == 16, "one 16-byte pack");
  uint32_t w[4];
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "l"(p));
  T v;
  memcpy(&v, w, sizeof(T));
  return v;
}

// One arrival at a device-wide counter: returns its count before this one. Acquire-release at
// GPU scope: stores the block made before a __syncthreads() that precedes the call are visible to
// whichever block sees the count this arrival makes (release, cumulative through the barrier, as
// CUTLASS's split-K semaphores rely on), and the caller sees every store released by the arrivals
// it counts (acquire; a __syncthreads() after the call extends that to its block). One fence
// (MEMBAR.ALL.GPU) where __threadfence() put a sequentially consistent one (MEMBAR.SC.GPU) before
// the atomic and another after it.
__device__ __forceinline__ unsigned arrive_acq_rel(unsigned* counter) {
  unsigned old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

// ---- Published partials: a split row's last block finds them by a flag, not by a fence ----------
//
// A split row's blocks each publish a partial and arrive at the row's counter; the block whose
// arrival completes the count folds them. With arrive_acq_rel the partial is a plain store that the
// atomic's release orders before the count: the arriving thread waits for the store's round trip
// to the L2 (MEMBAR.ALL.GPU) before its atomic can go, a round trip the last block pays once more
// after its data. Published, each 32-bit word of the partial travels in a 64-bit slot with a flag
// in its high half (one single-copy-atomic store), the arrival is a relaxed atomic issued right
// behind it, and the last block reads the slots until every flag is up: a slot whose store is
// still on its way is read again. Slots are zero when the kernel starts (zeroed_slots, reduce.cu)
// and the last block puts each back to zero once read, so that a flag up is always this launch's.
using Slot = unsigned long long;

// Slots a partial of type Acc takes: one for each of its 32-bit words.
template <typename Acc>
constexpr int kSlotWords = static_cast<int>(sizeof(Acc) / 4);

constexpr Slot kSlotFlag = Slot{1} << 32;

__device__ __forceinline__ void store_slot(Slot* p, Slot v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ Slot load_slot(const Slot* p) {
  Slot v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Publishes v in slots[0, kSlotWords<Acc>).
template <typename Acc>
__device__ __forceinline__ void publish_partial(Slot* slots, const Acc& v) {
  static_assert(sizeof(Acc) % 4 == 0, "partials are whole 32-bit words");
  unsigned words[kSlotWords<Acc>];
  memcpy(words, &v, sizeof(Acc));
#pragma unroll
  for (int i = 0; i < kSlotWords<Acc>; ++i) store_slot(slots + i, kSlotFlag | words[i]);
}

// One arrival at a device-wide counter, ordering nothing: returns its count before this one. For
// published partials, which need no order (their flags say when they are there).
__device__ __forceinline__ unsigned arrive_relaxed(unsigned* counter) {
  unsigned old;
  asm volatile("atom.add.relaxed.gpu.global.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

// All-reduce over aligned groups of kWidth consecutive lanes (kWidth a power of two <= 32).
// Every lane of the warp must call it; each lane gets its group's result.
template <int kWidth, typename Acc, typename Op>
__device__ __forceinline__ Acc warp_all_reduce(Acc v, Op op) {
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) v = op(v, shfl_xor(v, mask, kWidth));
  return v;
}

// All-reduce over the whole block (blockDim.x a multiple of 32, at most 1024, 1-D).
// Every thread must call it (it holds __syncthreads); every thread gets the result.
// Back-to-back calls are safe: the result slot is rewritten only after all threads passed the
// barrier that follows every thread's read of the previous result.
template <typename Acc, typename Op>
__device__ __forceinline__ Acc block_all_reduce(Acc v, Op op) {
  __shared__ Acc warp_results[kWarpSize];
  __shared__ Acc result;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_all_reduce<kWarpSize>(v, op);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    Acc w = lane < blockDim.x / kWarpSize ? warp_results[lane] : Op::identity();
    w = warp_all_reduce<kWarpSize>(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// exp(x - m) for the values x of a row against one m, as 2^(x log2(e) - c) with
// c = exp_offset(m) = RN(m log2(e)): one fma ahead of the ex2 per value, where (x - m) * log2(e)
// took a subtraction and a multiply. c's rounding is a factor 2^(m log2(e) - c) common to every
// exp taken against that c, and a sum moved between maxes (exp_between) moves by 2^(c - c') of
// the same offsets, so the factor cancels in softmax's normalization; each exp's argument is one
// correctly rounded fma (against two roundings before). __fmul_rn / __fmaf_rn: no contraction
// may round c differently at different uses. Double keeps exp(x - m). H200 A/B against the
// subtraction and multiply (bench.py's softmax grid, twice): bfloat16 1024 x 262144 78.0% ->
// 79.8% of copy, every other case within 1% (9% fewer instructions in the cluster kernel).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_offset(float m) { return __fmul_rn(m, kLog2e); }
__device__ __forceinline__ double exp_offset(double m) { return m; }
__device__ __forceinline__ float offset_exp(float x, float c) { return exp2f(__fmaf_rn(x, kLog2e, -c)); }
__device__ __forceinline__ double offset_exp(double x, double c) { return exp(x - c); }
// offset_exp(x, c) where exp(x - m) > 2^-126 (x > m - 87; the fma's argument stays above -126
// by far more than c's rounding): the ex2 unit alone, which is what exp2f computes there, without
// exp2f's compare and two predicated multiplies for subnormal results (on bfloat16 softmax rows,
// half the instructions of an exp; the kernels are issue-bound there).
__device__ __forceinline__ float normal_offset_exp(float x, float c) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmaf_rn(x, kLog2e, -c)));
  return e;
}
__device__ __forceinline__ double normal_offset_exp(double x, double c) { return exp(x - c); }
// offset_exp, or normal_offset_exp where kNormal (the caller knows every exp is normal: a
// with_exp_mode branch).
template <bool kNormal, typename Acc>
__device__ __forceinline__ Acc offset_exp_for(Acc x, Acc c) {
  return kNormal ? normal_offset_exp(x, c) : offset_exp(x, c);
}
// exp(m - new_m) as the ratio of the offsets' powers, 2^(exp_offset(m) - exp_offset(new_m)):
// what moves a sum of offset_exp(x, exp_offset(m)) to new_m.
template <typename Acc>
__device__ __forceinline__ Acc exp_between(Acc m, Acc new_m) {
  if constexpr (std::is_same_v<Acc, float>) return exp2f(exp_offset(m) - exp_offset(new_m));
  else return exp(m - new_m);
}

// x / s for every x of a row that shares one scale s, without a division per element.
// Markstein's correction: with inv = RN(1/s) and q = RN(x * inv), r = x - q * s is exact (fma),
// and RN(q + r * inv) is the correctly rounded x / s while r does not underflow. The per-row
// setup brings s to [1, 2) by a power of two `pre` (x and s both multiplied: exact, and
// x * pre <= s * pre < 2), so r stays exact down to results of ~2^-100 (float), and 1/s never
// overflows. Special rows need no branch per element: s == 0 (all x are +-0) and s == inf use
// inv = s' = 0, so out = x * 0 (0, or NaN for x = inf, as x / inf); s = NaN gives NaN. The
// ReduceScale rule "a row whose scale is 0 gives 0" holds: x is +-0 there and out is +0.
template <typename Acc>
struct ScaleDivider {
  Acc pre, s, inv;
  __device__ explicit ScaleDivider(Acc scale) {
    const Acc inf = std::numeric_limits<Acc>::infinity();
    const bool regular = scale > Acc(0) && scale < inf;  // false for 0, inf and NaN
    // 2^-exponent(s), at most 2^(max_exponent - 1) so that it is finite (subnormal s land in
    // [2^-23, 1) for float: still far from underflow).
    if constexpr (std::is_same_v<Acc, float>) {
      // From the exponent bits: ilogbf and scalbnf cost ~30 instructions, paid by every lane
      // of every row (16 lanes share a 128-column bfloat16 row).
      const unsigned biased = (__float_as_uint(scale) >> 23) & 0xffu;
      unsigned bits = 0x3f800000u;  // 1: not regular
      if (regular) {
        if (biased == 0) bits = 254u << 23;             // subnormal s: 2^127
        else if (biased == 254) bits = 0x00400000u;     // s in [2^127, 2^128): 2^-127 (subnormal)
        else bits = (254u - biased) << 23;              // 2^(127 - biased)
      }
      pre = __uint_as_float(bits);
    } else {
      constexpr int kMaxShift = std::numeric_limits<Acc>::max_exponent - 1;
      int shift = regular ? -ilogb(scale) : 0;
      shift = shift < kMaxShift ? shift : kMaxShift;
      pre = scalbn(1.0, shift);
    }
    s = (scale == Acc(0) || scale == inf) ? Acc(0) : scale * pre;  // NaN stays NaN
    inv = s == Acc(0) ? Acc(0) : Acc(1) / s;
  }
  __device__ __forceinline__ Acc operator()(Acc x) const {
    const Acc xs = x * pre;
    const Acc q = xs * inv;
    return fma(fma(-q, s, xs), inv, q);
  }
};

#if __CUDA_ARCH__ >= 800
// The L2 cache policy that marks every line an access touches to leave the L2 after others
// (createpolicy, fraction 1.0): the operand of load_evict_last, store_evict_last and
// bulk_copy_to_shared<true>.
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
#endif

// A 16-byte load (ld.global.v4) marking its line to leave the L1 and the L2 after others
// (L1::evict_last and an L2::evict_last cache policy; a plain load below sm_80). For the rows a
// register row kernel holds from its one read to its one write (row_norm_regs_kernel's
// kLastLoads): with x's lines kept, the L2 gives up the output's dirty lines first as it makes
// room, and the row kernels moved their bytes 2-4% faster (softmax_launch.h's launch_block).
template <typename T>
__device__ __forceinline__ T load_evict_last(const T* p) {
  static_assert(sizeof(T) == 16, "one 16-byte pack");
#if __CUDA_ARCH__ >= 800
  uint32_t w[4];
  asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "l"(p), "l"(l2_evict_last_policy()));
  T v;
  memcpy(&v, w, sizeof(T));
  return v;
#else
  return *p;
#endif
}

// *p = v, the line marked to leave the L2 after others (an L2::evict_last cache policy; a plain
// store below sm_80). For a small output written a few bytes at a time beside a large streamed
// one: ReduceScale's scale, 4 bytes a row, 1/128 of the bytes of a float32 row of 128. Unmarked,
// its lines leave the L2 amid the stream of rows as scattered small writes: H200, float32
// ReduceScale 442368 x 128 took 116.0 us, 114.0 marked, 113.5 with no scale written at all;
// 262144 x 256: 135.9, 134.1, 133.6 (bfloat16 and rows of 64 and 197: unchanged within 0.1 us).
// Lines that stay are what the scale's reader (a quantized matmul) loads next.
template <typename T>
__device__ __forceinline__ void store_evict_last(T* p, T v) {
#if __CUDA_ARCH__ >= 800
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "32-, 64- or 128-bit values");
  const uint64_t policy = l2_evict_last_policy();
  if constexpr (sizeof(T) == 16) {
    uint32_t w[4];
    memcpy(w, &v, sizeof(w));
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3]), "l"(policy) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    uint32_t w;
    memcpy(&w, &v, sizeof(w));
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(p), "r"(w), "l"(policy) : "memory");
  } else {
    uint64_t w;
    memcpy(&w, &v, sizeof(w));
    asm volatile("st.global.L2::cache_hint.b64 [%0], %1, %2;" ::"l"(p), "l"(w), "l"(policy) : "memory");
  }
#else
  *p = v;
#endif
}

// Programmatic dependent launch (sm_90+; no-ops below, and in a grid not launched as a dependent).
// A grid that another grid depends on lets it launch once every one of its blocks has called
// allow_dependents(): the dependent's blocks then take SMs as this grid's last blocks leave them.
// The dependent calls wait_for_prerequisite() before it reads anything the earlier grid wrote
// (it returns once that grid has finished and its writes are visible) and before it writes
// anything the earlier grid reads.
__device__ __forceinline__ void allow_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Bulk copies into shared memory (Hopper's TMA, sm_90+) completing on an mbarrier. These helpers
// compile on every target; below sm_90 they trap, and the launchers never ask for them there.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One thread readies `bar` for one arrival per phase; the block must pass a barrier before
// anyone waits on it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// The one arrival of `bar`'s current phase, which then also waits for `bytes` of transfers that
// complete on it (bulk copies, a peer block's store_to_cluster_peer) before it completes.
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// The one arrival of `bar`'s current phase, which then also waits for `bytes` of bulk copies
// (0: the phase completes now), and the copy of `bytes` (a multiple of 16, both addresses
// 16-byte aligned) from global `src` to shared `dst`. The caller's thread issues it after a block
// barrier that follows every thread's last read of `dst` (as CUTLASS's TMA pipelines order a
// stage's reads before its refill: by a barrier, no proxy fence, whose wait for the thread's
// outstanding stores stalled the whole block: H200, 1024 x 262144 softmax).
// kEvictLast: the lines read are marked to leave the L2 after others (load_evict_last's policy).
template <bool kEvictLast = false>
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  mbarrier_arrive_expect(bar, bytes);
  if (bytes > 0) {
    if constexpr (kEvictLast) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
          "%4;\n" ::"r"(shared_address(dst)),
          "l"(src), "r"(bytes), "r"(shared_address(bar)), "l"(l2_evict_last_policy())
          : "memory");
    } else {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       shared_address(dst)),
                   "l"(src), "r"(bytes), "r"(shared_address(bar))
                   : "memory");
    }
  }
#else
  __trap();
#endif
}

// 16 bytes from global `src` to shared `dst` (both 16-byte aligned) without a register between
// (cp.async, sm_80+; a plain copy below): the thread goes on while the copy is in flight, so a
// block's loads all go out at once. copy_async_commit closes the thread's group of copies issued
// since the last; copy_async_wait_prior<N> waits until at most N of its groups are in flight. A
// block barrier after the wait makes everyone's copies visible.
__device__ __forceinline__ void copy_async_16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int kN>
__device__ __forceinline__ void copy_async_wait_prior() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory");
#endif
}

// A tile's copies (the tile kernels, row_norm_tile_kernel and softmax_backward_tile_kernel): its
// `n` elements from global `src` into shared `dst`, both 16-byte aligned, by copy_async_16 (the
// last partial pack an element a thread, plainly), or from shared `src` out to global `dst` by
// 16-byte stores.
template <typename T>
__device__ __forceinline__ void tile_copy_in(T* dst, const T* src, int n) {
  constexpr int kV = 16 / sizeof(T);
  const int whole = n / kV;
  for (int p = threadIdx.x; p < whole; p += blockDim.x) copy_async_16(dst + p * kV, src + p * kV);
  for (int e = whole * kV + threadIdx.x; e < n; e += blockDim.x) dst[e] = src[e];
}

template <typename T>
__device__ __forceinline__ void tile_copy_out(T* dst, const T* src, int n) {
  constexpr int kV = 16 / sizeof(T);
  const int whole = n / kV;
  for (int p = threadIdx.x; p < whole; p += blockDim.x) {
    *reinterpret_cast<uint4*>(dst + p * kV) = *reinterpret_cast<const uint4*>(src + p * kV);
  }
  for (int e = whole * kV + threadIdx.x; e < n; e += blockDim.x) dst[e] = src[e];
}

// The tile kernels' pipeline: the block's tiles (blockIdx.x, + gridDim.x, ...) of `tile_rows`
// consecutive rows of `cols` elements out of `rows` (tile_rows x cols x sizeof(T) a multiple of 16),
// each input's tile copied into shared memory `stages` (two stages of kInputs tiles one after
// another, the next tile's copies in flight while the block works on this one). body(tile, stage,
// n) works on the tile's n elements in `stage` (its first tile holding src0's, the second src1's)
// and leaves the output in the first, which leaves for dst.
template <int kInputs, typename T, typename Body>
__device__ __forceinline__ void run_tile_pipeline(const T* src0, const T* src1, T* dst, int64_t rows, int cols,
                                                  int tile_rows, T* stages, Body body) {
  static_assert(kInputs == 1 || kInputs == 2, "one or two inputs");
  const int tile_elems = tile_rows * cols;
  const int64_t total = rows * cols;
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  auto elements = [&](int64_t tile) {  // the last tile may be short
    return static_cast<int>(total - tile * tile_elems < tile_elems ? total - tile * tile_elems : tile_elems);
  };
  auto load = [&](int64_t tile, T* stage) {
    if (tile >= tiles) return;
    const int n = elements(tile);
    tile_copy_in(stage, src0 + tile * tile_elems, n);
    if constexpr (kInputs == 2) tile_copy_in(stage + tile_elems, src1 + tile * tile_elems, n);
  };
  int phase = 0;
  load(blockIdx.x, stages);
  copy_async_commit();
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, phase ^= 1) {
    T* const stage = stages + phase * kInputs * tile_elems;
    load(tile + gridDim.x, stages + (phase ^ 1) * kInputs * tile_elems);
    copy_async_commit();
    copy_async_wait_prior<1>();  // this tile's copies (the next one's may still be in flight)
    __syncthreads();
    const int n = elements(tile);
    body(tile, stage, n);
    __syncthreads();
    tile_copy_out(dst + tile * tile_elems, stage, n);
    __syncthreads();  // the next round's copies refill this stage
  }
}

// Waits until `bar` completes the phase of parity `phase` (0 for its first phase, then 1, 0...).
// kClusterScope: the waiting thread then also sees what other blocks of the cluster wrote into
// this block's shared memory through transfers that completed on `bar` (store_to_cluster_peer).
template <bool kClusterScope = false>
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned phase) {
#if __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    if constexpr (kClusterScope) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
          "p;\n}\n"
          : "=r"(done)
          : "r"(shared_address(bar)), "r"(phase)
          : "memory");
    } else {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(shared_address(bar)), "r"(phase)
          : "memory");
    }
  } while (!done);
#else
  __trap();
#endif
}

// Thread block clusters (sm_90 and later). These helpers compile on every target; below sm_90
// they trap, and the launchers never pick a cluster kernel there (compute capability < 9).
__device__ __forceinline__ unsigned cluster_blocks() {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().num_blocks();
#else
  __trap();
  return 1;
#endif
}

__device__ __forceinline__ unsigned cluster_block_rank() {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().block_rank();
#else
  __trap();
  return 0;
#endif
}

// Every thread of every block of the cluster must call it (a cluster-wide barrier with release /
// acquire semantics for shared memory).
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();
#endif
}

// The two halves of a cluster-wide barrier: every thread of every block of the cluster arrives,
// then waits (in between it may do work that needs no other block). `release`: the thread's
// shared-memory writes (and mbarrier inits, after fence.mbarrier_init) before its arrival are
// visible to every block of the cluster after the wait; relaxed arrivals do not wait for the
// thread's outstanding global stores. The arrivals are .aligned: warp-uniform calls.
__device__ __forceinline__ void cluster_arrive(bool release) {
#if __CUDA_ARCH__ >= 900
  if (release) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  }
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// A cluster-wide barrier in which only the threads that pass `publish` (warp-uniform) arrive with
// release semantics: their shared-memory writes before it are visible to every block of the
// cluster after it; the other threads' arrivals do not wait for their outstanding global stores.
// Every thread of every block of the cluster must call it.
__device__ __forceinline__ void cluster_barrier(bool publish) {
  cluster_arrive(publish);
  cluster_wait();
}

// Stores `value` (4 or 8 bytes) at `slot` (a __shared__ variable of this block) in the shared
// memory of the cluster's block `rank`, the store completing on that block's `bar` (this block's
// mbarrier's address mapped there): its waiter sees the value once the phase completes
// (mbarrier_wait<true>), with no cluster barrier. `bar` must have been initialized in that block
// before (a cluster barrier after its fence.mbarrier_init).
template <typename T>
__device__ __forceinline__ void store_to_cluster_peer(T* slot, unsigned rank, const T& value, uint64_t* bar) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "one or two 32-bit words");
#if __CUDA_ARCH__ >= 900
  unsigned remote_slot, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote_slot) : "r"(shared_address(slot)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote_bar) : "r"(shared_address(bar)), "r"(rank));
  uint32_t w[sizeof(T) / 4];
  memcpy(w, &value, sizeof(T));
  if constexpr (sizeof(T) == 4) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(remote_slot),
                 "r"(w[0]), "r"(remote_bar)
                 : "memory");
  } else {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\n" ::"r"(
                     remote_slot),
                 "r"(w[0]), "r"(w[1]), "r"(remote_bar)
                 : "memory");
  }
#else
  __trap();
#endif
}

// The address of `p` (a __shared__ variable of this block) in the shared memory of the cluster's
// block `rank`.
template <typename T>
__device__ __forceinline__ const T* cluster_peer(const T* p, unsigned rank) {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(const_cast<T*>(p), rank);
#else
  __trap();
  return p;
#endif
}

// All-reduce of one value per block over the blocks of a cluster (at most 32 blocks). Every
// thread of every block must call it with its block's value (the same in all threads of a block,
// e.g. block_all_reduce's result) and the same `slot`, a __shared__ variable; every thread gets
// the result, bit-identical in all blocks: each warp reads the C slots in rank order (lane = rank)
// and folds them with the same butterfly, so the order is fixed and the result deterministic.
// The slot is written before the barrier and read after it; the caller must not write it again
// until every block has passed its next cluster barrier (alternate two slots if it calls this
// once per iteration).
// Only the slot writer's warp arrives with release semantics; the other warps arrive relaxed, so
// their arrivals do not wait for their outstanding global stores (a full cluster.sync() makes
// every thread's arrival wait for them). The branch is warp-uniform: the arrivals are .aligned.
template <typename Acc, typename Op>
__device__ __forceinline__ Acc cluster_all_reduce(Acc block_value, Acc* slot, Op op) {
#if __CUDA_ARCH__ >= 900
  if (threadIdx.x < kWarpSize) {
    if (threadIdx.x == 0) *slot = block_value;
    __syncwarp();
  }
  cluster_barrier(threadIdx.x < kWarpSize);
  const unsigned lane = threadIdx.x % kWarpSize;
  Acc v = lane < cluster_blocks() ? *cluster_peer(slot, lane) : Op::identity();
  return warp_all_reduce<kWarpSize>(v, op);
#else
  __trap();
  return block_value;
#endif
}

}  // namespace cuda
}  // namespace reduce_ops
