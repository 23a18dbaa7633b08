// Device building blocks shared by every CUDA kernel: vector packs, warp and block all-reduce.
// No knowledge of tensors or torch here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
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

inline bool is_aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// __shfl_xor_sync for any trivially copyable value whose size is a multiple of 4 bytes
// (numbers, and small structs such as a compensated sum), word by word.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int mask, int width) {
  if constexpr (std::is_arithmetic_v<T>) {
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffled values are whole 32-bit words");
    unsigned words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) words[i] = __shfl_xor_sync(0xffffffffu, words[i], mask, width);
    memcpy(&v, words, sizeof(T));
    return v;
  }
}

// A load through L2 only (never a possibly stale L1 line), for data other blocks wrote during
// this kernel; any trivially copyable value of whole 32-bit words.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (std::is_arithmetic_v<T>) {
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

// exp(x) through the ex2 unit with log2(e) folded in for float; exact exp for double.
__device__ __forceinline__ float fast_exp(float x) { return exp2f(x * 1.4426950408889634f); }
__device__ __forceinline__ double fast_exp(double x) { return exp(x); }

}  // namespace cuda
}  // namespace reduce_ops
