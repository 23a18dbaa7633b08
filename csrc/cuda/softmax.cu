// Launch of softmax and ReduceScale: one dispatcher picks the strategy by row length.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <type_traits>

#include "common/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_norm.cuh"
#include "cuda/softmax_backward.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {
namespace {

// Packs a warp-path lane holds at most (registers: 8 packs x 16 bytes).
constexpr int kMaxWarpPacks = 8;

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_warp(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  const int64_t packs = ceil_div(g.cols, kVec);
  auto run = [&](auto packs_tag, auto width_tag) {
    constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value;
    row_norm_warp_kernel<In, Out, Acc, Policy, kVec, kPacks, kWidth>
        <<<grid_for(ceil_div(g.rows, kBlock / kWidth)), kBlock, 0, stream>>>(x, y, g, policy);
  };
  if constexpr (kVec > 1) {
    // Short rows: several rows per warp, one pack per lane.
    if (packs <= 4) return run(Int<1>{}, Int<4>{});
    if (packs <= 8) return run(Int<1>{}, Int<8>{});
    if (packs <= 16) return run(Int<1>{}, Int<16>{});
  }
  if (packs <= 32) return run(Int<1>{}, Int<32>{});
  if (packs <= 64) return run(Int<2>{}, Int<32>{});
  if (packs <= 128) return run(Int<4>{}, Int<32>{});
  return run(Int<8>{}, Int<32>{});
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_split(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                  const at::TensorOptions& opts) {
  const RowSplit plan = split_rows(g.rows, g.cols);
  const SplitArgs s{plan.splits, plan.chunk};
  at::Tensor partial = at::empty({g.rows * s.splits * static_cast<int64_t>(sizeof(RowPartial<Acc>))}, opts.dtype(at::kByte));
  auto* pp = reinterpret_cast<RowPartial<Acc>*>(partial.mutable_data_ptr());
  const int64_t grid = grid_for(g.rows * s.splits);
  row_norm_partial_kernel<In, Acc, Policy, kVec><<<grid, kBlock * 2, 0, stream>>>(x, pp, g, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  row_norm_apply_kernel<In, Out, Acc, Policy, kVec><<<grid, kBlock * 2, 0, stream>>>(x, y, pp, g, s, policy);
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_vec(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                const at::TensorOptions& opts) {
  const int64_t packs = ceil_div(g.cols, kVec);
  const int64_t smem = g.cols * static_cast<int64_t>(sizeof(In));
  const bool few_rows = g.rows * 2 < sm_count();
  if (packs <= 32 * kMaxWarpPacks) {
    launch_warp<In, Out, Acc, Policy, kVec>(x, y, g, policy, stream);
  } else if (smem <= block_smem_limit() && !(few_rows && g.cols >= 2 * kMinSplitChunk)) {
    auto kernel = row_norm_block_kernel<In, Out, Acc, Policy, kVec>;
    allow_smem(kernel, smem);
    kernel<<<grid_for(g.rows), block_per_row_threads(packs), smem, stream>>>(x, y, g, policy);
  } else {
    launch_split<In, Out, Acc, Policy, kVec>(x, y, g, policy, stream, opts);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename In, typename Out, typename Acc, typename Policy>
void launch_row_norm(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y, const Policy& policy) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const In* xp = static_cast<const In*>(x.const_data_ptr());
  Out* yp = static_cast<Out*>(y.data_ptr());  // y may be x (in-place ReduceScale)
  constexpr int kVec = std::min(kMaxVec<In>, kMaxVec<Out>);
  const bool vectorize = g.cols % kVec == 0 && g.x_row_stride % kVec == 0 && g.y_row_stride % kVec == 0 &&
                         is_aligned(xp, sizeof(In) * kVec) && is_aligned(yp, sizeof(Out) * kVec);
  if (vectorize) launch_vec<In, Out, Acc, Policy, kVec>(xp, yp, g, policy, stream, x.options());
  else launch_vec<In, Out, Acc, Policy, 1>(xp, yp, g, policy, stream, x.options());
}

template <typename T, typename Acc, int kVec>
void launch_backward_rows(const T* grad, const T* out, T* gx, const BackwardRows& r, cudaStream_t stream,
                          const at::TensorOptions& opts) {
  const int64_t packs = ceil_div(r.cols, kVec);
  const int64_t smem = 2 * r.cols * static_cast<int64_t>(sizeof(T));
  const bool few_rows = r.rows * 2 < sm_count();
  auto warp = [&](auto packs_tag, auto width_tag) {
    constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value;
    softmax_backward_warp_kernel<T, Acc, kVec, kPacks, kWidth>
        <<<grid_for(ceil_div(r.rows, kBlock / kWidth)), kBlock, 0, stream>>>(grad, out, gx, r);
  };
  if (kVec > 1 && packs <= 8) warp(Int<1>{}, Int<8>{});
  else if (packs <= 32) warp(Int<1>{}, Int<32>{});
  else if (packs <= 64) warp(Int<2>{}, Int<32>{});
  else if (packs <= 128) warp(Int<4>{}, Int<32>{});
  else if (smem <= block_smem_limit() && !(few_rows && r.cols >= 2 * kMinSplitChunk)) {
    auto kernel = softmax_backward_block_kernel<T, Acc, kVec>;
    allow_smem(kernel, smem);
    kernel<<<grid_for(r.rows), block_per_row_threads(packs), smem, stream>>>(grad, out, gx, r);
  } else {
    const RowSplit plan = split_rows(r.rows, r.cols);
    const SplitArgs s{plan.splits, plan.chunk};
    at::Tensor partial = at::empty({r.rows * s.splits}, opts.dtype(c10::CppTypeToScalarType<Acc>::value));
    Acc* pp = partial.mutable_data_ptr<Acc>();
    const int64_t grid = grid_for(r.rows * s.splits);
    softmax_backward_partial_kernel<T, Acc, kVec><<<grid, kBlock * 2, 0, stream>>>(grad, out, pp, r, s);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    softmax_backward_apply_kernel<T, Acc, kVec><<<grid, kBlock * 2, 0, stream>>>(grad, out, gx, pp, r, s);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace
}  // namespace cuda

void softmax_backward_cuda(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                           const at::Tensor& grad_x) {
  const c10::cuda::CUDAGuard guard(grad.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "softmax_backward_cuda", [&] {
    using T = scalar_t;
    using Acc = at::opmath_type<T>;
    const T* gp = grad.const_data_ptr<T>();
    const T* yp = out.const_data_ptr<T>();
    T* xp = grad_x.mutable_data_ptr<T>();
    if (g.inner > 1) {
      const int64_t columns = g.outer * g.inner;
      cuda::softmax_backward_inner_kernel<T, Acc>
          <<<cuda::grid_for(cuda::ceil_div(columns, cuda::kBlock)), cuda::kBlock, 0, stream>>>(gp, yp, xp, g);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    const cuda::BackwardRows r{g.outer, g.cols};
    constexpr int kVec = cuda::kMaxVec<T>;
    const bool vectorize = r.cols % kVec == 0 && cuda::is_aligned(gp, 16) && cuda::is_aligned(yp, 16) &&
                           cuda::is_aligned(xp, 16);
    if (vectorize) cuda::launch_backward_rows<T, Acc, kVec>(gp, yp, xp, r, stream, grad.options());
    else cuda::launch_backward_rows<T, Acc, 1>(gp, yp, xp, r, stream, grad.options());
  });
}

void softmax_rows_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(x.device());
  dispatch_in_out("softmax_cuda", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    cuda::launch_row_norm<In, Out, Acc>(x, g, y, cuda::SoftmaxPolicy<Acc>{});
  });
}

void softmax_inner_cuda(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_in_out("softmax_cuda", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    const int64_t columns = g.outer * g.inner;
    cuda::softmax_inner_kernel<In, Out, Acc><<<cuda::grid_for(cuda::ceil_div(columns, cuda::kBlock)), cuda::kBlock, 0, stream>>>(
        x.const_data_ptr<In>(), y.mutable_data_ptr<Out>(), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void reduce_scale_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                       const at::Tensor& scale, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_scale_cuda", [&] {
    using Acc = at::opmath_type<scalar_t>;
    const cuda::ReduceScalePolicy<Acc> policy{static_cast<Acc>(eps), scale.mutable_data_ptr<Acc>()};
    cuda::launch_row_norm<scalar_t, scalar_t, Acc>(x, g, y, policy);
  });
}

}  // namespace reduce_ops
