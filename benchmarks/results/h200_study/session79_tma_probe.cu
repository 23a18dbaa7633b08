// Session 79 probe: can a row reduction fed by bulk copies (TMA) into a ring of shared-memory
// stages, persistent blocks over an even share of the chunks, read DRAM faster than the block-per-
// row kernel (ld.global.nc.v4, 4 packs a thread)? Plain float sums, timing only (atomicAdd
// results; correctness checked once against a double sum on the host).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <cmath>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

__device__ __forceinline__ unsigned saddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

template <typename T> __device__ __forceinline__ float pack_sum(uint4 w);
template <> __device__ __forceinline__ float pack_sum<float>(uint4 w) {
  return (__uint_as_float(w.x) + __uint_as_float(w.y)) + (__uint_as_float(w.z) + __uint_as_float(w.w));
}
template <> __device__ __forceinline__ float pack_sum<__nv_bfloat16>(uint4 w) {
  auto lo = [](unsigned u) { return __uint_as_float(u << 16); };
  auto hi = [](unsigned u) { return __uint_as_float(u & 0xffff0000u); };
  return ((lo(w.x) + hi(w.x)) + (lo(w.y) + hi(w.y))) + ((lo(w.z) + hi(w.z)) + (lo(w.w) + hi(w.w)));
}

__device__ __forceinline__ uint4 ldg_nc(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Baseline: a block per row, kPacks 16-byte loads a thread in flight per round (the extension's
// reduce_rows_block_kernel load path, plain sum).
template <typename T, int kThreads, int kPacks>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads) block_rows(const T* x, float* out, long cols) {
  const char* row = reinterpret_cast<const char*>(x + blockIdx.x * cols);
  const long packs = cols * sizeof(T) / 16;
  float acc = 0.f;
  for (long p = threadIdx.x; p < packs; p += kThreads * kPacks) {
    uint4 v[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) v[k] = p + k * kThreads < packs ? ldg_nc(row + (p + k * kThreads) * 16) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) acc += pack_sum<T>(v[k]);
  }
  __shared__ float part[kThreads / 32];
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += part[w];
    out[blockIdx.x] = s;
  }
}

// Persistent blocks, each an even share of the chunks (kStageBytes of a row each); thread 0 keeps
// kStages bulk copies in flight into a ring of shared-memory stages; every thread folds its packs
// of a stage; one barrier a stage (its reuse). A row's end (or the share's) flushes the block's
// partial by atomicAdd.
template <typename T, int kThreads, int kStages, int kStageBytes>
__global__ void __launch_bounds__(kThreads) tma_rows(const T* x, float* out, long rows, long cols) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ float part[2][kThreads / 32];
  constexpr int kPer = kStageBytes / 16 / kThreads;
  static_assert(kPer * 16 * kThreads == kStageBytes, "whole packs a thread");
  const long cpr = cols * (long)sizeof(T) / kStageBytes;
  const long total = rows * cpr;
  const long c0 = total * blockIdx.x / gridDim.x, c1 = total * (blockIdx.x + 1) / gridDim.x;
  const long n = c1 - c0;
  const char* base = reinterpret_cast<const char*>(x);
  auto issue = [&](int s, long c) {
    const unsigned bar = saddr(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kStageBytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     saddr(smem + s * kStageBytes)),
                 "l"(base + c * kStageBytes), "r"(kStageBytes), "r"(bar)
                 : "memory");
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&full[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages && s < n; ++s) issue(s, c0 + s);
  float acc = 0.f;
  for (long i = 0; i < n; ++i) {
    const int s = i % kStages;
    const unsigned phase = (i / kStages) & 1;
    unsigned done = 0;
    while (!done) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(saddr(&full[s])), "r"(phase) : "memory");
    }
    const uint4* st = reinterpret_cast<const uint4*>(smem + s * kStageBytes);
    uint4 v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = st[threadIdx.x + k * kThreads];
#pragma unroll
    for (int k = 0; k < kPer; ++k) acc += pack_sum<T>(v[k]);
    const long c = c0 + i;
    const bool flush = (c + 1) % cpr == 0 || i == n - 1;
    if (flush) {
      acc = warp_sum(acc);
      if (threadIdx.x % 32 == 0) part[i & 1][threadIdx.x / 32] = acc;
      acc = 0.f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (i + kStages < n) issue(s, c + kStages);
      if (flush) {
        float t = 0.f;
        for (int w = 0; w < kThreads / 32; ++w) t += part[i & 1][w];
        atomicAdd(out + c / cpr, t);
      }
    }
  }
}

// Persistent blocks, an even share of chunks (kPer packs a thread each), the next chunk's packs
// loaded into registers before the current one is folded.
template <typename T, int kThreads, int kPer>
__global__ void __launch_bounds__(kThreads) reg_rows(const T* x, float* out, long rows, long cols) {
  constexpr int kChunk = kPer * 16 * kThreads;
  __shared__ float part[2][kThreads / 32];
  const long cpr = cols * (long)sizeof(T) / kChunk;
  const long total = rows * cpr;
  const long c0 = total * blockIdx.x / gridDim.x, c1 = total * (blockIdx.x + 1) / gridDim.x;
  const long n = c1 - c0;
  const char* base = reinterpret_cast<const char*>(x) + threadIdx.x * 16;
  uint4 cur[kPer], nxt[kPer];
  if (n > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) cur[k] = ldg_nc(base + c0 * kChunk + k * kThreads * 16);
  }
  float acc = 0.f;
  int flushes = 0;
  for (long i = 0; i < n; ++i) {
    const long c = c0 + i;
    if (i + 1 < n) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) nxt[k] = ldg_nc(base + (c + 1) * kChunk + k * kThreads * 16);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) acc += pack_sum<T>(cur[k]);
    if ((c + 1) % cpr == 0 || i == n - 1) {
      acc = warp_sum(acc);
      if (threadIdx.x % 32 == 0) part[flushes & 1][threadIdx.x / 32] = acc;
      acc = 0.f;
      __syncthreads();
      if (threadIdx.x == 0) {
        float t = 0.f;
        for (int w = 0; w < kThreads / 32; ++w) t += part[flushes & 1][w];
        atomicAdd(out + c / cpr, t);
      }
      ++flushes;
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) cur[k] = nxt[k];
  }
}

__global__ void read_flush(const uint4* p, long n, unsigned* sink) {
  unsigned a = 0;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) a ^= p[i].x;
  if (a == 0x12345678u) *sink = a;
}

static float* g_out;
static uint4* g_flush;
static unsigned* g_sink;
static const long kFlushBytes = 256l << 20;
static int g_sms;

template <typename F>
float time_median(F launch, int reps = 25) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < reps + 3; ++r) {
    read_flush<<<g_sms * 4, 512>>>(g_flush, kFlushBytes / 16, g_sink);
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename T>
struct Case {
  const char* dtype;
  long rows, cols;
};

template <typename T>
void check(const char* name, const T* x, long rows, long cols, const std::vector<double>& ref) {
  std::vector<float> got(rows);
  CK(cudaMemcpy(got.data(), g_out, rows * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (long r = 0; r < rows; ++r) worst = std::max(worst, std::fabs(got[r] - ref[r]) / (std::fabs(ref[r]) + 1e-3 * cols));
  if (worst > 1e-4) printf("  !! %s wrong: rel err %.3g\n", name, worst);
}

template <typename T>
void run_case(const char* dtype, long rows, long cols, double copy_gbps) {
  const long n = rows * cols;
  const double bytes = (double)n * sizeof(T);
  T* x;
  CK(cudaMalloc(&x, n * sizeof(T)));
  // Host-free init: small integers in [-4, 4] so float sums are exact-ish.
  std::vector<T> h(1 << 20);
  for (size_t i = 0; i < h.size(); ++i) h[i] = (T)((float)((int)((unsigned)(i * 2654435761u) >> 28) - 8) * 0.25f);
  for (long o = 0; o < n; o += h.size()) CK(cudaMemcpy(x + o, h.data(), std::min((long)h.size(), n - o) * sizeof(T), cudaMemcpyHostToDevice));
  std::vector<double> ref(rows, 0.0);
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < cols; ++c) ref[r] += (double)(float)h[(r * cols + c) % h.size()];
  printf("%s %ldx%ld (%.0f MB)\n", dtype, rows, cols, bytes / 1e6);
  auto report = [&](const char* name, float us) {
    printf("  %-34s %9.2f us  %6.0f GB/s  %5.1f%% of copy\n", name, us, bytes / us / 1e3, 100.0 * bytes / us / 1e3 / copy_gbps);
  };
  auto zero = [&] { CK(cudaMemset(g_out, 0, rows * 4)); };
  if (rows >= 132) {
    auto l = [&] { block_rows<T, 256, 4><<<rows, 256>>>(x, g_out, cols); };
    zero(); l(); CK(cudaDeviceSynchronize()); check("block_rows", x, rows, cols, ref);
    report("block_rows 256x4", time_median(l));
  }
  auto tma = [&](auto threads_t, auto stages_t, auto bytes_t, int bps) {
    constexpr int kT = decltype(threads_t)::value, kS = decltype(stages_t)::value, kB = decltype(bytes_t)::value;
    if ((cols * (long)sizeof(T)) % kB) return;
    const int smem = kS * kB;
    auto k = tma_rows<T, kT, kS, kB>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int grid = g_sms * bps;
    auto l = [&] { k<<<grid, kT, smem>>>(x, g_out, rows, cols); };
    zero(); l(); CK(cudaDeviceSynchronize()); CK(cudaGetLastError());
    char name[80];
    snprintf(name, sizeof name, "tma t%d s%d %dKB x%d/SM", kT, kS, kB / 1024, bps);
    check(name, x, rows, cols, ref);
    report(name, time_median(l));
  };
  using std::integral_constant;
  tma(integral_constant<int, 256>{}, integral_constant<int, 4>{}, integral_constant<int, 16384>{}, 1);
  tma(integral_constant<int, 256>{}, integral_constant<int, 8>{}, integral_constant<int, 16384>{}, 1);
  tma(integral_constant<int, 256>{}, integral_constant<int, 12>{}, integral_constant<int, 16384>{}, 1);
  tma(integral_constant<int, 256>{}, integral_constant<int, 4>{}, integral_constant<int, 16384>{}, 2);
  tma(integral_constant<int, 256>{}, integral_constant<int, 6>{}, integral_constant<int, 16384>{}, 2);
  tma(integral_constant<int, 256>{}, integral_constant<int, 3>{}, integral_constant<int, 16384>{}, 4);
  tma(integral_constant<int, 512>{}, integral_constant<int, 6>{}, integral_constant<int, 32768>{}, 1);
  tma(integral_constant<int, 256>{}, integral_constant<int, 3>{}, integral_constant<int, 32768>{}, 2);
  tma(integral_constant<int, 256>{}, integral_constant<int, 8>{}, integral_constant<int, 8192>{}, 2);
  tma(integral_constant<int, 256>{}, integral_constant<int, 6>{}, integral_constant<int, 8192>{}, 4);
  auto reg = [&](auto threads_t, auto per_t, int bps) {
    constexpr int kT = decltype(threads_t)::value, kP = decltype(per_t)::value;
    if ((cols * (long)sizeof(T)) % (kP * 16 * kT)) return;
    const int grid = g_sms * bps;
    auto l = [&] { reg_rows<T, kT, kP><<<grid, kT>>>(x, g_out, rows, cols); };
    zero(); l(); CK(cudaDeviceSynchronize()); CK(cudaGetLastError());
    char name[80];
    snprintf(name, sizeof name, "reg t%d p%d x%d/SM", kT, kP, bps);
    check(name, x, rows, cols, ref);
    report(name, time_median(l));
  };
  reg(integral_constant<int, 256>{}, integral_constant<int, 4>{}, 4);
  reg(integral_constant<int, 256>{}, integral_constant<int, 4>{}, 8);
  reg(integral_constant<int, 256>{}, integral_constant<int, 2>{}, 8);
  reg(integral_constant<int, 512>{}, integral_constant<int, 2>{}, 4);
  CK(cudaFree(x));
}

int main() {
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, g_sms);
  CK(cudaMalloc(&g_out, 1 << 24));
  CK(cudaMalloc(&g_flush, kFlushBytes));
  CK(cudaMemset(g_flush, 1, kFlushBytes));
  CK(cudaMalloc(&g_sink, 4));
  const long cb = 1l << 30;
  char *a, *b;
  CK(cudaMalloc(&a, cb));
  CK(cudaMalloc(&b, cb));
  CK(cudaMemset(a, 0, cb));
  const float copy_us = time_median([&] { CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice)); }, 15);
  const double copy_gbps = 2.0 * cb / copy_us / 1e3;
  printf("copy 1 GiB: %.1f us, %.0f GB/s\n", copy_us, copy_gbps);
  CK(cudaFree(a));
  CK(cudaFree(b));
  run_case<float>("float32", 16384, 4096, copy_gbps);
  run_case<float>("float32", 4096, 32768, copy_gbps);
  run_case<float>("float32", 1024, 262144, copy_gbps);
  run_case<__nv_bfloat16>("bfloat16", 4096, 32768, copy_gbps);
  run_case<__nv_bfloat16>("bfloat16", 16384, 4096, copy_gbps);
  run_case<float>("float32", 1, 1l << 30, copy_gbps);
  run_case<float>("float32", 1, 1l << 24, copy_gbps);
  run_case<__nv_bfloat16>("bfloat16", 1, 1l << 24, copy_gbps);
  return 0;
}
