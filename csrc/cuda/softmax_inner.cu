// Softmax over an inner dim (not the last): the inner tiles or the split (softmax_launch.h).
#include "cuda/softmax_launch.h"

namespace reduce_ops {

void softmax_inner_cuda(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_in_out("softmax_cuda", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    const In* xp = x.const_data_ptr<In>();
    Out* yp = y.mutable_data_ptr<Out>();
    const cuda::ForcedStrategy forced;
    auto launch = [&](auto vec) {
      constexpr int kVec = decltype(vec)::value, kHold = cuda::kInnerHoldFor<In, kVec, false>;
      if (cuda::inner_split_wanted<false>(g, kVec, sizeof(In), kHold, forced) &&
          cuda::launch_inner_split<kVec>(cuda::SoftmaxInner<In, Out, Acc, kVec>{xp, yp}, g, x, stream)) {
        return;
      }
      const auto kernel_for = [](auto held, auto cluster, auto two_blocks) {
        // 32-bit shares fit two blocks an SM as they are (64 registers): no second kernel.
        constexpr bool kTwoBlocks = decltype(two_blocks)::value && sizeof(In) == 2;
        return &cuda::softmax_inner_kernel<In, Out, Acc, kVec, decltype(held)::value, decltype(cluster)::value, kTwoBlocks>;
      };
      cuda::launch_inner_tiles<(kVec == cuda::kMaxVec<In>), kHold>(g, kVec, sizeof(In), cuda::kForwardWideRows<In, kVec>,
                                                                   stream, kernel_for, xp, yp, g);
    };
    cuda::launch_widest_inner_pack<In>(
        [&](int bytes) {
          const int vec = bytes / static_cast<int>(sizeof(In));
          return g.inner % vec == 0 && cuda::is_aligned(xp, bytes) &&
                 cuda::is_aligned(yp, vec * static_cast<int>(sizeof(Out)));
        },
        launch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace reduce_ops
