// Prototype (not shipped): quack-style long-row softmax. One row per cluster of C blocks, not
// persistent; each block's share bulk-copied (TMA) or loaded into registers, held as floats
// (exp taken once), (max, sum) pairs reduced warp -> cluster by st.async into every peer's
// shared memory completing on one mbarrier: no block barrier, no cluster barrier per row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ unsigned saddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned map_rank(unsigned a, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(saddr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, unsigned phase) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(saddr(bar)), "r"(phase)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned phase) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(saddr(bar)), "r"(phase)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   saddr(dst)),
               "l"(src), "r"(bytes), "r"(saddr(bar))
               : "memory");
}

__device__ __forceinline__ void st_async_f2(unsigned remote, float a, float b, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(remote),
               "f"(a), "f"(b), "r"(remote_bar)
               : "memory");
}

struct Pair {
  float m, s;
};

// An opaque copy of w: widening it again is not the same expression as before (keeps ptxas from
// holding the first widening's floats instead of the raw words).
__device__ __forceinline__ uint4 opaque(uint4 w) {
  asm volatile("" : "+r"(w.x), "+r"(w.y), "+r"(w.z), "+r"(w.w));
  return w;
}

__device__ __forceinline__ Pair combine(Pair a, Pair b) {
  const float m = fmaxf(a.m, b.m);
  // -inf halves: exp2(-inf) = 0; both -inf: m = -inf, use 0 offsets.
  const float mo = m == -INFINITY ? 0.f : m * kLog2e;
  const float sa = a.s == 0.f ? 0.f : a.s * exp2f(a.m * kLog2e - mo);
  const float sb = b.s == 0.f ? 0.f : b.s * exp2f(b.m * kLog2e - mo);
  return {m, sa + sb};
}

__device__ __forceinline__ Pair warp_reduce(Pair p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Pair q{__shfl_xor_sync(0xffffffffu, p.m, o), __shfl_xor_sync(0xffffffffu, p.s, o)};
    p = combine(p, q);
  }
  return p;
}

template <typename T>
struct Traits;
template <>
struct Traits<float> {
  static constexpr int kVec = 4;
  __device__ static void widen(const uint4& w, float* o) {
    o[0] = __uint_as_float(w.x), o[1] = __uint_as_float(w.y), o[2] = __uint_as_float(w.z), o[3] = __uint_as_float(w.w);
  }
  __device__ static uint4 narrow(const float* o) {
    return make_uint4(__float_as_uint(o[0]), __float_as_uint(o[1]), __float_as_uint(o[2]), __float_as_uint(o[3]));
  }
};
template <>
struct Traits<__nv_bfloat16> {
  static constexpr int kVec = 8;
  __device__ static void widen(const uint4& w, float* o) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = __uint_as_float(u[i] << 16);
      o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 narrow(const float* o) {
    unsigned u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(o[2 * i], o[2 * i + 1]);
      u[i] = *reinterpret_cast<unsigned*>(&h);
    }
    return make_uint4(u[0], u[1], u[2], u[3]);
  }
};

// kLoad: 0 registers (plain 16-byte loads), 1 one bulk copy of the block's share into shared
// memory, then shared -> registers.
template <typename T, int kThreads, int kPacks, int kHold, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) tile_softmax(const T* __restrict__ x, T* __restrict__ y, int cols) {
  using Tr = Traits<T>;
  constexpr int kVec = Tr::kVec, kWarps = kThreads / 32, kMaxC = 16;
  __shared__ __align__(8) Pair red[kWarps * kMaxC];
  __shared__ uint64_t bars[2];  // 0: load, 1: reduction
  const unsigned rank = cluster_rank();
  unsigned kC;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(kC));
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const long long row = blockIdx.y;
  const int first = rank * kThreads * kPacks;  // block's first pack
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * cols) + first;
  uint4* yr = reinterpret_cast<uint4*>(y + row * cols) + first;
  if (t == 0) {
    mbar_init(&bars[0], 1);
    mbar_init(&bars[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (t == 0) mbar_expect(&bars[1], kWarps * kC * sizeof(Pair));
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  uint4 w[kPacks];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) w[p] = __ldg(xr + p * kThreads + t);
  float v[kHold == 0 ? kPacks : 1][kVec];
  float m = -INFINITY;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    float f[kVec];
    Tr::widen(w[p], f);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      m = fmaxf(m, f[k]);
      if constexpr (kHold == 0) v[p][k] = f[k];
    }
  }
  const float mo = m == -INFINITY ? 0.f : m * kLog2e;
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    float f[kVec];
    if constexpr (kHold == 1) Tr::widen(opaque(w[p]), f);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float e = exp2f(fmaf(kHold == 0 ? v[p][k] : f[k], kLog2e, -mo));
      if constexpr (kHold == 0) v[p][k] = e;
      s += e;
    }
  }
  const Pair mine{m, s};
  const Pair wp = warp_reduce(mine);
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (lane < kC) {
    const unsigned slot = saddr(&red[warp * kC + rank]);
    st_async_f2(map_rank(slot, lane), wp.m, wp.s, map_rank(saddr(&bars[1]), lane));
  }
  mbar_wait_cluster(&bars[1], 0);
  // Every thread folds all kWarps * kC pairs in the same order: lane i takes i, i + 32, ...
  Pair acc{-INFINITY, 0.f};
  for (int i = lane; i < kWarps * kC; i += 32) acc = combine(acc, red[i]);
  const Pair row_p = warp_reduce(acc);
  const float scale = (m == -INFINITY ? 0.f : exp2f(mo - (row_p.m == -INFINITY ? 0.f : row_p.m * kLog2e))) / row_p.s;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    float o[kVec];
    if constexpr (kHold == 1) {
      Tr::widen(opaque(w[p]), o);
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = exp2f(fmaf(o[k], kLog2e, -mo)) * scale;
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = v[p][k] * scale;
    }
    yr[p * kThreads + t] = Tr::narrow(o);
  }
}

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
__global__ void to_bf16(const float* a, __nv_bfloat16* b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    b[i] = __float2bfloat16(a[i]);
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
static float time_it(F f, void* flush, size_t flush_bytes, int iters = 15) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int i = 0; i < iters + 2; ++i) {
    CK(cudaMemsetAsync(flush, i, flush_bytes));
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) ts.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  return median(ts);
}

template <typename T, int kThreads, int kPacks, int kHold, int kMinBlocks = 1>
static void run_variant(int kC, const char* name, const T* x, T* y, int rows, int cols, void* flush, size_t flush_bytes,
                        double copy_gbps, const std::vector<float>& xh_ref) {
  constexpr int kVec = Traits<T>::kVec;
  kC = cols / (kThreads * kPacks * kVec);
  if (kC < 1 || kC > 16 || cols != kC * kThreads * kPacks * kVec) {
    printf("%-34s skip (cols)\n", name);
    return;
  }
  auto kern = tile_softmax<T, kThreads, kPacks, kHold, kMinBlocks>;
  const int smem = 0;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (kC > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(kC, rows, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kC;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg) != cudaSuccess) clusters = -1;
  cudaGetLastError();
  int blocks_per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kern, kThreads, smem));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, kern));
  auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, kern, x, y, cols)); };
  CK(cudaMemset(y, 0, (size_t)rows * cols * sizeof(T)));
  launch();
  CK(cudaDeviceSynchronize());
  // Check rows 0, 1, rows-1 against a double reference.
  double worst = 0;
  std::vector<T> yh(cols);
  for (int r : {0, 1, rows - 1}) {
    CK(cudaMemcpy(yh.data(), y + (size_t)r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
    const float* xr = xh_ref.data() + (size_t)(r == 0 ? 0 : r == 1 ? 1 : 2) * cols;
    double mx = -1e300, sum = 0;
    for (int c = 0; c < cols; ++c) mx = std::max(mx, (double)xr[c]);
    for (int c = 0; c < cols; ++c) sum += std::exp((double)xr[c] - mx);
    for (int c = 0; c < cols; ++c) {
      const double ref = std::exp((double)xr[c] - mx) / sum;
      double got;
      if constexpr (sizeof(T) == 4) got = yh[c];
      else got = (double)__bfloat162float(yh[c]);
      worst = std::max(worst, std::fabs(got - ref) / ref);
    }
  }
  const float us = time_it(launch, flush, flush_bytes);
  const double gbps = 2.0 * rows * (double)cols * sizeof(T) / (us * 1e3);
  printf("%-26s C%-2d %8.1f us %7.0f GB/s %5.1f%% of copy  regs %3d  blocks/SM %d  clusters %d  max rel err %.2e\n", name, kC, us,
         gbps, 100 * gbps / copy_gbps, fa.numRegs, blocks_per_sm, clusters, worst);
}

template <typename T>
static void run_dtype(int rows, int cols, void* flush, size_t flush_bytes) {
  const long long n = (long long)rows * cols;
  float* xf;
  T* x;
  T* y;
  CK(cudaMalloc(&xf, n * sizeof(float)));
  CK(cudaMalloc(&x, n * sizeof(T)));
  CK(cudaMalloc(&y, n * sizeof(T)));
  fill_kernel<<<1024, 256>>>(xf, n, 1234u, 8.f);
  if constexpr (sizeof(T) == 4) CK(cudaMemcpy(x, xf, n * 4, cudaMemcpyDeviceToDevice));
  else to_bf16<<<1024, 256>>>(xf, x, n);
  CK(cudaDeviceSynchronize());
  // Host copies of rows 0, 1, rows-1 as the kernel sees them.
  std::vector<float> ref(3 * (size_t)cols);
  std::vector<T> tmp(cols);
  int k = 0;
  for (int r : {0, 1, rows - 1}) {
    CK(cudaMemcpy(tmp.data(), x + (size_t)r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
    for (int c = 0; c < cols; ++c) {
      if constexpr (sizeof(T) == 4) ref[k * (size_t)cols + c] = tmp[c];
      else ref[k * (size_t)cols + c] = __bfloat162float(tmp[c]);
    }
    ++k;
  }
  const long long vecs = n * (long long)sizeof(T) / 16;
  auto copy = [&] { copy_kernel<<<132 * 8, 256>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), vecs); };
  const float copy_us = time_it(copy, flush, flush_bytes);
  const float memcpy_us = time_it([&] { CK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice)); }, flush,
                                  flush_bytes);
  const double copy_gbps = 2.0 * n * sizeof(T) / (std::min(copy_us, memcpy_us) * 1e3);
  printf("\n%s %d x %d: copy kernel %.1f us, cudaMemcpy %.1f us -> copy %.0f GB/s\n", sizeof(T) == 4 ? "float32" : "bfloat16",
         rows, cols, copy_us, memcpy_us, copy_gbps);
  if constexpr (sizeof(T) == 2) {
    run_variant<T, 256, 8, 0>(0, "bf16 x256 p8 f", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 8, 0, 3>(0, "bf16 x256 p8 f b3", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 8, 1, 4>(0, "bf16 x256 p8 raw b4", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 16, 1, 2>(0, "bf16 x256 p16 raw b2", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 512, 4, 0, 2>(0, "bf16 x512 p4 f b2", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 512, 8, 1, 2>(0, "bf16 x512 p8 raw b2", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 128, 16, 1, 6>(0, "bf16 x128 p16 raw b6", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 4, 0, 4>(0, "bf16 x256 p4 f b4", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
  } else {
    run_variant<T, 256, 16, 0>(0, "f32 x256 p16 f", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 16, 0, 3>(0, "f32 x256 p16 f b3", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 512, 8, 0, 2>(0, "f32 x512 p8 f b2", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 8, 0, 4>(0, "f32 x256 p8 f b4", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 128, 16, 0, 6>(0, "f32 x128 p16 f b6", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
    run_variant<T, 256, 16, 1, 4>(0, "f32 x256 p16 raw b4", x, y, rows, cols, flush, flush_bytes, copy_gbps, ref);
  }
  CK(cudaFree(xf));
  CK(cudaFree(x));
  CK(cudaFree(y));
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? atoi(argv[1]) : 1024;
  const int cols = argc > 2 ? atoi(argv[2]) : 262144;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t flush_bytes = 256u << 20;
  void* flush;
  CK(cudaMalloc(&flush, flush_bytes));
  const char* which = argc > 3 ? argv[3] : "both";
  if (strcmp(which, "f32") != 0) run_dtype<__nv_bfloat16>(rows, cols, flush, flush_bytes);
  if (strcmp(which, "bf16") != 0) run_dtype<float>(rows, cols, flush, flush_bytes);
  return 0;
}
