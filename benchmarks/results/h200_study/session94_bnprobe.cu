// Session 94 probe (not part of the package): batch-norm-style float32 sums over (0, 2) of (N, C, HW),
// a block an output, to find what makes torch.compile's Triton kernel faster than the runs kernel on
// small inputs. Variants differ in one thing at a time from a clone of Triton's kernel
// (512 threads, element r = t + 512 k strided, 4 loads an iteration each masked, 4 plain
// accumulators, HW a compile-time constant, evict_first loads).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ float load_ef(const float* p) {
  float v;
  asm volatile("ld.global.L1::evict_first.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// Triton's form: L1 evict_first and an L2 evict_first policy (createpolicy.fractional, 1.0).
__device__ __forceinline__ float load_ef2(const float* p) {
  float v;
  asm volatile(
      "{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
      "ld.global.L1::evict_first.L2::cache_hint.f32 %0, [%1], pol;\n\t}"
      : "=f"(v) : "l"(p));
  return v;
}

template <int kThreads>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float s[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kThreads / 32 ? s[threadIdx.x] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// kHW: compile-time HW (0: runtime). kHint: evict_first loads. kWhole: unmasked whole iterations, then
// one masked (as the runs kernel), else every iteration masked (as Triton).
template <int kThreads, int kLoads, int kHW, int kHint, bool kWhole, int kR = 0>
__global__ void __launch_bounds__(kThreads) bn_sum(const float* __restrict__ x, float* __restrict__ out, int n_, int c_,
                                                   int hw_) {
  const int hw = kHW ? kHW : hw_;
  const int c = blockIdx.x, C = c_;
  const int R = kR ? kR : n_ * hw;
  const float* base = x + static_cast<int64_t>(c) * hw;
  float acc[kLoads];
#pragma unroll
  for (int l = 0; l < kLoads; ++l) acc[l] = 0.f;
  auto addr = [&](int r) {
    const int n = r / hw;
    return base + static_cast<int64_t>(n) * C * hw + (r - n * hw);
  };
  auto ld = [&](const float* p) { return kHint == 2 ? load_ef2(p) : kHint == 1 ? load_ef(p) : __ldg(p); };
  int r0 = 0;
  if constexpr (kWhole) {
    for (; r0 + kThreads * kLoads <= R; r0 += kThreads * kLoads) {
      float v[kLoads];
#pragma unroll
      for (int l = 0; l < kLoads; ++l) v[l] = ld(addr(r0 + l * kThreads + threadIdx.x));
#pragma unroll
      for (int l = 0; l < kLoads; ++l) acc[l] += v[l];
    }
  }
  for (; r0 < R; r0 += kThreads * kLoads) {
    float v[kLoads];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int r = r0 + l * kThreads + threadIdx.x;
      v[l] = r < R ? ld(addr(r)) : 0.f;
    }
#pragma unroll
    for (int l = 0; l < kLoads; ++l) acc[l] += v[l];
  }
  float t = 0.f;
#pragma unroll
  for (int l = 0; l < kLoads; ++l) t += acc[l];
  t = block_sum<kThreads>(t);
  if (threadIdx.x == 0) out[c] = t;
}

at::Tensor run(const at::Tensor& x, int64_t variant) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.is_contiguous() && x.scalar_type() == at::kFloat);
  const int N = x.size(0), C = x.size(1), HW = x.size(2);
  auto out = at::empty({C}, x.options());
  auto s = at::cuda::getCurrentCUDAStream();
  const float* p = x.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
#define L(T, K, H, E, W) bn_sum<T, K, H, E, W><<<C, T, 0, s>>>(p, o, N, C, HW)
#define LR(T, K, E, RR) bn_sum<T, K, 49, E, false, RR><<<C, T, 0, s>>>(p, o, N, C, HW)
  const int R = N * HW;
  switch (variant) {
    case 0: TORCH_CHECK(HW == 49); L(512, 4, 49, true, false); break;   // Triton clone
    case 1: TORCH_CHECK(HW == 49); L(512, 4, 49, false, false); break;  // no hint
    case 2: L(512, 4, 0, true, false); break;                           // runtime HW
    case 3: TORCH_CHECK(HW == 49); L(256, 8, 49, true, false); break;   // 256 threads x 8
    case 4: TORCH_CHECK(HW == 49); L(256, 4, 49, true, false); break;   // 256 threads x 4
    case 5: TORCH_CHECK(HW == 49); L(512, 4, 49, true, true); break;    // whole + guarded
    case 6: L(256, 8, 0, false, true); break;                           // runs-kernel-like: 256 x 8, runtime, plain, whole+guarded
    case 7: TORCH_CHECK(HW == 49); L(512, 8, 49, true, false); break;   // 512 x 8
    case 8: TORCH_CHECK(HW == 49); L(1024, 4, 49, true, false); break;  // 1024 x 4
    case 9: TORCH_CHECK(HW == 49); L(512, 16, 49, 2, false); break;    // 512 x 16, L2 evict_first policy
    case 10: TORCH_CHECK(HW == 49); L(512, 4, 49, 2, false); break;    // Triton clone + L2 policy
    case 11:  // Triton clone with the row length a compile-time constant (as Triton's r0_numel)
      TORCH_CHECK(HW == 49);
      if (R == 6272) LR(512, 4, 2, 6272);
      else if (R == 3136) LR(512, 4, 2, 3136);
      else if (R == 4704) LR(512, 4, 2, 4704);
      else if (R == 12544) LR(512, 4, 2, 12544);
      else TORCH_CHECK(false, "R");
      break;
    case 12: TORCH_CHECK(HW == 49); L(256, 16, 49, 2, false); break;   // 256 x 16, L2 policy
    case 13: TORCH_CHECK(HW == 49); L(512, 16, 49, 0, false); break;   // 512 x 16, plain loads
    default: TORCH_CHECK(false, "variant");
  }
#undef L
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY(bnprobe, m) { m.def("run(Tensor x, int variant) -> Tensor"); }
TORCH_LIBRARY_IMPL(bnprobe, CUDA, m) { m.impl("run", &run); }
