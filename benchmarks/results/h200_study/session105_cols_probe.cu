// Session 105 probe: why do column reductions (sum over dim 0 of a row-major M x N) take ~4 us
// more than row reductions of the same bytes on the H200, at 256 MB to 1 GB alike? Plain float
// sums, timing only (the result is checked once against a double sum on the host per config).
//
//   flat   the same bytes read as one contiguous stream: a block a contiguous segment, 256
//          threads x U packs a round (the read ceiling; partials only, no per-column result)
//   rows   the same bytes as M rows reduced over dim -1, a block a row, 256 x U packs a round
//   tile   a column reduction: a block = `lanes` threads across a tile of lanes x 16 bytes of
//          columns x (256 / lanes) rows of threads, each thread U rows in flight a round; the
//          reduced dim split in `splits` segments (partials folded by a second kernel); blocks
//          numbered tile-first (t) or split-first (s); or (i) tile-first with the splits
//          interleaved: segment s takes the groups of by x U rows s, s + splits, s + 2 splits, ...,
//          so that the blocks of a wave read one window of rows that slides down the tensor
//   flat-g the flat read as a grid-stride loop (a window sliding down the tensor, as (i))
//
// Each config is timed by CUDA events around its kernel(s), after a 512 MB read flush, 30 times:
// the median is printed in us and as GB/s of the input.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                     \
      printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__);               \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

// The loads' cache hint (g_hint, set per config): 0 none, 1 L2::256B (the L2 fetches the
// 256-byte block around the line), 2 L1::no_allocate.L2::256B, 3 L2::128B.
__device__ int g_hint;
__device__ __forceinline__ uint4 ldg_nc(const void* p) {
  uint4 v;
  const int h = g_hint;
  if (h == 1)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (h == 2)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (h == 3)
    asm volatile("ld.global.nc.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <typename T>
struct Pack;
template <>
struct Pack<float> {
  static constexpr int kV = 4;
  __device__ static void add(float* a, uint4 w) {
    a[0] += __uint_as_float(w.x), a[1] += __uint_as_float(w.y), a[2] += __uint_as_float(w.z), a[3] += __uint_as_float(w.w);
  }
};
template <>
struct Pack<__nv_bfloat16> {
  static constexpr int kV = 8;
  __device__ static void add(float* a, uint4 w) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) a[2 * i] += __uint_as_float(u[i] << 16), a[2 * i + 1] += __uint_as_float(u[i] & 0xffff0000u);
  }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// flat: block b reads packs [b * seg, (b + 1) * seg), U a thread in flight.
template <typename T, int U>
__global__ void __launch_bounds__(256) flat_kernel(const uint4* x, float* part, long packs, long seg) {
  const long b0 = blockIdx.x * seg, b1 = min(packs, b0 + seg);
  float acc[Pack<T>::kV] = {};
  for (long p = b0 + threadIdx.x; p < b1; p += 256 * U) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = p + k * 256 < b1 ? ldg_nc(x + p + k * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < U; ++k) Pack<T>::add(acc, v[k]);
  }
  float s = 0.f;
  for (int i = 0; i < Pack<T>::kV; ++i) s += acc[i];
  s = warp_sum(s);
  __shared__ float w[8];
  if (threadIdx.x % 32 == 0) w[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < 8; ++i) t += w[i];
    part[blockIdx.x] = t;
  }
}

// flat-g: rounds of 256 x U packs, block b taking rounds b, b + gridDim.x, ...
template <typename T, int U>
__global__ void __launch_bounds__(256) flat_grid_kernel(const uint4* x, float* part, long packs) {
  float acc[Pack<T>::kV] = {};
  for (long p = blockIdx.x * 256L * U + threadIdx.x; p < packs; p += gridDim.x * 256L * U) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = p + k * 256 < packs ? ldg_nc(x + p + k * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < U; ++k) Pack<T>::add(acc, v[k]);
  }
  float s = 0.f;
  for (int i = 0; i < Pack<T>::kV; ++i) s += acc[i];
  s = warp_sum(s);
  __shared__ float w[8];
  if (threadIdx.x % 32 == 0) w[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < 8; ++i) t += w[i];
    part[blockIdx.x] = t;
  }
}

// rows: a block a row of `rp` packs.
template <typename T, int U>
__global__ void __launch_bounds__(256) rows_kernel(const uint4* x, float* out, long rp) {
  const uint4* row = x + blockIdx.x * rp;
  float acc[Pack<T>::kV] = {};
  for (long p = threadIdx.x; p < rp; p += 256 * U) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = p + k * 256 < rp ? ldg_nc(row + p + k * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < U; ++k) Pack<T>::add(acc, v[k]);
  }
  float s = 0.f;
  for (int i = 0; i < Pack<T>::kV; ++i) s += acc[i];
  s = warp_sum(s);
  __shared__ float w[8];
  if (threadIdx.x % 32 == 0) w[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < 8; ++i) t += w[i];
    out[blockIdx.x] = t;
  }
}

// tile: see the header. np = N / kV packs a row; chunk rows a segment (a multiple of by * U).
template <typename T, int U>
__global__ void __launch_bounds__(256) tile_kernel(const uint4* x, float* part, long M, long np, int lanes, int tiles,
                                                   int splits, long chunk, int mode) {
  const bool split_first = mode == 1;
  constexpr int kV = Pack<T>::kV;
  const int by = 256 / lanes;
  const int tile = split_first ? blockIdx.x / splits : blockIdx.x % tiles;
  const int split = split_first ? blockIdx.x % splits : blockIdx.x / tiles;
  const int lane = threadIdx.x % lanes, ry = threadIdx.x / lanes;
  const long cp = static_cast<long>(tile) * lanes + lane;  // column pack
  float acc[kV] = {};
  const long r0 = split * chunk, r1 = min(M, r0 + chunk);
  if (cp < np && mode == 2) {
    const long g = static_cast<long>(by) * U;
    for (long r = split * g + ry; r < M; r += splits * g) {
      uint4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = r + k * by < M ? ldg_nc(x + (r + k * by) * np + cp) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < U; ++k) Pack<T>::add(acc, v[k]);
    }
  } else if (cp < np) {
    for (long r = r0 + ry; r < r1; r += static_cast<long>(by) * U) {
      uint4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = r + k * by < r1 ? ldg_nc(x + (r + k * by) * np + cp) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < U; ++k) Pack<T>::add(acc, v[k]);
    }
  }
  extern __shared__ float sm[];  // by x lanes x kV
  if (by > 1) {
    for (int i = 0; i < kV; ++i) sm[(ry * lanes + lane) * kV + i] = acc[i];
    __syncthreads();
    if (ry == 0) {
      for (int y = 1; y < by; ++y)
        for (int i = 0; i < kV; ++i) acc[i] += sm[(y * lanes + lane) * kV + i];
    }
  }
  if (ry == 0 && cp < np) {
    float* dst = part + static_cast<long>(split) * np * kV + cp * kV;
    for (int i = 0; i < kV; ++i) dst[i] = acc[i];
  }
}

// fold: out[c] = sum over splits of part[s][c]: a block 32 columns x 8 rows of splits, the 8
// partial sums of a column folded in shared memory.
__global__ void fold_kernel(const float* part, float* out, long n, int splits) {
  const long c = blockIdx.x * 32L + threadIdx.x % 32;
  const int sub = threadIdx.x / 32;
  float s = 0.f;
  if (c < n)
    for (int k = sub; k < splits; k += 8) s += part[k * n + c];
  __shared__ float sm[8][32];
  sm[sub][threadIdx.x % 32] = s;
  __syncthreads();
  if (sub == 0 && c < n) {
    float t = 0.f;
    for (int k = 0; k < 8; ++k) t += sm[k][threadIdx.x];
    out[c] = t;
  }
}

__global__ void flush_kernel(const uint4* f, long n, unsigned* sink) {
  unsigned s = 0;
  for (long i = blockIdx.x * 256L + threadIdx.x; i < n; i += gridDim.x * 256L) s ^= ldg_nc(f + i).x;
  if (s == 0x12345678u) *sink = s;
}

static int g_sms;
static const uint4* g_flush;
static long g_flush_n;
static unsigned* g_sink;

template <typename F>
float time_it(F&& launch, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  launch();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    flush_kernel<<<g_sms * 8, 256>>>(g_flush, g_flush_n, g_sink);
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

template <typename T>
void run_shape(long M, long N, const char* tname) {
  constexpr int kV = Pack<T>::kV;
  const long np = N / kV, packs = M * np;
  const size_t bytes = packs * 16;
  uint4* x;
  CK(cudaMalloc(&x, bytes));
  // Random-ish values in [-1, 1): a hash of the index, written on the host in chunks.
  {
    std::vector<T> h(static_cast<size_t>(M) * N);
    for (size_t i = 0; i < h.size(); ++i) {
      uint32_t s = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32);
      s ^= s >> 15;
      s *= 2246822519u;
      s ^= s >> 13;
      h[i] = static_cast<T>((s & 0xffff) / 32768.f - 1.f);
    }
    CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  // Host reference per column (double), from the device copy to avoid conversion questions.
  std::vector<double> ref(N, 0.0);
  {
    std::vector<T> h(static_cast<size_t>(M) * N);
    CK(cudaMemcpy(h.data(), x, bytes, cudaMemcpyDeviceToHost));
    for (long r = 0; r < M; ++r)
      for (long c = 0; c < N; ++c) ref[c] += static_cast<double>(static_cast<float>(h[r * N + c]));
  }
  float *part, *out;
  CK(cudaMalloc(&part, sizeof(float) * 8 * 1024 * 1024));
  CK(cudaMalloc(&out, sizeof(float) * N));
  const double gb = bytes / 1e9;
  auto report = [&](const char* name, float us, bool checked, double err) {
    printf("%-9s %6ldx%-7ld %-28s %8.2f us %7.0f GB/s%s\n", tname, M, N, name, us, gb / (us * 1e-6),
           checked ? (err < 1e-3 ? "" : "  WRONG") : "");
    if (checked && err >= 1e-3) printf("   max rel err %.3g\n", err);
  };
  // flat
  for (int bps : {4, 8}) {
    const long blocks = static_cast<long>(g_sms) * bps;
    const long seg = (packs + blocks - 1) / blocks;
    const float us = time_it([&] { flat_kernel<T, 4><<<blocks, 256>>>(x, part, packs, seg); });
    char nm[64];
    snprintf(nm, sizeof nm, "flat bps%d U4", bps);
    report(nm, us, false, 0);
  }
  for (int bps : {4, 8}) {
    const long blocks = static_cast<long>(g_sms) * bps;
    const float us = time_it([&] { flat_grid_kernel<T, 4><<<blocks, 256>>>(x, part, packs); });
    char nm[64];
    snprintf(nm, sizeof nm, "flat-g bps%d U4", bps);
    report(nm, us, false, 0);
  }
  // rows (dim -1 of the same bytes)
  {
    const float us = time_it([&] { rows_kernel<T, 4><<<M, 256>>>(x, part, np); });
    report("rows U4", us, false, 0);
  }
  // tile configs
  for (int lanes : {16, 32, 64, 128, 256}) {
    for (int U : {4, 8}) {
      for (int bps : {4, 8}) {
        for (int sf : {0, 2, 3}) {
          const bool nofold = sf == 3;  // (i) without the fold kernel: the read alone
          if (nofold) sf = 2;
          const int by = 256 / lanes;
          const int tiles = static_cast<int>((np + lanes - 1) / lanes);
          long want = static_cast<long>(g_sms) * bps;
          int splits = static_cast<int>(std::max(1L, want / tiles));
          const long step = static_cast<long>(by) * U;
          long chunk = (M + splits - 1) / splits;
          chunk = (chunk + step - 1) / step * step;
          splits = static_cast<int>((M + chunk - 1) / chunk);
          if (static_cast<long>(splits) * np * kV > 8L * 1024 * 1024) continue;
          if (splits == 1 && sf) continue;
          const size_t smem = by > 1 ? sizeof(float) * 256 * kV : 0;
          const long blocks = static_cast<long>(tiles) * splits;
          auto launch = [&] {
            if (U == 4)
              tile_kernel<T, 4><<<blocks, 256, smem>>>(x, part, M, np, lanes, tiles, splits, chunk, sf);
            else
              tile_kernel<T, 8><<<blocks, 256, smem>>>(x, part, M, np, lanes, tiles, splits, chunk, sf);
            if (splits > 1 && !nofold) fold_kernel<<<(N + 31) / 32, 256>>>(part, out, N, splits);
          };
          launch();
          CK(cudaDeviceSynchronize());
          if (nofold) {
            char nm[96];
            snprintf(nm, sizeof nm, "tile L%d U%d bps%d i-nofold s%d", lanes, U, bps, splits);
            report(nm, time_it(launch), false, 0);
            continue;
          }
          std::vector<float> got(N);
          CK(cudaMemcpy(got.data(), splits > 1 ? out : part, sizeof(float) * N, cudaMemcpyDeviceToHost));
          double err = 0;
          for (long c = 0; c < N; ++c) err = std::max(err, std::fabs(got[c] - ref[c]) / (1.0 + std::fabs(ref[c])));
          const float us = time_it(launch);
          char nm[96];
          snprintf(nm, sizeof nm, "tile L%d U%d bps%d %c s%d", lanes, U, bps, "tsi"[sf], splits);
          report(nm, us, true, err);
        }
      }
    }
  }
  CK(cudaFree(x));
  CK(cudaFree(part));
  CK(cudaFree(out));
}

int main(int argc, char** argv) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  g_sms = p.multiProcessorCount;
  printf("%s, %d SMs, L2 %d MB\n", p.name, g_sms, p.l2CacheSize >> 20);
  g_flush_n = (512L << 20) / 16;
  uint4* f;
  CK(cudaMalloc(&f, g_flush_n * 16));
  CK(cudaMemset(f, 1, g_flush_n * 16));
  g_flush = f;
  CK(cudaMalloc(&g_sink, 4));
  const char* only = argc > 1 ? argv[1] : "";
  const int hint = argc > 2 ? atoi(argv[2]) : 0;
  CK(cudaMemcpyToSymbol(g_hint, &hint, sizeof hint));
  printf("load hint %d\n", hint);
  auto want = [&](const char* key) { return !*only || strstr(only, key); };
  if (want("f32_16384x4096")) run_shape<float>(16384, 4096, "float32");
  if (want("f32_65536x1024")) run_shape<float>(65536, 1024, "float32");
  if (want("f32_4096x32768")) run_shape<float>(4096, 32768, "float32");
  if (want("f32_1024x262144")) run_shape<float>(1024, 262144, "float32");
  if (want("bf16_4096x32768")) run_shape<__nv_bfloat16>(4096, 32768, "bfloat16");
  if (want("bf16_16384x4096")) run_shape<__nv_bfloat16>(16384, 4096, "bfloat16");
  if (want("bf16_65536x1024")) run_shape<__nv_bfloat16>(65536, 1024, "bfloat16");
  return 0;
}
