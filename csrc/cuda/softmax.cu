// Launch of softmax over the last dim and of softmax_backward (launch_row_norm with the softmax
// policy, launch_backward_rows; softmax_launch.h). One file for the two: split apart, the
// softmax kernels compiled to other code (123 of them: scheduling and address arithmetic moved).
#include "cuda/softmax_launch.h"

namespace reduce_ops {

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
      const cuda::ForcedStrategy forced;
      auto launch = [&](auto vec) {
        constexpr int kVec = decltype(vec)::value, kHold = cuda::kInnerHoldFor<T, kVec, true>;
        if (cuda::inner_split_wanted<true>(g, kVec, sizeof(T), kHold, forced) &&
            cuda::launch_inner_split<kVec>(cuda::SoftmaxBackwardInner<T, Acc, kVec>{gp, yp, xp}, g, grad, stream)) {
          return;
        }
        // The held shares (two tensors' packs) take ~100 registers: no kernel for two blocks an SM.
        const auto kernel_for = [](auto held, auto cluster, auto) {
          return &cuda::softmax_backward_inner_kernel<T, Acc, kVec, decltype(held)::value, decltype(cluster)::value>;
        };
        cuda::launch_inner_tiles<(kVec == cuda::kMaxVec<T>), kHold>(g, kVec, sizeof(T), cuda::kBackwardWideRows<T, kVec>,
                                                                    stream, kernel_for, gp, yp, xp, g);
      };
      cuda::launch_widest_inner_pack<T>(
          [&](int bytes) {
            return g.inner % (bytes / static_cast<int>(sizeof(T))) == 0 && cuda::is_aligned(gp, bytes) &&
                   cuda::is_aligned(yp, bytes) && cuda::is_aligned(xp, bytes);
          },
          launch);
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

}  // namespace reduce_ops
