// Launch of the reductions: picks kernel, block, grid and split from the view and the device.
//
// Strategies (REDUCE_OPS_STRATEGY forces one where the shape allows, for tests and measurement):
//   short  lanes per row, several rows in flight (aligned short rows; the default for them)
//   group  lanes per row, one row at a time   warp   a warp per row, medium rows
//   block  a block per row                    split  several blocks per row, one launch
//   columns (reduction over an outer dim) is chosen by layout alone.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "common/dispatch.h"
#include "cuda/launch.h"
#include "cuda/reduce.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {
namespace {

// Fewest reduced rows one column-split segment holds. Measured and rejected on the H200:
// splitting the partials' own pass finer (32 rows) added a launch (65536 x 1024 float32 over
// dim 0: 77 -> 86 us; the passes over the partials take ~9 us either way), and combining a
// block's rows of partials a thread per column instead of kVec columns per thread of the first
// row made bfloat16 sums 7-16% slower (float32 and amax within noise or mixed).
constexpr int64_t kMinColsChunk = 256;
// Fewest elements one block of a split row takes: 16 per thread of 256, one unrolled round of
// 16-byte loads in float32, so that a 2^20-element sum still spreads over 256 blocks.
constexpr int64_t kMinReduceChunk = 4096;
// Rows the per-stream counter buffer serves; a split needs rows < sm_count * kBlocksPerSM,
// far fewer.
constexpr int64_t kMaxCounters = 4096;

// Counters for the split kernel's last-block combine, zero whenever a kernel starts. Outside
// graph capture one buffer per (device, stream) serves every launch for the life of the
// process: launches on one stream run in order and each combine resets its counter before it
// ends. Under capture the graph gets its own zeroed buffer (a fill node): a buffer shared with
// eager launches could be in use by one on another stream while the graph replays.
unsigned* zeroed_counters(int64_t n, const at::Tensor& like, cudaStream_t stream, at::Tensor& graph_owned) {
  TORCH_INTERNAL_ASSERT(n <= kMaxCounters);
  const auto opts = like.options().dtype(at::kInt);
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    graph_owned = at::zeros({n}, opts);
    return reinterpret_cast<unsigned*>(graph_owned.mutable_data_ptr<int>());
  }
  static std::mutex mutex;
  // Never destroyed: freeing device memory at process exit can outlive the allocator.
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = (*buffers)[{like.get_device(), stream}];
  if (!buffer.defined()) buffer = at::zeros({kMaxCounters}, opts);  // on `stream`: ordered before use
  return reinterpret_cast<unsigned*>(buffer.mutable_data_ptr<int>());
}

// Every segment starts on a 16-byte boundary and holds whole packs: the lean load path.
template <typename In>
bool segments_aligned(const In* x, const RowsArgs& a) {
  constexpr int kVec = kMaxVec<In>;
  const int64_t seg_len = a.splits > 1 ? a.chunk : a.cols;
  return a.elem_stride == 1 && is_aligned(x, 16) && a.cols % kVec == 0 && seg_len % kVec == 0 &&
         a.outer_stride % kVec == 0 && (a.inner == 1 || a.inner_stride % kVec == 0);
}

// One work item per row.
template <typename In, typename Out, typename R>
void launch_rows_unsplit(const In* x, Out* out, RowsArgs a, const R& r, cudaStream_t stream,
                         const ForcedStrategy& forced) {
  a.aligned = segments_aligned(x, a);
  const int64_t packs = ceil_div(a.cols, a.elem_stride == 1 ? kMaxVec<In> : 1);
  auto group = [&](auto width_tag, auto unroll_tag) {
    constexpr int kWidth = decltype(width_tag)::value, kUnroll = decltype(unroll_tag)::value;
    reduce_rows_group_kernel<In, Out, R, kWidth, kUnroll>
        <<<grid_for(ceil_div(a.rows, kBlock / kWidth)), kBlock, 0, stream>>>(x, out, a, r);
  };
  // Short rows: lanes per row so that each lane reads at most 4 packs, all in flight at once.
  // Medium rows (up to 32 packs a lane), when the rows fill the GPU with warps: a warp per row
  // with 8 packs in flight a lane; a block per row pays two barriers a row and held one pack
  // a thread (H200, 65536 x 1024 float32 by block per row: 46% of copy).
  const bool many_rows = a.rows >= 32 * sm_count();
  if (a.aligned && a.inner == 1 && packs <= 32 && !forced.is("block") && !forced.is("group")) {
    // Short aligned rows: a pack per lane per row, 4 rows in flight per lane (8 for groups of 4
    // lanes). H200, 442368 x 128: 8 rows for 32-lane groups took float32 amax from 85% to 68% of
    // copy and left bfloat16 at 71%.
    auto rows = [&](auto width_tag, auto rows_tag) {
      constexpr int kWidth = decltype(width_tag)::value, kRows = decltype(rows_tag)::value;
      reduce_short_rows_kernel<In, Out, R, kWidth, kRows>
          <<<ceil_div(a.rows, kRows * (kBlock / kWidth)), kBlock, 0, stream>>>(x, out, a, r);
    };
    if (packs <= 4) return rows(Int<4>{}, Int<8>{});
    if (packs <= 8) return rows(Int<8>{}, Int<4>{});
    if (packs <= 16) return rows(Int<16>{}, Int<4>{});
    return rows(Int<32>{}, Int<4>{});
  }
  if (!forced.is("block")) {
    if (packs <= 16) return group(Int<4>{}, Int<4>{});
    if (packs <= 32) return group(Int<8>{}, Int<4>{});
    if (packs <= 64) return group(Int<16>{}, Int<4>{});
    if (packs <= 128) return group(Int<32>{}, Int<4>{});
    if ((packs <= 32 * 32 && many_rows) || forced.is("warp")) return group(Int<32>{}, Int<8>{});
  }
  reduce_rows_block_kernel<In, Out, R, 4><<<grid_for(a.rows), kBlock, 0, stream>>>(x, out, a, r);
}

// Rows: few long rows (and whole-tensor reductions, one row) are split over blocks in one
// launch; otherwise a work item per row.
template <typename In, typename Out, typename R>
void launch_rows(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                 cudaStream_t stream, const ForcedStrategy& forced) {
  using Acc = typename R::Acc;
  const In* x = xt.const_data_ptr<In>();
  Out* out = out_t.mutable_data_ptr<Out>();
  RowsArgs a{g.outer * g.inner, g.reduced, g.inner, g.outer_stride, g.inner_stride, g.reduced_stride, 1, g.reduced,
             false};
  const bool few_rows = a.rows < sm_count() * kBlocksPerSM;
  if (few_rows && a.cols >= 2 * kMinReduceChunk) {
    const RowSplit plan = split_rows(a.rows, a.cols, kMinReduceChunk);
    a.splits = plan.splits;
    a.chunk = plan.chunk;
  } else if (forced.is("split") && a.rows <= kMaxCounters) {
    // Smallest segments (one pack-aligned 64-element chunk), so that small test shapes split.
    a.chunk = 64;
    a.splits = ceil_div(a.cols, a.chunk);
  }
  if (a.splits == 1) {
    launch_rows_unsplit(x, out, a, r, stream, forced);
  } else {
    a.aligned = segments_aligned(x, a);
    const at::Tensor partial =
        at::empty({a.rows * a.splits * static_cast<int64_t>(sizeof(Acc))}, xt.options().dtype(at::kByte));
    at::Tensor graph_owned;
    unsigned* counters = zeroed_counters(a.rows, xt, stream, graph_owned);
    reduce_rows_split_kernel<In, Out, R, 4><<<grid_for(a.rows * a.splits), kBlock, 0, stream>>>(
        x, out, a, reinterpret_cast<Acc*>(partial.mutable_data_ptr()), counters, r);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Columns: lanes across columns (kVec each), the rest of the block across the reduced dim.
struct ColsLaunch {
  int bx, by;  // block shape
  int vec;
};

template <typename In>
ColsLaunch cols_launch(const ColsArgs& a, const void* x) {
  constexpr int kVec = kMaxVec<In>;
  const bool vectorize = a.inner_stride == 1 && a.inner % kVec == 0 && a.outer_stride % kVec == 0 &&
                         a.reduced_stride % kVec == 0 && is_aligned(x, 16);
  ColsLaunch l{1, 1, vectorize ? kVec : 1};
  // Up to 8 rows of threads along the reduced dim, each reading at least 16 rows; then lanes
  // across the columns for the rest of the block, then more rows of threads if the columns
  // run out. A block 256 columns wide left 65536 x 1024 float32 over dim 0 with 8 blocks and
  // a split of 256 (H200: 43% of copy); 32 x 8 gave 79%.
  while (l.by < 8 && static_cast<int64_t>(l.by) * 2 * 16 <= a.chunk) l.by *= 2;
  while (l.bx * l.by < kBlock && static_cast<int64_t>(l.bx) * l.vec < a.inner) l.bx *= 2;
  while (l.bx * l.by < kBlock && static_cast<int64_t>(l.by) * 2 * 16 <= a.chunk) l.by *= 2;
  return l;
}

template <typename In, typename Out, typename R>
void launch_cols_pass(const In* x, Out* out, const ColsArgs& a, const ColsLaunch& l, const R& r,
                      cudaStream_t stream) {
  const dim3 block(l.bx, l.by);
  const int64_t tiles = ceil_div(a.inner, static_cast<int64_t>(l.bx) * l.vec);
  const int64_t grid = grid_for(a.splits * a.outer * tiles);
  const size_t smem = sizeof(typename R::Acc) * l.bx * l.by * l.vec;
  if (l.vec > 1) reduce_cols_kernel<In, Out, R, kMaxVec<In>><<<grid, block, smem, stream>>>(x, out, a, r);
  else reduce_cols_kernel<In, Out, R, 1><<<grid, block, smem, stream>>>(x, out, a, r);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Columns: when the kept columns are too few to fill the GPU, the reduced dim is split over
// blocks (partials in the reducer's Value type, then the partials reduced the same way).
template <typename In, typename Out, typename R>
void launch_cols(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, const R& r,
                 cudaStream_t stream, const ForcedStrategy& forced) {
  using V = typename R::Value;
  ColsArgs a{g.outer, g.reduced, g.inner, g.outer_stride, g.reduced_stride, g.inner_stride, 1, g.reduced};
  const int64_t target_blocks = sm_count() * kBlocksPerSM;
  const int64_t columns = g.outer * g.inner;
  ColsLaunch l = cols_launch<In>(a, x.const_data_ptr());
  const int64_t blocks = g.outer * ceil_div(g.inner, static_cast<int64_t>(l.bx) * l.vec);
  if (blocks < target_blocks && g.reduced >= 2 * kMinColsChunk) {
    a.splits = std::min(ceil_div(target_blocks, blocks), ceil_div(g.reduced, kMinColsChunk));
    a.chunk = ceil_div(g.reduced, a.splits);
    a.splits = ceil_div(g.reduced, a.chunk);
    l = cols_launch<In>(a, x.const_data_ptr());
  } else if (forced.is("split") && g.reduced >= 4) {  // >= 4: the partials' pass (2 rows) stops
    a.chunk = ceil_div(g.reduced, 2);
    a.splits = ceil_div(g.reduced, a.chunk);
  }
  if (a.splits == 1) {
    launch_cols_pass<In, Out>(x.const_data_ptr<In>(), out.mutable_data_ptr<Out>(), a, l, r, stream);
    return;
  }
  at::Tensor partial = at::empty({a.splits * columns}, x.options().dtype(c10::CppTypeToScalarType<V>::value));
  launch_cols_pass<In, V>(x.const_data_ptr<In>(), partial.mutable_data_ptr<V>(), a, l, r, stream);
  // The partials are a (splits, columns) reduction over dim 0 themselves: the same launcher
  // splits them again when the columns are few (a single block folding 1056 partial rows of 128
  // columns took longer than the first pass: H200, 442368 x 128 over dim 0, 41% of copy).
  ReduceGeometry partials;
  partials.outer = 1;
  partials.reduced = a.splits;
  partials.inner = columns;
  partials.outer_stride = a.splits * columns;
  partials.reduced_stride = columns;
  partials.inner_stride = 1;
  launch_cols<V, Out>(partial, partials, out, r, stream, forced);
}

}  // namespace
}  // namespace cuda

void reduce_cuda(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, ReduceKind kind) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // Columns when the reduced elements are not adjacent but the kept ones are.
  const bool columns = g.inner > 1 && g.reduced_stride != 1 && g.inner_stride == 1;
  const cuda::ForcedStrategy forced;
  dispatch_in_out("reduce_cuda", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using V = at::opmath_type<In>;
    auto run = [&](const auto& r) {
      if (columns) cuda::launch_cols<In, Out>(x, g, out, r, stream, forced);
      else cuda::launch_rows<In, Out>(x, g, out, r, stream, forced);
    };
    if (kind == ReduceKind::kMax) {
      run(cuda::PlainReducer<MaxOp<V>>{});
    } else if constexpr (std::is_same_v<V, float>) {
      // float32, float16 and bfloat16 sums are compensated; float64 sums are plain, as torch's.
      if (cuda::env_equals("REDUCE_OPS_SUM", "plain")) run(cuda::PlainReducer<SumOp<V>>{});
      else run(cuda::NeumaierReducer<V>{});
    } else {
      run(cuda::PlainReducer<SumOp<V>>{});
    }
  });
}

}  // namespace reduce_ops
