// Host-side launch helpers shared by every CUDA launcher: block and grid sizing, the row-split
// plan, shared-memory opt-in. One place for the constants each launch derives from.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "ops.h"
#include <type_traits>

namespace reduce_ops {
namespace cuda {

constexpr int kBlock = 256;
// Resident 256-thread blocks per SM we aim for (8 x 256 = 2048 threads, the SM's maximum).
constexpr int kBlocksPerSM = 8;
// Fewest elements a split segment of a row holds: below this the second pass costs more than
// the parallelism it buys.
constexpr int64_t kMinSplitChunk = 16384;

template <int N>
using Int = std::integral_constant<int, N>;

// Calls f(Int<n>{}) for the one value of kFirst..kLast that equals n; n outside that range is an
// internal error (the element-row launchers size a lane's values to the row exactly).
template <int kFirst, int kLast, typename F>
void with_int_in(int64_t n, F f) {
  bool found = false;
  [&]<int... kI>(std::integer_sequence<int, kI...>) {
    ((n == kFirst + kI ? (f(Int<kFirst + kI>{}), found = true) : false) || ...);
  }(std::make_integer_sequence<int, kLast - kFirst + 1>{});
  TORCH_INTERNAL_ASSERT(found, n, " is outside ", kFirst, "..", kLast);
}

// Developer knobs for tests, the sanitizer script and measurements, read at each launch so that
// a test can change them between calls:
//   REDUCE_OPS_STRATEGY=<name>  forces a kernel strategy where it applies and can run the shape
//                               (launchers ignore names that are not theirs);
//   REDUCE_OPS_SUM=plain|compensated
//                               sums without or with compensation, whatever the result's dtype
//                               (to measure what compensation costs; reduce.cu's rule otherwise;
//                               rows a lane reads in one round are a plain tree either way);
//   REDUCE_OPS_CLUSTER=<blocks> the row kernels' cluster paths try that cluster size only
//                               (cluster_row: where that many blocks hold the row);
//   REDUCE_OPS_BLOCK_PACKS=2|4|8
//                               the rows' forward block-per-row kernel holds that many packs a
//                               thread where the row fits (softmax_launch.h);
//   REDUCE_OPS_CLUSTER_STAGGER=<ns>
//                               the rows' clusters start phases <ns> apart (0: together),
//                               however few rows they run (softmax_launch.h);
//   REDUCE_OPS_AHEAD=none|registers|shared
//                               how the forward row register kernels load their next row,
//                               where they can (softmax_launch.h);
//   REDUCE_OPS_CLUSTER_HOLD=registers|shared
//                               the rows' cluster kernels hold each block's share in registers
//                               only, or half of it (softmax_backward: out) in shared memory,
//                               the default (softmax_launch.h);
//   REDUCE_OPS_WARP_HELD=float  the rows' forward warp kernel holds 16-bit rows of 3-4 packs a
//                               lane as floats where it would hold their raw words (peeled
//                               rows, unmarked ReduceScale, marked softmax; softmax_launch.h's
//                               launch_warp);
//   REDUCE_OPS_CLUSTER_ROW_HELD=raw|float
//                               cluster_row's 16-bit softmax rows held as raw words or as
//                               exps (softmax_launch.h's cluster_row_choice);
//   REDUCE_OPS_ROW_LOAD=plain|marked
//                               the row kernels' 16-byte loads plain or marked evict_last in
//                               the L2 (by default marked where the call moves at least 3
//                               L2s; softmax_launch.h's row_loads_marked);
//   REDUCE_OPS_BLOCK_HOLD=registers|shared
//                               the same for the forward's block-per-row kernel (by default
//                               shared only where the block would take 513-1023 threads;
//                               softmax_launch.h);
//   REDUCE_OPS_ROW_WAVES=<n>    the grid of the rows' block-per-row register kernels and
//                               warp-per-row kernels, in waves of resident blocks (softmax_launch.h);
//   REDUCE_OPS_COLS_BLOCKS_PER_SM=<n>, REDUCE_OPS_COLS_FOLD_GROUP=<n>
//                               the column reduction's split sizing and first-level fold
//                               (scripts/tune_cols.py);
//   REDUCE_OPS_COLS_FOLD_LAUNCH=<n>
//                               split column launches of at least n segments fold their
//                               partials by a second launch, fewer in the launch (16; reduce.cu);
//   REDUCE_OPS_COLS_ROW_GROUPS=off|on
//                               columns that are not whole 16-byte packs load an element a
//                               thread and row (off), or are reduced as rows of whole packs at
//                               any size (on; reduce.cu's launch_cols_row_groups);
//   REDUCE_OPS_COLS_PACKED=off|on, REDUCE_OPS_COLS_FULL_WIDTH=off|on
//                               the same columns as row groups in one column tile (launch_cols_packed),
//                               or in blocks as wide as the columns (launch_cols_full_width):
//                               never (off) or wherever they apply (on);
//   REDUCE_OPS_REDUCE_CHUNK=<n> the fewest elements of a split reduction row's segment
//                               (whole-tensor reductions; scripts/tune_cols.py --dim -1);
//   REDUCE_OPS_STAGED_MIN=<bytes>
//                               the least input of dense short rows, not whole 16-byte packs,
//                               that are staged in shared memory (768 KB, 1 MB or 4 MB by the
//                               width of the rows' narrow packs, 2, 4 or 8 bytes; reduce.cu's
//                               launch_rows_unsplit; the tests take 1);
//   REDUCE_OPS_INNER_CLUSTER=<n>, REDUCE_OPS_INNER_NARROWEST=<bytes>
//                               the inner-dim softmax tiles' largest cluster (1: none) and
//                               narrowest row of a tile (inner_tiles).
inline bool env_equals(const char* var, const char* value) {
  const char* s = std::getenv(var);
  return s != nullptr && std::strcmp(s, value) == 0;
}

// A positive integer knob's value, or `fallback` when it is unset (values below 1 read as 1).
inline int64_t env_positive(const char* var, int64_t fallback) {
  const char* s = std::getenv(var);
  return s == nullptr ? fallback : std::max<int64_t>(1, std::atoll(s));
}

// A non-negative integer knob's value, or `fallback` when it is unset (negative values read as 0).
inline int64_t env_nonnegative(const char* var, int64_t fallback) {
  const char* s = std::getenv(var);
  return s == nullptr ? fallback : std::max<int64_t>(0, std::atoll(s));
}

// REDUCE_OPS_STRATEGY as one launch sees it: read once (one getenv, ~0.1 us against a launch's
// ~3 us) and asked by name as often as the dispatcher needs.
class ForcedStrategy {
 public:
  ForcedStrategy() : name_(std::getenv("REDUCE_OPS_STRATEGY")) {}
  bool is(const char* name) const { return name_ != nullptr && std::strcmp(name_, name) == 0; }
  // Whether any strategy is forced.
  bool any() const { return name_ != nullptr && *name_ != '\0'; }

 private:
  const char* name_;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline const cudaDeviceProp& props() { return *at::cuda::getCurrentDeviceProperties(); }

inline int64_t sm_count() { return props().multiProcessorCount; }

// The most blocks a grid's x dimension takes (2^31 - 1).
constexpr int64_t kMaxGridBlocks = 2147483647;

// The widest pack, in bytes (a power of two, at most 16), that divides every one of `quantities`
// (addresses, lengths and strides in bytes; 0 divides by anything): the lowest bit set in any.
inline int64_t widest_pack_bytes(std::initializer_list<uint64_t> quantities) {
  uint64_t bits = 16;
  for (const uint64_t q : quantities) bits |= q;
  return static_cast<int64_t>(bits & (~bits + 1));
}

// Grid for `items` independent block-sized work items: one block each, at most four waves of
// resident blocks (kernels loop over the rest).
inline int64_t grid_for(int64_t items) {
  return std::max<int64_t>(1, std::min<int64_t>(items, sm_count() * kBlocksPerSM * 4));
}

// Launch shape of the inner-dim kernels (row_norm.cuh): blocks of block.x packs of `vec` adjacent
// inner columns by block.y rows of threads splitting the cols. block.y is the power of two that
// lets each thread hold its share in `hold` packs (one read), within `threads_max`; past that,
// enough for about 16 rows a thread (held false: two reads). Tiles are as wide as 256 threads
// allow, and narrow down to 32 bytes a row (a whole sector) while there are too few to fill
// the GPU; streamed tiles then take more rows of threads. Where wide_rows allows (WideRows),
// the plan is made with 64 bytes as the narrowest instead.
// Tiles too few for about a block per SM are each split over a thread block cluster (sm_90+) of
// `cluster` blocks: the fewest (a power of two up to max_cluster) that give about a block per SM,
// doubled while their rows of threads (up to threads_max in a block) cannot hold the share in
// `hold` packs a thread, each block keeping kInnerClusterMinBytes of the tile or more. H100,
// benchmarks/inner_softmax.py shapes over dim 0, us for clusters of 1/2/4/8/16 blocks
// (h100_study/session29_inner_clusters.txt): bfloat16 (4096, 1024), 64 tiles: 42.6/23.0/29.8/
// 38.7 (1-8 blocks; past one wave of clusters, 99 registers a thread, the larger ones ran two);
// float32 (16384, 256), 32 tiles: 79/48/44/44/38; float32 (65536, 64), 8 tiles streamed:
// 250/137/80/51/50; float32 (4096, 1024), 128 tiles: 32-35 for all.
struct InnerTiles {
  dim3 block;
  int64_t tiles_per_outer, grid;
  bool held;
  int cluster;
};

// Largest inner-tile cluster: Hopper's non-portable maximum (setup_clusters allows it).
constexpr int kInnerMaxCluster = 16;
// Widest cluster tile in packs (row_norm.cuh's TileScratch slots are sized for it).
constexpr int kInnerClusterTx = 32;
constexpr int64_t kInnerClusterMinBytes = 16384;
// Tile rows of kInnerWideBytes rather than the narrowest (inner_tiles), where the tiles stay
// enough for the GPU without clusters (7/8 of the SMs, as below) and, as the kernel asks:
//   kNever      never (16-bit forward with 16-byte packs: its 512-thread blocks of 64-byte rows
//               take the capped kernel, and lost as often as they won: H100, bfloat16 us, 32 ->
//               64 bytes, over dim 0 (1024, 8192) 24.8 -> 22.9, (1024, 4096) 15.2 -> 16.4,
//               (600, 20000) 33.5 -> 35.0, (1024, 16384) 38.5 -> 39.5; float64 forward with
//               16-byte packs: (1024, 65536) 594 -> 636);
//   kWhereHeld  where the wider tile still holds the share (float32 forward with 16-byte packs;
//               streamed, it lost: float32 (16, 2048, 1024) over dim 1 121 -> 166);
//   kHeldFirst  where the wider tile holds the share, or neither width does (16-bit backward with
//               8-byte packs: a tile of 32-byte rows holding 512 threads' shares beat one of
//               64-byte rows streaming them, bfloat16 (16, 2048, 1020) over dim 1 201 -> 115 us,
//               (2048, 8188) over dim 0 77.6 -> 69.5; 32- and 64-bit forward with scalar loads:
//               float32 (2, 3000, 7001) over dim 1 490 -> 398, float64 (16, 2048, 1023) 450 ->
//               367, where kAlways lost, float32 (16, 2048, 1023) 205 -> 301);
//   kAlways     held or streamed (backward with 16-byte packs and scalar loads; 16-bit forward
//               with 8-byte packs and scalar loads, streamed shares too: bfloat16 (2, 3000,
//               7004) over dim 1 220.2 -> 169.8, (2048, 8188) over dim 0 65.7 -> 53.5,
//               (64, 256, 4095) over dim 1 299.7 -> 175.5, (16, 2048, 1023) 187.4 -> 135.4, but
//               (16, 2048, 1020) 118.2 -> 123.5; h100_study/session35_tile_rows.txt,
//               sections 6 and 8).
// H100, us, 32 -> 64-byte rows (h100_study/session34_wide_rows.txt): float32 forward over dim 0
// (1024, 65536) 251.6 -> 224.7, (1024, 16384) 67.3 -> 62.7, (768, 32768) 95.1 -> 90.2, over dim 1
// (32, 1024, 1024) 117.7 -> 105.5, (8, 1024, 4096) 118.7 -> 107.1, but (600, 20000) 53.3 -> 54.5;
// backward, faster on every shape it moved (even, +-0.1 us, on two), in every dtype and with
// scalar loads: bfloat16 (1024, 65536) 178.1 -> 164.4, (32, 1024, 1024) 89.8 -> 82.4, (16, 2048,
// 1024) 95.4 -> 88.3 (streamed, where 32-byte rows held), (8192, 4096) 114.6 -> 109.4; float32
// (1024, 65536) 357.6 -> 339.9, (32, 1024, 1024) 168.5 -> 148.9, (16, 2048, 1024) 171.0 -> 156.1,
// (600, 20000) 69.4 -> 64.4, unaligned (1024, 65535) 870 -> 646; float64 (32, 1024, 1024) 343 -> 304.
constexpr int kInnerWideBytes = 64;
enum class WideRows { kNever, kWhereHeld, kHeldFirst, kAlways };

// The narrowest inner tile row, in packs of `vec` elements: 32 bytes (a sector), or
// REDUCE_OPS_INNER_NARROWEST bytes (a developer knob).
inline int inner_narrowest(int vec, int element_bytes) {
  return static_cast<int>(std::max<int64_t>(1, env_positive("REDUCE_OPS_INNER_NARROWEST", 32) / (vec * element_bytes)));
}

// Rows of threads (a power of two) of inner-tile blocks `width` packs wide that hold the cols in
// `hold` packs a thread when c blocks share them, or all that threads_max allows.
inline int inner_rows_to_hold(const InnerGeometry& g, int width, int c, int hold, int threads_max) {
  int y = 1;
  while (width * y < threads_max && int64_t{c} * y * hold < g.cols) y *= 2;
  return y;
}

// Whether a plain block (threads_max threads) of tile rows `width` packs wide holds its tile's
// cols in `hold` packs a thread.
inline bool inner_holds(const InnerGeometry& g, int width, int hold, int threads_max) {
  return int64_t{inner_rows_to_hold(g, width, 1, hold, threads_max)} * hold >= g.cols;
}

// inner_holds at the narrowest tile row: inner_tiles' held, without clusters.
inline bool inner_held(const InnerGeometry& g, int vec, int element_bytes, int hold, int threads_max) {
  return inner_holds(g, inner_narrowest(vec, element_bytes), hold, threads_max);
}

// REDUCE_OPS_INNER_CLUSTER (a developer knob) lowers max_cluster.
inline InnerTiles inner_tiles(const InnerGeometry& g, int vec, int element_bytes, int hold, int threads_max,
                              int max_cluster, WideRows wide_rows) {
  const int64_t packs = ceil_div(g.inner, vec), enough = sm_count() * 4;
  const int64_t cluster_free = sm_count() * 7 / 8;  // tiles that need no clusters
  auto rows_to_hold = [&](int width, int c) { return inner_rows_to_hold(g, width, c, hold, threads_max); };
  auto holds = [&](int width) { return inner_holds(g, width, hold, threads_max); };
  auto plan = [&](const int narrowest) {
    const bool held = holds(narrowest);
    int ty = 1;
    if (held) {
      ty = rows_to_hold(narrowest, 1);
    } else {
      while (ty * narrowest < 256 && ty * 16 < g.cols) ty *= 2;
    }
    int tx = std::max(narrowest, 256 / ty);
    while (tx > 1 && tx / 2 >= packs) tx /= 2;
    while (tx > narrowest && g.outer * ceil_div(packs, tx) < enough) tx /= 2;
    if (!held) {
      while (tx * ty * 2 <= threads_max && ty * 16 < g.cols && g.outer * ceil_div(packs, tx) < enough) ty *= 2;
    }
    const int64_t tiles = g.outer * ceil_div(packs, tx);
    const int64_t resident = sm_count() * std::max(1, 2048 / (tx * ty));
    const InnerTiles blocks{dim3(tx, ty), ceil_div(packs, tx), std::max<int64_t>(1, std::min(tiles, resident * 4)), held,
                            1};
    const int64_t most = std::min<int64_t>(max_cluster, env_positive("REDUCE_OPS_INNER_CLUSTER", kInnerMaxCluster));
    if (tx > kInnerClusterTx || most < 2) return blocks;
    const int64_t tile_bytes = g.cols * tx * vec * element_bytes;
    auto may_double = [&](int c) { return c < most && tile_bytes / (2 * c) >= kInnerClusterMinBytes; };
    int c = 1;
    while (may_double(c) && tiles * c < cluster_free) c *= 2;
    while (may_double(c) && int64_t{c} * rows_to_hold(tx, c) * hold < g.cols) c *= 2;
    if (c == 1) return blocks;
    const int cy = rows_to_hold(tx, c);
    return InnerTiles{dim3(tx, cy), ceil_div(packs, tx), tiles * c, int64_t{c} * cy * hold >= g.cols, c};
  };
  const int narrowest = inner_narrowest(vec, element_bytes);
  const int wide = std::max(narrowest, kInnerWideBytes / (vec * element_bytes));
  const bool wide_ok = wide_rows == WideRows::kAlways ||
                       (wide_rows == WideRows::kWhereHeld && holds(wide)) ||
                       (wide_rows == WideRows::kHeldFirst && (holds(wide) || !holds(narrowest)));
  if (wide > narrowest && wide_ok && g.outer * ceil_div(packs, wide) >= cluster_free) return plan(wide);
  return plan(narrowest);
}

// Split of `rows` rows of `cols` elements into segments of whole 16-byte packs (64 elements
// covers every dtype) of at least min_chunk elements, enough of them to give each SM
// kBlocksPerSM blocks.
struct RowSplit {
  int64_t splits, chunk;
};

inline RowSplit split_rows(int64_t rows, int64_t cols, int64_t min_chunk = kMinSplitChunk) {
  const int64_t target_blocks = sm_count() * kBlocksPerSM;
  int64_t splits = std::max<int64_t>(1, std::min(ceil_div(target_blocks, rows), ceil_div(cols, min_chunk)));
  const int64_t chunk = ceil_div(ceil_div(cols, splits), 64) * 64;
  return {ceil_div(cols, chunk), chunk};
}

// Room left beside dynamic shared memory for the kernels' static shared memory (reduction
// scratch, exchange slots, mbarriers: a few hundred bytes).
constexpr int64_t kStaticSmemRoom = 1024;

// Shared memory a block may ask for, less room for the kernels' static shared memory.
inline int64_t block_smem_limit() { return static_cast<int64_t>(props().sharedMemPerBlockOptin) - kStaticSmemRoom; }

// Lets `kernel` use `bytes` of dynamic shared memory. Without the request a launch may use 48 KB in
// all, static and dynamic together: 48 KB of dynamic shared memory exactly (e.g. 384 threads x 8
// packs of 16 bytes) beside any static shared memory failed to launch (invalid argument).
template <typename Kernel>
void allow_smem(Kernel kernel, int64_t bytes) {
  if (bytes + kStaticSmemRoom > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

// The answer of `query` (an occupancy API call about `kernel` at one launch shape, named by
// shape_a and shape_b; with no kernel, a device attribute) on the current device, asked once per
// (device, kernel, shape): the query costs microseconds of host time that a launch should not pay
// every call.
template <typename Query>
int memoized_kernel_query(const void* kernel, int64_t shape_a, int64_t shape_b, Query query) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static auto* answers = new std::map<std::tuple<int, const void*, int64_t, int64_t>, int>();  // never freed
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, kernel, shape_a, shape_b);
  auto it = answers->find(key);
  if (it == answers->end()) it = answers->emplace(key, query()).first;
  return it->second;
}

// The current device's DRAM bandwidth per SM, GB/s: two transfers a memory clock over the bus,
// over the SMs (H100 SXM 25: 3.35 TB/s over 132 SMs; H200 36: 4.8 TB/s). The memory clock is
// asked once a device: the query costs about 0.6 ms of host time (H200).
inline double dram_gbps_per_sm() {
  const int khz = memoized_kernel_query(nullptr, cudaDevAttrMemoryClockRate, 0, [] {
    int device = 0, value = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMemoryClockRate, device));
    return value;
  });
  return 2e-6 * khz * props().memoryBusWidth / 8 / static_cast<double>(sm_count());
}

// Whether launch_dependent launches as a programmatic dependent: on sm_90 and later, unless
// REDUCE_OPS_DEPENDENT=0 (read once a process; for measurements and tools that mishandle them).
inline bool dependent_launches() {
  static const bool enabled = env_nonnegative("REDUCE_OPS_DEPENDENT", 1) != 0;
  return enabled && props().major >= 9;
}

// Launches `kernel` on `grid` blocks of `block` threads with `smem` bytes of dynamic shared memory
// as a programmatic dependent of the kernel before it in `stream` (where dependent_launches(); a
// plain launch otherwise): its blocks may start while that kernel's last blocks run, and wait
// (wait_for_prerequisite, primitives.cuh) for it to finish before touching what it writes.
template <typename Kernel, typename... Args>
void launch_dependent(Kernel kernel, int64_t grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = dependent_launches() ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Sets `config` up (with `attr`, its cluster dimension, which must outlive it) to launch `kernel`
// on clusters of `blocks` blocks of `block` threads and `smem` bytes of dynamic shared memory
// (a function of the block for a given kernel, so that the memoized answer stays right), its
// grid one cluster; returns how many such clusters the device runs at once (0: it cannot run
// them, or the device has no clusters: before sm_90).
template <typename Kernel>
int setup_clusters(cudaLaunchConfig_t& config, cudaLaunchAttribute& attr, Kernel kernel, int blocks, dim3 block,
                   int64_t smem, cudaStream_t stream) {
  if (props().major < 9) return 0;
  allow_smem(kernel, smem);  // before the occupancy query, which counts it
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = blocks;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = block;
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  // Keyed by -blocks: resident_blocks' keys start with a thread count.
  return memoized_kernel_query(reinterpret_cast<const void*>(kernel), -blocks, block.x * block.y * block.z, [&] {
    if (blocks > 8) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // an unsupported cluster shape: clear the error, fall back
      clusters = 0;
    }
    return clusters;
  });
}

// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that one SM holds at
// once (at least 1).
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, size_t smem) {
  return memoized_kernel_query(reinterpret_cast<const void*>(kernel), threads, static_cast<int64_t>(smem), [&] {
    int blocks = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
    return std::max(blocks, 1);
  });
}

// The most threads a block of `kernel` may have: its registers bound it below 1024 where it
// has no launch bounds.
template <typename Kernel>
int max_block_threads(Kernel kernel) {
  // Keyed by (0, -1): no occupancy query has a thread count of 0.
  return memoized_kernel_query(reinterpret_cast<const void*>(kernel), 0, -1, [&] {
    cudaFuncAttributes attr{};
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return attr.maxThreadsPerBlock;
  });
}

// A block per row: about four packs per thread, 128 to 1024 threads.
inline int block_per_row_threads(int64_t packs) {
  int block = 128;
  while (block < 1024 && block * 4 < packs) block *= 2;
  return block;
}

}  // namespace cuda
}  // namespace reduce_ops
