// ReduceScale (rows): launch_row_norm with the ReduceScale policy (softmax_launch.h).
#include "cuda/softmax_launch.h"

namespace reduce_ops {

void reduce_scale_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                       const at::Tensor& scale, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_scale_cuda", [&] {
    using Acc = at::opmath_type<scalar_t>;
    // The scale is stored under an L2 evict_last policy (store_evict_last), but for 4194304 rows
    // and more of up to 16 bytes: there the scale, 4 bytes a row, is 16 MB or more and a quarter of
    // the traffic or more, and kept in the L2 it slows the rows. H200 (h200_study/session70.txt),
    // us, marked -> plain: bfloat16 4194304 x 2 17.36 -> 16.24, x 4 25.46 -> 23.77, x 8 41.95 ->
    // 40.45, 8388608 x 2 29.45 -> 28.26; float32 4194304 x 2 25.36 -> 23.54, x 4 41.44 -> 39.38,
    // 8388608 x 2 45.36 -> 43.58, bfloat16 8388608 x 8 even (75.63 -> 75.44). Even at 2097152 rows
    // and at 32-byte rows (float32 4194304 x 8 71.38 -> 71.42); the marked store ahead on long
    // rows (float32 442368 x 128 110.6 -> 111.6, 4194304 x 128 1043.8 -> 1049.5). float64 keeps it.
    // REDUCE_OPS_SCALE_STORE=plain|marked (a developer knob) forces either.
    const bool many_short_rows = sizeof(scalar_t) <= 4 && g.rows >= (int64_t{1} << 22) &&
                                 g.cols * static_cast<int64_t>(sizeof(scalar_t)) <= 16;
    const bool marked = many_short_rows ? cuda::env_equals("REDUCE_OPS_SCALE_STORE", "marked")
                                        : !cuda::env_equals("REDUCE_OPS_SCALE_STORE", "plain");
    const cuda::ReduceScalePolicy<Acc> policy{static_cast<Acc>(eps), scale.mutable_data_ptr<Acc>(), marked};
    cuda::launch_row_norm<scalar_t, scalar_t, Acc>(x, g, y, policy);
  });
}

}  // namespace reduce_ops
