// Launch of the reductions: picks kernel, block, grid and split from the view and the device.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "common/dispatch.h"
#include "cuda/launch.h"
#include "cuda/reduce.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {
namespace {

// Fewest reduced rows one column-split segment holds.
constexpr int64_t kMinColsChunk = 256;

template <typename In, typename Out, typename Acc, typename Op>
void launch_rows_pass(const In* x, Out* out, RowsArgs a, cudaStream_t stream) {
  constexpr int kVec = kMaxVec<In>;
  const int64_t seg_len = a.splits > 1 ? a.chunk : a.cols;
  a.aligned = a.elem_stride == 1 && is_aligned(x, 16) && a.cols % kVec == 0 && seg_len % kVec == 0 &&
              a.outer_stride % kVec == 0 && (a.inner == 1 || a.inner_stride % kVec == 0);
  const int64_t items = a.rows * a.splits;
  const int64_t seg = a.splits > 1 ? a.chunk : a.cols;
  const int vec = a.elem_stride == 1 ? kMaxVec<In> : 1;
  // Short rows: lanes per row so that each lane reads about two packs.
  const int64_t lanes = ceil_div(seg, 2 * vec);
  auto group = [&](auto width_tag) {
    constexpr int kWidth = decltype(width_tag)::value;
    const int64_t groups_per_block = kBlock / kWidth;
    reduce_rows_group_kernel<In, Out, Acc, Op, kWidth>
        <<<grid_for(ceil_div(items, groups_per_block)), kBlock, 0, stream>>>(x, out, a);
  };
  if (lanes <= 4) group(Int<4>{});
  else if (lanes <= 8) group(Int<8>{});
  else if (lanes <= 16) group(Int<16>{});
  else if (lanes <= 64) group(Int<32>{});
  else reduce_rows_block_kernel<In, Out, Acc, Op><<<grid_for(items), kBlock, 0, stream>>>(x, out, a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Rows: few long rows are split over blocks (partials in Acc, then a second rows pass).
template <typename In, typename Out, typename Acc, typename Op>
void launch_rows(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, cudaStream_t stream) {
  RowsArgs a{g.outer * g.inner, g.reduced, g.inner, g.outer_stride, g.inner_stride, g.reduced_stride, 1, g.reduced,
             false};
  if (a.rows < sm_count() * kBlocksPerSM && a.cols >= 2 * kMinSplitChunk) {
    const RowSplit plan = split_rows(a.rows, a.cols);
    a.splits = plan.splits;
    a.chunk = plan.chunk;
  }
  if (a.splits == 1) {
    launch_rows_pass<In, Out, Acc, Op>(x.const_data_ptr<In>(), out.mutable_data_ptr<Out>(), a, stream);
    return;
  }
  at::Tensor partial = at::empty({a.rows * a.splits}, x.options().dtype(c10::CppTypeToScalarType<Acc>::value));
  launch_rows_pass<In, Acc, Acc, Op>(x.const_data_ptr<In>(), partial.mutable_data_ptr<Acc>(), a, stream);
  const RowsArgs second{a.rows, a.splits, 1, a.splits, 0, 1, 1, a.splits, false};
  launch_rows_pass<Acc, Out, Acc, Op>(partial.const_data_ptr<Acc>(), out.mutable_data_ptr<Out>(), second, stream);
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
  while (l.bx < kBlock && static_cast<int64_t>(l.bx) * l.vec < a.inner) l.bx *= 2;
  // Rows of threads along the reduced dim, each reading at least 16 rows: a short reduced dim
  // is read by few threads that loop, not split across the block and recombined.
  while (l.bx * l.by * 2 <= kBlock && static_cast<int64_t>(l.by) * 2 * 16 <= a.chunk) l.by *= 2;
  return l;
}

template <typename In, typename Out, typename Acc, typename Op>
void launch_cols_pass(const In* x, Out* out, const ColsArgs& a, const ColsLaunch& l, cudaStream_t stream) {
  const dim3 block(l.bx, l.by);
  const int64_t tiles = ceil_div(a.inner, static_cast<int64_t>(l.bx) * l.vec);
  const int64_t grid = grid_for(a.splits * a.outer * tiles);
  const size_t smem = sizeof(Acc) * l.bx * l.by * l.vec;
  if (l.vec > 1) reduce_cols_kernel<In, Out, Acc, Op, kMaxVec<In>><<<grid, block, smem, stream>>>(x, out, a);
  else reduce_cols_kernel<In, Out, Acc, Op, 1><<<grid, block, smem, stream>>>(x, out, a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Columns: when the kept columns are too few to fill the GPU, the reduced dim is split over
// blocks (partials in Acc, then a second columns pass over the splits).
template <typename In, typename Out, typename Acc, typename Op>
void launch_cols(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, cudaStream_t stream) {
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
  }
  if (a.splits == 1) {
    launch_cols_pass<In, Out, Acc, Op>(x.const_data_ptr<In>(), out.mutable_data_ptr<Out>(), a, l, stream);
    return;
  }
  at::Tensor partial = at::empty({a.splits * columns}, x.options().dtype(c10::CppTypeToScalarType<Acc>::value));
  launch_cols_pass<In, Acc, Acc, Op>(x.const_data_ptr<In>(), partial.mutable_data_ptr<Acc>(), a, l, stream);
  const ColsArgs second{1, a.splits, columns, 0, columns, 1, 1, a.splits};
  launch_cols_pass<Acc, Out, Acc, Op>(partial.const_data_ptr<Acc>(), out.mutable_data_ptr<Out>(), second,
                                      cols_launch<Acc>(second, partial.const_data_ptr()), stream);
}

}  // namespace
}  // namespace cuda

void reduce_cuda(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, ReduceKind kind) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // Columns when the reduced elements are not adjacent but the kept ones are.
  const bool columns = g.inner > 1 && g.reduced_stride != 1 && g.inner_stride == 1;
  dispatch_in_out("reduce_cuda", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    auto run = [&](auto op) {
      using Op = decltype(op);
      if (columns) cuda::launch_cols<In, Out, Acc, Op>(x, g, out, stream);
      else cuda::launch_rows<In, Out, Acc, Op>(x, g, out, stream);
    };
    if (kind == ReduceKind::kSum) run(SumOp<Acc>{});
    else run(MaxOp<Acc>{});
  });
}

}  // namespace reduce_ops
