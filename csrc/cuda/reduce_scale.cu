// ReduceScale (rows): launch_row_norm with the ReduceScale policy (softmax_launch.h).
#include "cuda/softmax_launch.h"

namespace reduce_ops {

void reduce_scale_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                       const at::Tensor& scale, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_scale_cuda", [&] {
    using Acc = at::opmath_type<scalar_t>;
    // REDUCE_OPS_SCALE_STORE=plain (a developer knob, for measurement): the scale stored
    // without store_evict_last's L2 policy.
    const cuda::ReduceScalePolicy<Acc> policy{static_cast<Acc>(eps), scale.mutable_data_ptr<Acc>(),
                                              !cuda::env_equals("REDUCE_OPS_SCALE_STORE", "plain")};
    cuda::launch_row_norm<scalar_t, scalar_t, Acc>(x, g, y, policy);
  });
}

}  // namespace reduce_ops
