// Study harness (not shipped): times row_norm_cluster_row_kernel from the csrc copy on the include
// path, outside torch, against a copy kernel / cudaMemcpy, L2 flushed between calls.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <array>
#include <cstring>
#include <algorithm>
#include "cuda/row_norm.cuh"
#if HARNESS_WHOLE
#define HARNESS_WHOLE_TRUE , true
#define HARNESS_WHOLE_FALSE , false
#else
#define HARNESS_WHOLE_TRUE
#define HARNESS_WHOLE_FALSE
#endif

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
using namespace reduce_ops;
using namespace reduce_ops::cuda;

__global__ void copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) b[i] = a[i];
}
__global__ void fill_kernel(float* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = ((h & 0xffffff) / 16777216.f - 0.5f) * scale;
  }
}
template <typename T>
__global__ void convert(const float* a, T* b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) b[i] = static_cast<T>(a[i]);
}
static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
template <typename F>
static float time_it(F f, void* flush, size_t flush_bytes, int iters = 21) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int i = 0; i < iters + 3; ++i) {
    CK(cudaMemsetAsync(flush, i, flush_bytes));
    CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) ts.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  return median(ts);
}
static float to_f(float v) { return v; }
static float to_f(c10::BFloat16 v) { return static_cast<float>(v); }

template <typename T, bool kSoftmax>
static void run(int rows, int cols, void* flush, size_t flush_bytes) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kPacks = kClusterRowValues / kVec;
  const long long n = (long long)rows * cols;
  float *xf, *scale;
  T *x, *y;
  CK(cudaMalloc(&xf, n * 4)); CK(cudaMalloc(&x, n * sizeof(T))); CK(cudaMalloc(&y, n * sizeof(T))); CK(cudaMalloc(&scale, rows * 4));
  fill_kernel<<<1024, 256>>>(xf, n, 1234u, 8.f);
  convert<T><<<1024, 256>>>(xf, x, n);
  CK(cudaDeviceSynchronize());
  const long long vecs = n * (long long)sizeof(T) / 16;
  const float copy_us = std::min(time_it([&] { copy_kernel<<<132 * 8, 256>>>((const uint4*)x, (uint4*)y, vecs); }, flush, flush_bytes),
                                 time_it([&] { CK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice)); }, flush, flush_bytes));
  const double copy_gbps = 2.0 * n * sizeof(T) / (copy_us * 1e3);
  const int packs = cols / kVec;
  const int blocks = std::max(2, (packs + kPacks * 256 - 1) / (kPacks * 256));
  const int threads = ((packs + blocks - 1) / blocks + kPacks - 1) / kPacks;
  const int threads32 = (threads + 31) / 32 * 32;
  const bool whole = (long long)blocks * threads32 * kPacks == packs;
  RowGeometry g; g.rows = rows; g.cols = cols; g.x_row_stride = cols; g.y_row_stride = cols;
  using SP = SoftmaxPolicy<float>;
  using RP = ReduceScalePolicy<float>;
  using P = std::conditional_t<kSoftmax, SP, RP>;
  P policy{};
  if constexpr (!kSoftmax) { policy.eps = 1e-12f; policy.scale = scale; }
  auto kernel = whole ? row_norm_cluster_row_kernel<T, T, float, P, kVec HARNESS_WHOLE_TRUE>
                      : row_norm_cluster_row_kernel<T, T, float, P, kVec HARNESS_WHOLE_FALSE>;
  if (blocks > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const char* pol = getenv("HARNESS_POLICY");
  if (pol) {
    const int v = strcmp(pol, "spread") == 0 ? cudaClusterSchedulingPolicySpread
                 : strcmp(pol, "lb") == 0 ? cudaClusterSchedulingPolicyLoadBalancing : cudaClusterSchedulingPolicyDefault;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeClusterSchedulingPolicyPreference, v));
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(rows * blocks); cfg.blockDim = dim3(threads32);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = blocks; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr; cfg.numAttrs = 1;
  cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, kernel));
  int active = 0;
  if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess) { active = -1; cudaGetLastError(); }
  auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, kernel, (const T*)x, y, g, policy)); };
  launch(); CK(cudaDeviceSynchronize());
  // Check 3 rows on the host.
  double worst = 0;
  std::vector<T> xh(cols), yh(cols);
  for (int r : {0, 1, rows - 1}) {
    CK(cudaMemcpy(xh.data(), x + (size_t)r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yh.data(), y + (size_t)r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
    double mx = -1e300, amax = 0, sum = 0;
    for (int c = 0; c < cols; ++c) { mx = std::max(mx, (double)to_f(xh[c])); amax = std::max(amax, std::fabs((double)to_f(xh[c]))); }
    for (int c = 0; c < cols; ++c) sum += std::exp((double)to_f(xh[c]) - mx);
    for (int c = 0; c < cols; ++c) {
      const double ref = kSoftmax ? std::exp((double)to_f(xh[c]) - mx) / sum : (double)to_f(xh[c]) / amax;
      const double err = std::fabs(to_f(yh[c]) - ref) / std::max(std::fabs(ref), 1e-30);
      worst = std::max(worst, err);
    }
  }
  const float us = time_it(launch, flush, flush_bytes);
  const double gbps = 2.0 * n * sizeof(T) / (us * 1e3);
  printf("%-12s %-8s %5d x %7d  C%-2d x %4d thr %s  %8.1f us %6.0f GB/s %5.1f%% of copy (%4.0f)  regs %3d local %3zu  clusters %3d  max rel err %.1e\n",
         kSoftmax ? "softmax" : "reduce_scale", sizeof(T) == 4 ? "float32" : "bfloat16", rows, cols, blocks, threads32,
         whole ? "whole" : "guard", us, gbps, 100 * gbps / copy_gbps, copy_gbps, fa.numRegs, fa.localSizeBytes, active, worst);
  fflush(stdout);
  CK(cudaFree(xf)); CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(scale));
}

int main(int argc, char** argv) {
  const size_t flush_bytes = 256u << 20;
  void* flush; CK(cudaMalloc(&flush, flush_bytes));
  const int reps = argc > 1 ? atoi(argv[1]) : 1;
  const int all[][2] = {{1024, 262144}, {2048, 131072}, {4096, 65536}, {1000, 200000}, {512, 250000}, {2000, 100000}, {4096, 50000}, {8192, 20000}};
  const int n_shapes = argc > 2 ? atoi(argv[2]) : 4;
  std::vector<std::array<int, 2>> shapes;
  for (int i = 0; i < n_shapes; ++i) shapes.push_back({all[i][0], all[i][1]});
  for (int rep = 0; rep < reps; ++rep)
  for (auto& s : shapes) {
    run<c10::BFloat16, true>(s[0], s[1], flush, flush_bytes);
    run<float, true>(s[0], s[1], flush, flush_bytes);
    run<c10::BFloat16, false>(s[0], s[1], flush, flush_bytes);
    run<float, false>(s[0], s[1], flush, flush_bytes);
  }
  return 0;
}
