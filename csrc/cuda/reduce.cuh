// Reduction algorithms (sum, max, any associative functor) over the strided views of ops.h.
//
//   reduce_rows_group_kernel  kThreadsPerRow (<= 32) lanes per row, many rows per block: short rows.
//   reduce_rows_block_kernel  one block per (row, split): long rows; a row may be split over
//                             several blocks whose partials a second launch combines.
//   reduce_cols_kernel        reduction over an outer dim with the kept dim contiguous: each
//                             thread owns kVec adjacent columns, the block's rows of threads
//                             split the reduced dim.
//
// Every reduction visits its elements in an order fixed by the launch shape, which depends only
// on the problem shape and the device: the result is the same bits on every run.
#pragma once

#include "cuda/primitives.cuh"

namespace reduce_ops {
namespace cuda {

// This thread's partial over the contiguous x[0, n), taking packs tid, tid + nthreads, ...
// The elements before the first 16-byte boundary and the ragged tail are read as scalars, so
// any element-aligned x works. kUnroll packs are in flight per thread.
template <typename Acc, int kVec, int kUnroll, typename In, typename Op>
__device__ __forceinline__ Acc thread_reduce_contiguous(const In* x, int64_t n, int tid, int nthreads,
                                                        Op op) {
  using P = Pack<In, kVec>;
  const int64_t misalign = (reinterpret_cast<uintptr_t>(x) / sizeof(In)) % kVec;
  const int64_t head = misalign == 0 ? 0 : (kVec - misalign < n ? kVec - misalign : n);
  Acc acc = Op::identity();
  for (int64_t i = tid; i < head; i += nthreads) acc = op(acc, static_cast<Acc>(x[i]));
  const P* packs = reinterpret_cast<const P*>(x + head);
  const int64_t npacks = (n - head) / kVec;
  Acc lanes[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) lanes[u] = Op::identity();
  int64_t p = tid;
  for (; p + (kUnroll - 1) * static_cast<int64_t>(nthreads) < npacks; p += kUnroll * nthreads) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = packs[p + u * nthreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) lanes[u] = op(lanes[u], static_cast<Acc>(v[u].v[k]));
    }
  }
  for (; p < npacks; p += nthreads) {
    const P v = packs[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) lanes[0] = op(lanes[0], static_cast<Acc>(v.v[k]));
  }
  for (int64_t i = head + npacks * kVec + tid; i < n; i += nthreads) acc = op(acc, static_cast<Acc>(x[i]));
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) acc = op(acc, lanes[u]);
  return acc;
}

// This thread's partial over x[0], x[stride], ... x[(n - 1) * stride] (scalar loads).
template <typename Acc, typename In, typename Op>
__device__ __forceinline__ Acc thread_reduce_strided(const In* x, int64_t n, int64_t stride, int tid,
                                                     int nthreads, Op op) {
  Acc acc = Op::identity();
  for (int64_t i = tid; i < n; i += nthreads) acc = op(acc, static_cast<Acc>(x[i * stride]));
  return acc;
}

// Rows of a reduction: row r = o * inner + i starts at o * outer_stride + i * inner_stride and
// has `cols` elements `elem_stride` apart. Each row is cut into `splits` segments of `chunk`
// elements; work item w = row * splits + segment writes out[w].
struct RowsArgs {
  int64_t rows, cols, inner;
  int64_t outer_stride, inner_stride, elem_stride;
  int64_t splits, chunk;
  // Every segment starts 16-byte aligned and holds whole packs (set by the launcher).
  bool aligned;
};

template <typename In>
__device__ __forceinline__ const In* segment_start(const In* x, const RowsArgs& a, int64_t w,
                                                   int64_t* n) {
  if (a.splits == 1 && a.inner == 1) {  // plain rows: no 64-bit divisions (costly per short row)
    *n = a.cols;
    return x + w * a.outer_stride;
  }
  const int64_t row = w / a.splits, seg = w % a.splits;
  const int64_t c0 = seg * a.chunk;
  *n = (a.cols - c0 < a.chunk) ? a.cols - c0 : a.chunk;
  return x + (row / a.inner) * a.outer_stride + (row % a.inner) * a.inner_stride + c0 * a.elem_stride;
}

// This thread's partial over whole packs p = tid, tid + nthreads, ... < npacks (x 16-byte
// aligned): the lean path of rows whose starts and lengths are all multiples of kVec.
template <typename Acc, int kVec, int kUnroll, typename In, typename Op>
__device__ __forceinline__ Acc thread_reduce_packs(const In* x, int64_t npacks, int tid, int nthreads, Op op) {
  using P = Pack<In, kVec>;
  const P* packs = reinterpret_cast<const P*>(x);
  Acc lanes[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) lanes[u] = Op::identity();
  for (int64_t p0 = tid; p0 < npacks; p0 += kUnroll * nthreads) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (p0 + u * nthreads < npacks) v[u] = packs[p0 + u * nthreads];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (p0 + u * nthreads < npacks) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) lanes[u] = op(lanes[u], static_cast<Acc>(v[u].v[k]));
      }
    }
  }
#pragma unroll
  for (int u = 1; u < kUnroll; ++u) lanes[0] = op(lanes[0], lanes[u]);
  return lanes[0];
}

template <typename Acc, int kVec, int kUnroll, typename In, typename Op>
__device__ __forceinline__ Acc thread_reduce_segment(const In* seg, int64_t n, const RowsArgs& a,
                                                     int tid, int nthreads, Op op) {
  if (a.aligned) return thread_reduce_packs<Acc, kVec, kUnroll>(seg, n / kVec, tid, nthreads, op);
  return a.elem_stride == 1 ? thread_reduce_contiguous<Acc, kVec, kUnroll>(seg, n, tid, nthreads, op)
                            : thread_reduce_strided<Acc>(seg, n, a.elem_stride, tid, nthreads, op);
}

template <typename In, typename Out, typename Acc, typename Op, int kThreadsPerRow>
__global__ void reduce_rows_group_kernel(const In* __restrict__ x, Out* __restrict__ out, RowsArgs a) {
  static_assert(kThreadsPerRow <= kWarpSize, "a group lives inside one warp");
  const Op op;
  const int64_t items = a.rows * a.splits;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t groups_per_block = blockDim.x / kThreadsPerRow;
  // Whole warps step together so that every lane reaches the shuffles.
  for (int64_t w = blockIdx.x * groups_per_block + threadIdx.x / kThreadsPerRow;
       w - threadIdx.x % kWarpSize / kThreadsPerRow < items; w += gridDim.x * groups_per_block) {
    Acc acc = Op::identity();
    if (w < items) {
      int64_t n;
      const In* seg = segment_start(x, a, w, &n);
      acc = thread_reduce_segment<Acc, kMaxVec<In>, 2>(seg, n, a, lane, kThreadsPerRow, op);
    }
    acc = warp_all_reduce<kThreadsPerRow>(acc, op);
    if (w < items && lane == 0) out[w] = static_cast<Out>(acc);
  }
}

template <typename In, typename Out, typename Acc, typename Op>
__global__ void reduce_rows_block_kernel(const In* __restrict__ x, Out* __restrict__ out, RowsArgs a) {
  const Op op;
  const int64_t items = a.rows * a.splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    int64_t n;
    const In* seg = segment_start(x, a, w, &n);
    Acc acc = thread_reduce_segment<Acc, kMaxVec<In>, 4>(seg, n, a, threadIdx.x, blockDim.x, op);
    acc = block_all_reduce(acc, op);
    if (threadIdx.x == 0) out[w] = static_cast<Out>(acc);
  }
}

// out[(seg * outer + o) * inner + i] = reduce over r in segment seg of
//                                      x[o * outer_stride + r * reduced_stride + i * inner_stride].
// With kVec > 1 the launcher guarantees inner_stride == 1 and 16-byte aligned packs.
struct ColsArgs {
  int64_t outer, reduced, inner;
  int64_t outer_stride, reduced_stride, inner_stride;
  int64_t splits, chunk;  // the reduced dim is cut into `splits` segments of `chunk` rows
};

// Block: blockDim.x threads across columns (kVec each), blockDim.y across the reduced dim.
template <typename In, typename Out, typename Acc, typename Op, int kVec>
__global__ void reduce_cols_kernel(const In* __restrict__ x, Out* __restrict__ out, ColsArgs a) {
  constexpr int kUnroll = 4;
  extern __shared__ unsigned char smem_raw[];
  Acc* partial = reinterpret_cast<Acc*>(smem_raw);  // [blockDim.y][blockDim.x][kVec]
  const Op op;
  const int64_t tile_cols = static_cast<int64_t>(blockDim.x) * kVec;
  const int64_t tiles = (a.inner + tile_cols - 1) / tile_cols;
  const int64_t items = a.splits * a.outer * tiles;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t seg = w / (a.outer * tiles), o = (w / tiles) % a.outer, tile = w % tiles;
    const int64_t i = tile * tile_cols + threadIdx.x * kVec;
    const int64_t r0 = seg * a.chunk, r1 = (a.reduced - r0 < a.chunk) ? a.reduced : r0 + a.chunk;
    Acc acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = Op::identity();
    if (i < a.inner) {
      const In* base = x + o * a.outer_stride + i * a.inner_stride;
      int64_t r = r0 + threadIdx.y;
      const int64_t step = blockDim.y;
      if constexpr (kVec > 1) {
        using P = Pack<In, kVec>;
        for (; r + (kUnroll - 1) * step < r1; r += kUnroll * step) {
          P v[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            v[u] = *reinterpret_cast<const P*>(base + (r + u * step) * a.reduced_stride);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int k = 0; k < kVec; ++k) acc[k] = op(acc[k], static_cast<Acc>(v[u].v[k]));
        }
        for (; r < r1; r += step) {
          const P v = *reinterpret_cast<const P*>(base + r * a.reduced_stride);
#pragma unroll
          for (int k = 0; k < kVec; ++k) acc[k] = op(acc[k], static_cast<Acc>(v.v[k]));
        }
      } else {
        for (; r < r1; r += step) acc[0] = op(acc[0], static_cast<Acc>(base[r * a.reduced_stride]));
      }
    }
    // Combine the blockDim.y partials of each column in a fixed order.
    Acc* mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
    for (int k = 0; k < kVec; ++k) mine[k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && i < a.inner) {
      for (int y = 1; y < blockDim.y; ++y) {
        const Acc* theirs = partial + (y * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = op(acc[k], theirs[k]);
      }
      Out* dst = out + (seg * a.outer + o) * a.inner + i;
#pragma unroll
      for (int k = 0; k < kVec; ++k) dst[k] = static_cast<Out>(acc[k]);
    }
    __syncthreads();
  }
}

}  // namespace cuda
}  // namespace reduce_ops
