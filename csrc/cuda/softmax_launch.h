// Launch of softmax, ReduceScale and softmax_backward: the dispatchers that pick the strategy by
// row length (launch_row_norm, launch_backward_rows) and the inner-dim launchers. Included by the
// launcher files (softmax.cu: softmax's rows and softmax_backward; reduce_scale.cu; softmax_inner.cu),
// so that their kernels compile in parallel: in one file they made the build's longest compile
// (4-5 minutes on 2 cores, about 2 split in three). Everything here has internal linkage (an
// unnamed namespace): each file instantiates the templates it launches.
#pragma once
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <type_traits>

#include "common/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_norm.cuh"
#include "cuda/softmax_backward.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {
namespace {

// Strategies of the row dispatchers below, in the order the automatic choice tries them; the
// names are those REDUCE_OPS_STRATEGY forces (launch.h), where the shape allows it:
//   "warp"     rows of at most kMaxWarpPacks packs per lane x 32 lanes, in registers.
//   "block"    one block per row, the row in registers and, for rows that would need a block of
//              more than 512 threads (16-byte packs, sm_90+), half of each thread's share in shared
//              memory.
//   "cluster_row"
//              a thread block cluster per row, a cluster for every row at once (not persistent),
//              the row in the blocks' registers; the blocks meet through each other's shared
//              memory and an mbarrier, no barrier (aligned rows of 16-byte packs, float
//              accumulation, sm_90+, up to 16 blocks of 256 threads x 64 values). Tried before
//              "block" for 16-bit rows past 40960 values, and shorter ones (float32 too) where
//              they are few (cluster_row_before_block).
//   "cluster"  a thread block cluster per row at a time (persistent), the row in the blocks'
//              registers and (16-byte packs) half of each block's share in its shared memory
//              (aligned rows, sm_90+, a cluster shape the device can schedule).
//   "smem"     one block per row, the row in shared memory (unaligned rows: its aligned middle
//              by one bulk copy on sm_90+; or no cluster).
//   "split"    any row: partials, then apply (two reads).
// Rows that are not whole 16-byte packs, or start off 16 bytes, are "peeled" where y's rows lie
// on x's misalignment (launch_row_norm): "warp", "block" and "cluster_row" hold their aligned
// middles by packs and their heads and tails an element a thread (row_norm.cuh's RowPacks);
// "cluster" takes aligned rows only, and the others' unaligned rows go element by element.

// Packs a warp-path lane holds at most (registers: 8 packs x 16 bytes).
constexpr int kMaxWarpPacks = 8;
// Packs (16 bytes) a register-kernel thread holds at most: 32 registers of data, which the
// 64-register cap of a 1024-thread block leaves room for; 4 for double, whose exp and division
// need more registers of their own (8 spilled).
template <typename Acc>
constexpr int kMaxRegPacks = sizeof(Acc) == 8 ? 4 : 8;
// Threads of a register-kernel block when the row allows: 512 threads x <= 64 registers lets two
// blocks share an SM so one block's loads overlap the other's reductions and stores.
// Against 256 (2 packs a thread to 512 packs, 4 to 1024, REDUCE_OPS_BLOCK_PACKS=4), H200, us
// (h200_study/session108.txt, call 2): float32 softmax 16384 x 4096 128.45 against 128.96, 16384 x
// 3072 97.70 against 97.89, 8192 x 6144 (4 packs against 8) 98.24 against 98.62; ReduceScale 16384
// x 4096 128.64 against 129.09, 8192 x 8192 129.06 against 129.98 (8 packs); bfloat16 ReduceScale
// 16384 x 4096 67.36 against 67.55. Float32 rows under the loads' marks are the exception (below).
constexpr int kPreferredRegThreads = 512;
constexpr int kMaxRegThreads = 1024;
// Largest cluster: 16 blocks is Hopper's non-portable maximum (8 portable), checked per launch
// by cudaOccupancyMaxActiveClusters.
constexpr int kMaxClusterBlocks = 16;

// Threads for `packs` packs at `per_thread` packs each, in whole warps.
inline int warps_of_threads(int64_t packs, int per_thread) {
  return static_cast<int>(ceil_div(ceil_div(packs, per_thread), kWarpSize) * kWarpSize);
}

template <Ahead kMode>
using AheadTag = std::integral_constant<Ahead, kMode>;

// Returns run(AheadTag<mode>{}) with the register kernels' way of loading the next row (NextRow,
// row_norm.cuh): `automatic`, or the mode REDUCE_OPS_AHEAD=none|registers|shared names (a
// developer knob, for measurement), each where the kernel has it (kRegistersOk; kSharedOk and
// sm_90+ for the bulk copies), else none.
template <bool kRegistersOk, bool kSharedOk, typename Run>
decltype(auto) with_ahead(Ahead automatic, Run run) {
  Ahead mode = automatic;
  if (env_equals("REDUCE_OPS_AHEAD", "none")) mode = Ahead::kNone;
  else if (env_equals("REDUCE_OPS_AHEAD", "shared")) mode = Ahead::kShared;
  else if (env_equals("REDUCE_OPS_AHEAD", "registers")) mode = Ahead::kRegisters;
  if constexpr (kSharedOk) {
    if (mode == Ahead::kShared && props().major >= 9) return run(AheadTag<Ahead::kShared>{});
  }
  if constexpr (kRegistersOk) {
    if (mode == Ahead::kRegisters) return run(AheadTag<Ahead::kRegisters>{});
  }
  return run(AheadTag<Ahead::kNone>{});
}

// Bytes a row op moves: x read, y written.
template <typename In, typename Out>
int64_t row_traffic(const RowGeometry& g) {
  return g.rows * g.cols * static_cast<int64_t>(sizeof(In) + sizeof(Out));
}

// Whether a row kernel marks its 16-byte loads evict_last (load_evict_last; the kernels'
// kLastLoads): where the call moves at least kMarkedTrafficL2s times the L2's size, read and write
// counted. In a stream that large, with x's lines kept, the L2 gives up the output's dirty lines
// first as it makes room; in one that nearly fits, the marks hold x's lines (read once) and push
// out the output, which unmarked would still sit in the L2 as the kernel ended. H200 (L2 60 MiB;
// h200_study/session59_rows.txt), plain -> marked, us:
//   warp:     float32 ReduceScale 442368 x 128 (455 MB moved) 113.5 -> 110.7, 32768 x 128 (34 MB)
//             12.4 -> 13.0; bfloat16 65536 x 1024 (269 MB) 70.3 -> 67.4, 8192 x 1024 (34 MB)
//             12.4 -> 13.0;
//   block:    float32 softmax 8192 x 4096 (268 MB) 67.5 -> 66.8, 2048 x 4096 (67 MB) 20.2 -> 20.8;
//   staged:   bfloat16 softmax 8192 x 36864 (1.2 GB) 305.3 -> 294.0, 512 x 36864 (75 MB) 27.7 -> 28.9;
//   backward: float32 4096 x 32768 (1.6 GB) 398.5 -> 390.6 (cluster), 4096 x 4096 (201 MB)
//             52.3 -> 51.0 (block), 65536 x 100 (79 MB) 24.1 -> 26.2 (warp).
// The forward's clusters gained nothing (1024 x 262144, 2048 x 131072: within 0.1 us) and load
// plainly. Session 59 had kept 16-bit softmax rows on the warp kernel plain at any size (bfloat16
// 65536 x 1024, 268 MB, 67.6 -> 68.7, 442368 x 128 58.2 -> 58.5), timed before the timer reset the
// L2's persisting lines between timings (bench.py's Timer, since session 104): marked lines outlive
// any flush in the persisting set-aside (11.25 MB on the H200), so a plain mode timed after a marked
// one on the same input found part of it in the L2. Timed with the reset they gain like the rest:
// H200 (rows_ab.py, h200_study/session104.txt, call 10), bfloat16, plain -> marked, us
// (torch.compile): 442368 x 128 59.49 -> 58.53 (60.61), 262144 x 256 68.80 -> 67.62, 131072 x 512
// 68.86 -> 67.84, 524288 x 192 100.54 -> 97.70, 1048576 x 64 68.64 -> 68.22, peeled 262144 x 200
// 58.50 -> 58.24; rows of 3-4 packs a lane then take raw words (launch_warp).
// REDUCE_OPS_ROW_LOAD=plain|marked (a developer knob, for measurement) forces either, wherever the
// kernel has 16-byte packs.
constexpr int64_t kMarkedTrafficL2s = 3;
inline bool row_loads_marked(int64_t traffic_bytes) {
  const char* knob = std::getenv("REDUCE_OPS_ROW_LOAD");
  if (knob != nullptr && std::strcmp(knob, "plain") == 0) return false;
  if (knob != nullptr && std::strcmp(knob, "marked") == 0) return true;
  return traffic_bytes >= kMarkedTrafficL2s * props().l2CacheSize;
}

// run(std::true_type{}) where `marked` holds and kOk (the kernel has 16-byte packs to mark), else
// run(std::false_type{}): the kernel's kLastLoads (row_loads_marked).
template <bool kOk, typename Run>
decltype(auto) with_marked_loads(bool marked, Run run) {
  if constexpr (kOk) {
    if (marked) return run(std::true_type{});
  }
  return run(std::false_type{});
}

// Bytes of a shared-memory stage of kPacks packs per thread of a `threads`-thread block (NextRow's
// kShared layout): the forward clusters' next row, or the staged clusters' half of the row.
template <typename In, int kVec, int kPacks>
int64_t stage_smem(int threads) {
  return int64_t{kPacks} * threads * kVec * static_cast<int64_t>(sizeof(In));
}

// Dynamic shared memory of a forward cluster kernel of `threads` threads holding kPacks packs
// per thread: its next row's packs under Ahead::kShared, none otherwise.
template <Ahead kMode, typename In, int kVec, int kPacks>
int64_t ahead_smem(int threads) {
  return kMode == Ahead::kShared ? stage_smem<In, kVec, kPacks>(threads) : 0;
}

// Grid of a row kernel whose blocks loop over `items` rows (or groups of rows, one per warp or
// lane group) with a grid stride: `automatic` (at most items), unless REDUCE_OPS_ROW_WAVES=<n>
// (a developer knob: tests use it to make each block run several rows) caps it at n waves of
// resident blocks instead.
template <typename Kernel>
int64_t row_loop_grid(Kernel kernel, int64_t items, int threads, int64_t smem, int64_t automatic) {
  const int64_t waves = env_positive("REDUCE_OPS_ROW_WAVES", 0);
  if (waves == 0) return automatic;
  return std::max<int64_t>(1, std::min(items, waves * sm_count() * resident_blocks(kernel, threads, static_cast<size_t>(smem))));
}

// Grid of a block-per-row register kernel over `rows` rows (row_loop_grid): one block per row
// (grid.x's limit past 2^31 - 1 rows). H200 (tune_rows.py), against grid_for's 4 waves of blocks
// that each looped over ~4 rows: float32 65536 x 2048 softmax 90% -> 96% of copy, ReduceScale
// 90 -> 96, backward 97 -> 101; 16384 x 4096 softmax 92 -> 94, ReduceScale 92 -> 94; bfloat16
// 16384 x 4096 ReduceScale 86 -> 89, backward 93 -> 96, softmax 87 -> 86 (noise). Fewer waves lost
// (1 or 2 waves: 16384 x 4096 float32 softmax 92% -> 87%).
template <typename Kernel>
int64_t row_kernel_grid(Kernel kernel, int64_t rows, int threads, int64_t smem) {
  return row_loop_grid(kernel, rows, threads, smem, std::min<int64_t>(rows, kMaxGridBlocks));
}

// Grid of a warp-per-row kernel (a lane group per row, `groups` blocks' worth of rows): at most
// kWarpRowWaves waves of resident blocks, so that on the largest grids each lane group runs a few
// rows (its next one loaded ahead). H200 (tune_rows.py), 16 waves against grid_for's 4 and one
// row per group: float32 442368 x 128 ReduceScale 91% / 93% / 92% of copy, softmax 93 / 95 / 95,
// backward 97 / 99 / 100; bfloat16 262144 x 256 ReduceScale 88 / 90 / 84, softmax 90 / 91 / 88,
// backward 93 / 96 / 94 (one row per group lost on 16-bit rows: blocks of 4 KB).
constexpr int kWarpRowWaves = 16;
// Peeled rows (RowPacks: an unaligned row's edges an element a lane beside its packs) take 4 waves,
// so each lane group runs several rows, the next one loaded ahead. H200 (rows_ab2.py,
// h200_study/session61_peeled_warp.txt), us, 16 -> 4 waves: softmax bfloat16 131072 x 37 16.6 ->
// 14.9, 65536 x 77 15.9 -> 14.2, 65536 x 150 21.5 -> 19.2, 32768 x 263 19.4 -> 17.4, 32768 x 511
// 24.6 -> 23.2; ReduceScale 15.9 -> 15.0, 15.5 -> 14.6, 20.9 -> 19.4, 18.7 -> 17.1, 24.2 -> 23.0;
// 32768 x 197 even. The float32 forward's peeled warp rows (of up to 16 whole packs, and of
// 256-515) were measured on 4 waves only.
constexpr int kPeeledWarpWaves = 4;
template <typename Kernel>
int64_t warp_kernel_grid(Kernel kernel, int64_t groups, bool peeled = false) {
  const int64_t waves =
      int64_t{peeled ? kPeeledWarpWaves : kWarpRowWaves} * sm_count() * resident_blocks(kernel, kBlock, 0);
  return row_loop_grid(kernel, groups, kBlock, 0, std::max<int64_t>(1, std::min(groups, waves)));
}

// Grid of a block-per-row register kernel (row_kernel_grid) whose blocks, where `small`, run on
// `var`=<n> waves of resident blocks instead (kWarpRowWaves when unset), each looping over rows;
// `var`=off keeps a block a row. The SMs take up new blocks at a bounded rate: 131072 blocks of one
// warp took 85 us whatever their rows' length, so blocks that move few bytes each wait on it
// (launch_block and launch_backward_rows' block say which and what it gained).
template <typename Kernel>
int64_t small_block_grid(Kernel kernel, int64_t rows, int threads, bool small, const char* var) {
  if (!small || env_equals(var, "off")) return row_kernel_grid(kernel, rows, threads, 0);
  const int64_t waves = env_positive(var, kWarpRowWaves);
  const int64_t resident = sm_count() * int64_t{resident_blocks(kernel, threads, 0)};
  return row_loop_grid(kernel, rows, threads, 0, std::min(rows, waves * resident));
}

// The "tile" kernels: a lane holds up to kTilePer values of a row, so rows of up to kTileMaxCols
// (32 lanes); grids of kRowTileWaves (row_norm_tile_kernel) or kBackwardTileWaves waves of resident
// blocks (REDUCE_OPS_ROW_WAVES overrides). H200 (rows_ab2.py, h200_study/session63_tiles.txt, call
// 7), us, the forward's 2 waves -> 1: float32 softmax 131072 x 17 11.74 -> 10.98, 131072 x 25 13.34
// -> 12.86, ReduceScale 11.49 -> 10.85, 13.15 -> 12.90; bfloat16 ReduceScale 262144 x 20 15.92 ->
// 15.58, the rest of 17-31 even; call 8 the same (float32 softmax 131072 x 19 12.22 -> 11.36,
// bfloat16 262144 x 20 16.16 -> 15.74) and rows of 3-13 within 1%. The backward lost on 1
// (bfloat16 262144 x 20 15.68 -> 17.97, 131072 x 31 13.02 -> 14.08; session 62: 4 even).
constexpr int kTilePer = 8;
constexpr int64_t kTileMaxCols = 32 * kTilePer;
constexpr int kRowTileWaves = 1;
constexpr int kBackwardTileWaves = 2;

// Rows a tile holds a multiple of, so that it is a multiple of 16 bytes: rows of `row_bytes`.
inline int64_t tile_unit(int64_t row_bytes) { return 16 / std::gcd(row_bytes, int64_t{16}); }

// Whether the tile kernels take rows of `cols` elements of `bytes` each, `inputs` tiles a stage
// (row_norm_tile_kernel 1, softmax_backward_tile_kernel 2), two stages.
inline bool tile_fits(int64_t cols, int64_t bytes, int inputs) {
  return cols <= kTileMaxCols && 2 * inputs * tile_unit(cols * bytes) * cols * bytes <= block_smem_limit();
}

// A tile kernel's launch (tile_fits holds): rows a tile (about REDUCE_OPS_TILE_BYTES of each input,
// in whole units), shared memory, tiles, and lanes a row (REDUCE_OPS_TILE_LANES forces 1, 2, 4, 8,
// 16 or 32 where a lane's kTilePer values hold the row).
struct TilePlan {
  int64_t rows, smem, tiles;
  int lanes;
};

inline TilePlan tile_plan(int64_t rows, int64_t cols, int64_t bytes, int inputs) {
  const int64_t row_bytes = cols * bytes, unit = tile_unit(row_bytes);
  TilePlan t;
  // 8 KB tiles, or 4 KB where 8 KB ones would be under 2.5 an SM: a total that small is latency-bound,
  // and more, smaller tiles spread it over more blocks. H100 (rows_ab2.py,
  // h100_study/session63_tiles.txt, call 2), us, 8 KB -> 4 KB: bfloat16 softmax 262144 x 3 (1.5 MB)
  // 7.68 -> 6.98, 131072 x 10 (2.6 MB) 9.22 -> 8.48, ReduceScale 7.63 -> 7.04, 9.06 -> 8.32, backward
  // 7.23 -> 6.85, 9.18 -> 8.64; past the bound 4 KB lost: float32 ReduceScale 262144 x 3 (3.1 MB)
  // 7.39 -> 7.87, softmax 131072 x 7 (3.7 MB) 6.72 -> 7.04, bfloat16 131072 x 20 (5.2 MB) 11.62 ->
  // 11.84, backward 65536 x 150 28.77 -> 30.86. The H200 alike (h200_study/session63_tiles.txt):
  // bfloat16 softmax 262144 x 3 7.84 -> 7.10, ReduceScale 131072 x 10 8.51 -> 8.10, backward 8.32 ->
  // 7.78; float32 131072 x 10-15 (past the bound) 8-11% slower on 4 KB.
  const int64_t automatic_bytes = rows * row_bytes * 2 < 5 * sm_count() * int64_t{8192} ? 4096 : 8192;
  t.rows = std::max<int64_t>(1, env_positive("REDUCE_OPS_TILE_BYTES", automatic_bytes) / row_bytes / unit) * unit;
  t.rows = std::min(t.rows, ceil_div(rows, unit) * unit);
  while (t.rows > unit && 2 * inputs * t.rows * row_bytes > block_smem_limit()) t.rows -= unit;
  t.smem = 2 * inputs * t.rows * row_bytes;
  t.tiles = ceil_div(rows, t.rows);
  // The fewest lanes that hold the row: rows of up to 8 elements a lane each, no shuffle. H200
  // (rows_ab2.py, h200_study/session62_tile.txt, call 7), us, 4 lanes -> 1: bfloat16 softmax
  // 262144 x 3 16.80 -> 7.65, 131072 x 7 10.53 -> 6.50, ReduceScale 15.39 -> 7.58, 9.86 -> 6.53,
  // backward 11.46 -> 7.23, 8.35 -> 6.66; 4 -> 2 lanes: bfloat16 131072 x 10 softmax 11.30 -> 8.83,
  // ReduceScale 11.20 -> 9.06, backward 9.89 -> 8.61; 131072 x 13 11.52 -> 9.34; at 20 even.
  int automatic = 1;
  while (automatic < 32 && cols > kTilePer * automatic) automatic *= 2;
  const int64_t lanes = env_positive("REDUCE_OPS_TILE_LANES", automatic);
  t.lanes = lanes <= 1 ? 1 : lanes <= 2 ? 2 : lanes <= 4 ? 4 : lanes <= 8 ? 8 : lanes <= 16 ? 16 : 32;
  if (cols > kTilePer * t.lanes) t.lanes = automatic;  // a forced mapping too narrow for the row
  return t;
}

// Launches kernel_for(Int<lanes>) on plan t: `waves` waves of resident blocks, each looping over
// tiles.
template <typename KernelFor, typename... Args>
void launch_tiles(const TilePlan& t, int waves, cudaStream_t stream, KernelFor kernel_for, Args... args) {
  auto run = [&](auto width_tag) {
    auto kernel = kernel_for(width_tag);
    allow_smem(kernel, t.smem);
    const int64_t blocks = waves * sm_count() * resident_blocks(kernel, kBlock, static_cast<size_t>(t.smem));
    const int64_t grid = row_loop_grid(kernel, t.tiles, kBlock, t.smem, std::max<int64_t>(1, std::min(t.tiles, blocks)));
    kernel<<<grid, kBlock, t.smem, stream>>>(args..., static_cast<int>(t.rows));
  };
  if (t.lanes == 1) run(Int<1>{});
  else if (t.lanes == 2) run(Int<2>{});
  else if (t.lanes == 4) run(Int<4>{});
  else if (t.lanes == 8) run(Int<8>{});
  else if (t.lanes == 16) run(Int<16>{});
  else run(Int<32>{});
}

// A row of `cols` elements long enough that leaving most SMs idle costs more than the split
// path's second read: the split path wins when rows x blocks-per-row cannot cover half the SMs.
// H200, 1024 rows x 262144: the cluster beat the split path for bfloat16 softmax (60% vs 56% of
// copy), ReduceScale (74-77 vs 61-64) and the backward (64-77 vs 60-61), and lost for float32
// softmax (59 vs 63). Clusters have a rule of their own (clusters_lose_to_split).
inline bool too_few_blocks(int64_t rows, int64_t blocks_per_row, int64_t cols) {
  return cols >= 2 * kMinSplitChunk && rows * blocks_per_row * 2 < sm_count();
}

// Whether the automatic choice leaves the staged clusters ("cluster", and the backward's) of
// `blocks` blocks of `threads` threads on `rows` rows of `cols` to the split path (RowOp: which
// op's rule; "cluster_row" beat the split path on every shape it holds, see
// launch_cluster_row). A cluster's row is loads, then
// reductions and the exchange (its SMs move no bytes), then stores, and on few rows a cluster
// runs too few of them for the stagger or a second block an SM to hide that; the split path
// streams at 55-63% of copy however few the rows, after a floor of its own (two launches).
// tune_rows.py, rows 4-256 x 2^17-2^21 columns, % of copy, clusters vs split
// (h100_study/session37_few_rows.txt, h200_study/session37_few_rows.txt; since stagger_pays
// staggers the starts of clusters of 8 blocks or more from two rows a cluster,
// h100_study/session38_stagger.txt and h200_study/session38_stagger.txt):
// - softmax (an exp and two reductions a row): on the H100 the split wins up to 1/6 of the SM
//   count in rows (16 rows: float32 2^19 55 vs 56, 2^20 57 vs 59; bfloat16 2^19 42 vs 46, 2^20
//   49 vs 54, 2^21 53 vs 57) and the clusters from 24 (float32 2^19 63 vs 58, 2^20 62 vs 60;
//   bfloat16 2^19 53 vs 52, 2^20 59 vs 54; 32 rows: float32 2^20 66 vs 61). Where DRAM is faster
//   for the same SMs (kFastDramPerSm: the H200) the clusters' idle phases cost more: the split
//   wins up to a quarter of the SM count (32 rows: float32 2^19 53 vs 54, bfloat16 2^20 47 vs 50;
//   48 rows: float32 2^19 59 vs 56), and for clusters of 16 blocks that take a whole SM (past
//   kPreferredRegThreads threads) up to 3/4 of it (float32 2^20 48 rows 59 vs 60, 96 rows 61 vs
//   62; bfloat16 2^21 48 rows 54 vs 59, 96 rows 55 vs 60).
// - ReduceScale: the clusters win down to a quarter of the SM count in blocks (float32 8 x 2^19
//   55 vs 46, split before), the backward down to a sixteenth (float32 8 x 2^18 47 vs 38, 4 x 2^17
//   20 vs 14); except for both that clusters of 16 blocks (7 at once on 132 SMs) lose up to half
//   an SM count of blocks (H100: ReduceScale float32 4 x 2^20 46 vs 47, the backward bfloat16
//   4 x 2^20 38 vs 41). At 8 rows (a second wave of one, its starts now staggered) they win on
//   the H100 (ReduceScale float32 8 x 2^20 60 vs 56, the backward float32 8 x 2^19 53 vs 49,
//   bfloat16 8 x 2^20 53 vs 50) and come within 2 points on the H200.
enum class RowOp { kSoftmax, kReduceScale, kSoftmaxBackward };
constexpr double kFastDramPerSm = 30;  // GB/s per SM (dram_gbps_per_sm): the H100 25, the H200 36
inline bool clusters_lose_to_split(int64_t rows, int64_t blocks, int threads, int64_t cols, RowOp op) {
  if (cols < 2 * kMinSplitChunk) return false;
  if (op == RowOp::kSoftmax) {
    if (dram_gbps_per_sm() < kFastDramPerSm) return rows * 6 <= sm_count();
    const bool whole_sm_wide = blocks >= kMaxClusterBlocks && threads > kPreferredRegThreads;
    return rows * 4 <= sm_count() * (whole_sm_wide ? 3 : 1);
  }
  const int64_t few = op == RowOp::kReduceScale ? 4 : 16;  // the split below 1/few of the SMs in blocks
  // The backward's clusters of 16 on the H200 (kFastDramPerSm) lose up to the SM count in blocks:
  // rows_ab.py, h200_study/session73.txt, call 3, us, clusters -> split: bfloat16 8 x 1000003
  // 30.21 -> 26.78, 8 x 1000000 27.47 -> 26.82 (16 x 1000003, 256 blocks: 45.28 against 46.91).
  const int64_t wide = op == RowOp::kSoftmaxBackward && dram_gbps_per_sm() >= kFastDramPerSm ? 1 : 2;
  return rows * blocks * few <= sm_count() || (blocks >= kMaxClusterBlocks && rows * blocks * wide <= sm_count());
}

// Sleep between the cluster start phases of a register kernel (stagger_cluster_start in
// row_norm.cuh): 4 phases of 4 us cost a cluster of one row 12 us. REDUCE_OPS_CLUSTER_STAGGER=<ns>
// (a developer knob, 0: none) sets it for every cluster launch, however few its rows.
constexpr unsigned kClusterStaggerNs = 4000;
// Where the stagger pays for its 12 us: where each of the `active` clusters runs at least
// kStaggerMinRows rows, and for clusters of kStaggerWideBlocks blocks or more (at most a quarter
// of the SMs' worth of clusters at once) wherever one cluster runs a second row. H100, tune_rows.py,
// % of copy, no stagger -> stagger, 1-8 rows a cluster (h100_study/session38_stagger.txt): clusters
// of 8-16 blocks gained 0-8 points on every case of 1.07-6.4 rows a cluster (softmax float32
// 40 x 524288 63 -> 70, bfloat16 64 x 1048576 62 -> 69; ReduceScale float32 32 x 524288 68 -> 76;
// the backward bfloat16 64 x 524288 70 -> 78; the A/B of this rule lost at most 2 points, on the
// H100 and the H200) and lost 1-16 below one row a cluster (ReduceScale float32 8 x 524288
// 53 -> 37); clusters of 2-4 blocks came out between -4 and +4 at 1-4 rows and lost up to 14
// below one (bfloat16 softmax 64 x 98304 42 -> 28), so they keep the 8 rows.
constexpr int64_t kStaggerMinRows = 8;
constexpr int kStaggerWideBlocks = 8;
inline bool stagger_pays(int64_t rows, int blocks, int active) {
  return rows >= kStaggerMinRows * active || (blocks >= kStaggerWideBlocks && rows > active);
}

// Launches `kernel` (a register kernel) on clusters of `blocks` blocks of `threads` threads and
// `smem` bytes of dynamic shared memory (a function of `threads` for a given kernel, so the
// memoized occupancy answer stays right), one row per cluster at a time, as many clusters as
// the device holds at once (rows loop), with the kernel's last argument, its start stagger,
// appended to `args`.
// Returns false, launching nothing, if the device cannot run one such cluster.
template <typename Kernel, typename... Args>
bool launch_on_clusters(Kernel kernel, int64_t rows, int blocks, int threads, int64_t smem, cudaStream_t stream,
                        Args... args) {
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attr;
  const int active = setup_clusters(config, attr, kernel, blocks, dim3(threads), smem, stream);
  if (active <= 0) return false;
  config.gridDim = dim3(static_cast<unsigned>(blocks * std::max<int64_t>(1, std::min<int64_t>(rows, active))));
  const unsigned stagger_ns = static_cast<unsigned>(
      env_nonnegative("REDUCE_OPS_CLUSTER_STAGGER", stagger_pays(rows, blocks, active) ? kClusterStaggerNs : 0u));
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args..., stagger_ns));
  return true;
}

// Tries cluster sizes for a row of `packs` packs at `per_thread` packs per thread, smallest
// first: clusters of up to 8 blocks, each block's share within kPreferredRegThreads threads (two
// blocks per SM), then within kMaxRegThreads; then 16 blocks the same way. `launch(blocks,
// threads)` returns false where the device cannot run that cluster. `automatic` gives up (false)
// where the split path beats the clusters (clusters_lose_to_split's rule for `op`).
// H200, 1024 x 262144 (REDUCE_OPS_CLUSTER): 8 blocks of 1024 threads beat 16 of 512 for float32
// softmax (66% vs 59% of copy), float32 ReduceScale (83 vs 74) and the bfloat16 backward (88 vs
// 77); bfloat16 softmax and ReduceScale keep 8 of 512 (60%, 78%; 4 of 1024: 58%, 75%).
// REDUCE_OPS_CLUSTER=<blocks> (a developer knob, for measurement) tries that cluster size only.
template <typename Launch>
bool try_cluster_sizes(int64_t rows, int64_t cols, int64_t packs, int per_thread, bool automatic, RowOp op,
                       Launch launch) {
  const int64_t only = env_positive("REDUCE_OPS_CLUSTER", 0);
  for (const int max_blocks : {8, kMaxClusterBlocks}) {
    for (const int64_t cap : {int64_t{per_thread} * kPreferredRegThreads, int64_t{per_thread} * kMaxRegThreads}) {
      for (int blocks = 2; blocks <= max_blocks; blocks *= 2) {
        const int64_t share = ceil_div(packs, blocks);
        if (share > cap || (only > 0 && blocks != only)) continue;
        const int threads = warps_of_threads(share, per_thread);
        if (automatic && clusters_lose_to_split(rows, blocks, threads, cols, op)) return false;
        if (launch(blocks, threads)) return true;
      }
    }
  }
  return false;
}

// Rows of one kVec pack (16-bit rows of 4 on 8-byte packs, launch_warp; rows of 2 on 4- and
// 8-byte packs, launch_row_norm) go a lane a row on row_norm_rows_kernel, softmax 4 rows a lane at
// once, ReduceScale 2 (launch_warp says why).
template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_lane_rows(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  constexpr int kRows = Policy::kNeedsSum ? 4 : 2;
  auto kernel = row_norm_rows_kernel<In, Out, Acc, Policy, kVec, 1, 1, kRows>;
  kernel<<<ceil_div(g.rows, kBlock * kRows), kBlock, 0, stream>>>(x, y, g, policy);
}

// Float32 element rows (kVec == 1: unaligned rows that launch_row_norm does not peel, such as rows
// of 68-255 values where y is fresh) of 33-256 values go a lane group a row on row_norm_rows_kernel,
// every load of a row in flight at once (the last slot clamped): 16 lanes a row up to 128 values,
// 32 past, ceil(cols / lanes) values a lane (3-8). row_norm_warp_kernel, looping, gave a lane 2, 4
// or 8 slots (3 of 4 used at 77). H200 (rows_ab.py, h200_study/session78.txt, section 4), us,
// row_norm_warp_kernel -> this (torch.compile): ReduceScale 65536 x 77 17.57 -> 15.78 (18.05),
// 32768 x 129 14.34 -> 13.90 (13.54), 65536 x 150 25.57 -> 25.01 (23.74), 32768 x 197 18.53 ->
// 18.30 (17.60), 262144 x 197 105.63 -> 103.55 (104.58), 16384 x 255 14.50 -> 13.44 (13.54);
// softmax 17.20 -> 15.55 (22.66), 14.82 -> 13.89 (14.27), 26.24 -> 24.74 (24.48), 18.37 -> 18.08
// (19.26), 106.02 -> 102.91 (105.89), 13.54 -> 13.50 (15.42); even at 65536 x 100. Lost or came
// out even (sections 2-4): 16 lanes past 128 values (ReduceScale 32768 x 197 19.49), 8 lanes at
// 77 (20.42), 2 or 4 rows a lane group at once (18.98, 19.55), blocks of one or two warps (24.67,
// 2 rows at once on 64 threads 18.88), every slot clamped (18.56). REDUCE_OPS_ELEMENT_ROWS=off (a
// developer knob, for measurement): the looping warp kernel there too; a forced strategy skips it
// as well.
template <typename In, typename Out, typename Acc, typename Policy>
void launch_element_rows(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  auto run = [&](auto lanes_tag) {
    constexpr int kLanes = decltype(lanes_tag)::value;
    with_int_in<kLanes == 16 ? 3 : 5, kMaxWarpPacks>(ceil_div(g.cols, int64_t{kLanes}), [&](auto per_tag) {
      auto kernel = row_norm_rows_kernel<In, Out, Acc, Policy, 1, decltype(per_tag)::value, kLanes, 1>;
      kernel<<<ceil_div(g.rows, kBlock / kLanes), kBlock, 0, stream>>>(x, y, g, policy);
    });
  };
  if (g.cols <= 16 * kMaxWarpPacks) run(Int<16>{});
  else run(Int<32>{});
}

// Its looping kernel runs kPeeledWarpWaves waves where `few_waves` (peeled rows, and 16-bit rows on
// 8-byte packs under REDUCE_OPS_WARP_ROWS=off), else kWarpRowWaves.
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
void launch_warp(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                 bool few_waves = kPeeled) {
  const int64_t packs = ceil_div(g.cols, kVec);
  // Marked loads by size (row_loads_marked).
  const bool marked = kVec * sizeof(In) == 16 && row_loads_marked(row_traffic<In, Out>(g));
  // 16-bit rows of 8-byte packs (launch_row_norm's rows of 3-15 such packs) go 2 rows a lane group
  // at once, a block over its rows once (row_norm_rows_kernel), where row_norm_warp_kernel loops over
  // them one at a time. H200 (scripts/rows_ab.py, h200_study/session65_rows.txt, call 3), bfloat16,
  // us, one at a time -> 2 at once (torch.compile): ReduceScale 1048576 x 12 27.84 -> 25.49 (19.79),
  // 524288 x 20 20.35 -> 19.44 (18.32), 262144 x 20 13.47 -> 12.62 (13.12), 131072 x 36 13.31 ->
  // 12.37 (11.66), 32768 x 60 7.65 -> 7.47 (7.25); softmax 24.91 -> 21.55 (21.54), 19.58 -> 18.80
  // (23.25), 13.02 -> 12.62 (14.38), 12.85 -> 11.76 (14.94), 7.63 -> 7.25 (8.56). 4 rows at once
  // lost on 8 of these 10 cases and 8 rows on all (ReduceScale 1048576 x 12 30.67: 64-77 registers);
  // blocks of 64 or 128 threads came out within 2% of 256. 16-byte packs (16-bit rows of 32-256,
  // float32 of 16-128) came out even or lost (call 2: float32 ReduceScale 524288 x 32 37.52 ->
  // 38.80, bfloat16 softmax 131072 x 64 13.66 -> 14.11) and keep the loop.
  // REDUCE_OPS_WARP_ROWS=off (a developer knob, for measurement): one row at a time there too.
  const bool rows_at_once = !env_equals("REDUCE_OPS_WARP_ROWS", "off");
  constexpr bool kHalfPackRows = !kPeeled && kVec > 1 && kVec * sizeof(In) == 8 && std::is_same_v<In, Out>;
  auto run_rows = [&](auto packs_tag, auto width_tag) {
    constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value, kRows = 2;
    auto kernel = row_norm_rows_kernel<In, Out, Acc, Policy, kVec, kPacks, kWidth, kRows>;
    kernel<<<ceil_div(g.rows, kBlock / kWidth * kRows), kBlock, 0, stream>>>(x, y, g, policy);
  };
  auto run = [&](auto packs_tag, auto width_tag) {
    constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value;
    if constexpr (kHalfPackRows && kWidth <= 8) {
      if (rows_at_once) return run_rows(packs_tag, width_tag);
    }
    with_marked_loads<kVec * sizeof(In) == 16>(marked, [&](auto last) {
      constexpr bool kLast = decltype(last)::value;
      const int64_t groups = ceil_div(g.rows, kBlock / kWidth);
      auto launch = [&](auto kernel) {
        kernel<<<warp_kernel_grid(kernel, groups, few_waves), kBlock, 0, stream>>>(x, y, g, policy);
      };
      // Peeled bfloat16 rows on 8 lanes of 2 packs (13-16 packs), and 16-bit softmax rows on 4
      // lanes of 3 (9-12), take the kernel with its registers capped at 64: 66-72 without, so 3
      // blocks of 256 an SM instead of 4. H200 (h200_study/session68_rows.txt, call 2), us, plain ->
      // capped: bfloat16 ReduceScale 131072 x 125 25.38 -> 23.84, 65536 x 100 14.75 -> 14.11, 262144
      // x 127 43.55 -> 41.79, softmax 25.12 -> 23.62, 14.51 -> 14.37, 43.33 -> 41.82; softmax
      // 65536 x 77 13.60 -> 12.61, 131072 x 70 18.08 -> 17.63, 262144 x 90 35.84 -> 35.54, float16
      // 13.57 -> 12.72, 18.11 -> 17.44, 39.20 -> 35.70. Not capped: float16 on 8 lanes of 2 (64
      // registers unmarked: ReduceScale 131072 x 125 23.65 against 23.78 capped), ReduceScale on 4
      // lanes of 3 (call 1: 262144 x 90 36.25 -> 36.98), peeled rows on 4 lanes of 2 (73-85
      // registers, spilled: softmax 262144 x 45 25.68 -> 32.11), 16-bit softmax on 32 lanes of 4
      // (marked, 68: 65536 x 896 61.09 -> 61.95). REDUCE_OPS_WARP_CAP=off (a developer knob, for
      // measurement): the plain kernel there too.
      constexpr bool kCapped =
          kPeeled && kVec * sizeof(In) == 16 && sizeof(In) == 2 &&
          ((kPacks == 2 && kWidth == 8 && std::is_same_v<In, c10::BFloat16>) ||
           (Policy::kNeedsSum && kPacks == 3 && kWidth == 4));
      // 16-bit rows of 3-4 packs over 32 lanes, or 3 over 16, hold their raw words (row_norm_warp_rows'
      // kRawHeld) where they are peeled, for ReduceScale where its loads are unmarked, and for softmax
      // where they are marked (below): peeled
      // softmax at 4 packs a lane 64 -> 48 registers, at 3 56 -> 40 (16 lanes 56 -> 47); unmarked
      // ReduceScale 62 -> 40 and 48-55 -> 38-39. H200 (rows_ab.py, h200_study/session75.txt, sections 5
      // and 7), bfloat16, us, floats -> words (torch.compile): softmax peeled 131072 x 777 120.42 ->
      // 110.66 (130.43), 65536 x 1001 75.31 -> 71.20, 32768 x 1001 42.48 -> 37.98, 131072 x 555 86.88
      // -> 82.43, 65536 x 521 44.06 -> 40.77, 262144 x 1023 283.87 -> 281.98; on 16 lanes 65536 x 301
      // 27.58 -> 26.98, 32768 x 333 18.02 -> 17.41, 262144 x 377 even (110.67 -> 109.47, then 108.86 ->
      // 109.79); ReduceScale peeled 131072 x 777 115.26 -> 107.20 (113.47), 32768 x 1001 43.10 ->
      // 38.02, 262144 x 377 115.17 -> 106.37 (113.12); ReduceScale aligned, unmarked (under 3 L2s of
      // traffic: row_loads_marked) 32768 x 768 33.22 -> 29.66 (29.04), 16384 x 768 19.23 -> 17.76
      // (17.22), 32768 x 1024 38.56 -> 37.31 (36.51), 65536 x 320 26.74 -> 25.86 (26.08). Aligned
      // unmarked softmax stays on floats (within 1%, 4096 x 1024 9.15 against 9.47), and so does marked
      // ReduceScale (65536 x 1024 67.74 against 67.90, 131072 x 384 51.94 against 52.45; session 104,
      // 67.84 against 68.00, 65536 x 768 52.90 against 52.38, x 896 60.16 against 60.56); peeled
      // softmax 262144 x 700 lost 193.41 -> 194.94. Softmax rows held as raw words and loaded marked
      // (by size, row_loads_marked) gained at every length: H200 (rows_ab.py, the timer's persisting-L2
      // reset, h200_study/session104.txt, call 5), bfloat16, us, floats plain -> words marked (torch.compile):
      // 65536 x 1024 69.38 -> 67.46 (68.32), 131072 x 1024 132.06 -> 129.02, 49152 x 1024 53.73 -> 52.13,
      // 65536 x 768 53.86 -> 51.78, 131072 x 640 83.81 -> 82.46, 262144 x 384 100.06 -> 97.95, 262144 x 320
      // 87.58 -> 82.18; float16 65536 x 1024 69.47 -> 67.42; peeled, words plain -> marked, 65536 x 1000
      // 67.36 -> 66.30, 262144 x 300 89.57 -> 88.06. Either alone did not (call 4): 65536 x 1024 words
      // plain 70.14, floats marked 69.34, against floats plain 70.10; 65536 x 768 floats marked 58.30
      // against 54.43. Under 3 L2s of traffic the marks gained after a flush (32768 x 1024 37.60 ->
      // 36.83, 4096 x 1024 8.96 -> 8.13) but lost in CUDA graphs up to 16 MB (call 6: 4096 x 1024 5.67 ->
      // 6.14, 8192 x 384 4.91 -> 5.14; 32768 x 1024 34.70 -> 34.22), so those keep floats, unmarked. 16
      // lanes of 8 packs a row of 65-128 packs, as words, trailed (65536 x 1024 70.66, x 768 54.18).
      // 8 lanes of 3 packs (rows of 17-24 packs) keep floats: peeled softmax lost 1-2.6% on words
      // (524288 x 155 96.94 -> 99.49), ReduceScale within 1% but for 131072 x 160 (27.20 -> 26.34).
      // REDUCE_OPS_WARP_HELD=float (a developer knob, for measurement): floats there too.
      constexpr bool kRawHeld = sizeof(In) == 2 && kVec * sizeof(In) == 16 && kWidth >= 16 &&
                                (kPacks == 3 || kPacks == 4) && (kPeeled || (Policy::kNeedsSum ? kLast : !kLast));
      if constexpr (kRawHeld) {  // never kCapped (4-8 lanes)
        if (!env_equals("REDUCE_OPS_WARP_HELD", "float")) {
          return launch(row_norm_warp_kernel<In, Out, Acc, Policy, kVec, kPacks, kWidth, kPeeled, kLast, true>);
        }
      }
      if constexpr (kCapped) {
        if (!env_equals("REDUCE_OPS_WARP_CAP", "off")) {
          return launch(row_norm_warp_capped_kernel<In, Out, Acc, Policy, kVec, kPacks, kWidth, kPeeled, kLast>);
        }
      }
      launch(row_norm_warp_kernel<In, Out, Acc, Policy, kVec, kPacks, kWidth, kPeeled, kLast>);
    });
  };
  // Short rows: several rows per warp, two packs per lane past 4, so each lane's per-row work (the
  // shuffles, ReduceScale's divider) serves twice the elements. H200, against one pack per
  // lane: 442368 x 128 softmax 92% -> 93% of copy (float32), 86 -> 87 (bfloat16), ReduceScale
  // 90 -> 92 and 85 -> 86; 262144 x 256 bfloat16 softmax 88 -> 90, ReduceScale 86 -> 89.
  // REDUCE_OPS_WARP_LANES=32 (a developer knob, for measurement): a whole warp per row.
  // kHalfPackRows' rows of 3-4 packs (12-16 values) go 2 lanes a row, 2 packs a lane: with 4
  // lanes of one pack, a row's per-lane work (its addresses, shuffles, ReduceScale's divider) was
  // paid 4 times for 4 values each. H200 (h200_study/session66_rows.txt, call 1), us, 4 lanes ->
  // 2 (torch.compile): bfloat16 ReduceScale 1048576 x 12 25.46 -> 22.05 (19.82), softmax 21.62 ->
  // 20.90 (21.60); float16 alike; call 2, 262144 x 12: ReduceScale 10.34 -> 9.82 (9.79), softmax
  // 9.31 -> 9.44 (10.02), the one loss. A lane a row (strided 8-byte loads) lost but on the softmax
  // of 1048576 x 12 (20.70), and 2 lanes lost past 4 packs (ReduceScale 524288 x 20 19.44 -> 21.73,
  // 32768 x 60 7.36 -> 10.49). REDUCE_OPS_WARP_LANES=4 (a developer knob, for measurement): 4 lanes
  // there too. Rows of one 8-byte pack (16-bit rows of 4) go a lane a row (launch_row_norm), softmax
  // 4 rows at once, ReduceScale 2. H200 (h200_study/session68_rows.txt, call 2), us, 2 -> 4 at once:
  // softmax bfloat16 1048576 x 4 9.14 -> 8.69 (torch.compile 9.41), float16 9.02 -> 8.66 (8.83),
  // 4194304 x 4 21.95 -> 21.72 (27.19); ReduceScale bfloat16 1048576 x 4 9.87 -> 10.24 (14.50),
  // float16 9.87 -> 10.26.
  if constexpr (kVec > 1) {
    if (!env_equals("REDUCE_OPS_WARP_LANES", "32")) {
      if constexpr (kHalfPackRows) {
        if (packs == 1 && rows_at_once) return launch_lane_rows<In, Out, Acc, Policy, kVec>(x, y, g, policy, stream);
        if (packs <= 4 && rows_at_once && !env_equals("REDUCE_OPS_WARP_LANES", "4")) {
          return run_rows(Int<2>{}, Int<2>{});
        }
      }
      // 16-byte-pack rows that fill few of their lanes' slots go fewer lanes a row, more packs a
      // lane, so a row's per-lane work (addresses, edges, shuffles, the finisher) is paid on fewer
      // lanes and a warp holds more rows: rows of a pack on one lane and of 2 packs on 2 (both were
      // 4), 16-bit rows of 9-12 packs on 4 lanes of 3 (were 8 of 2), rows of 17-24 and 33-48 on 8
      // and 16 lanes of 3 (were 16 and 32 of 2), rows of 65-95 on 32 lanes of 3 (were 4 packs a
      // lane). Nsight Compute, bfloat16 ReduceScale 65536 x 150 (19 packs) on 2 packs a lane: 11.2M
      // instructions, issue-bound (76% of cycles issuing), against torch.compile's 6.3M. H200, us,
      // before -> now (torch.compile):
      //   17-48 (h200_study/session66_rows.txt, call 4): bfloat16 ReduceScale 65536 x 150 19.30 ->
      //   16.78 (15.84), 131072 x 192 34.62 -> 29.42 (30.35), 65536 x 384 32.24 -> 29.30 (28.78),
      //   32768 x 263 16.98 -> 15.38 (15.70); softmax 19.10 -> 17.17 (20.91), 32.29 -> 29.33
      //   (40.36), 32.22 -> 29.31 (37.74), 17.34 -> 15.65 (18.34); float32 (session67_rows.txt,
      //   call 1) ReduceScale 131072 x 80 27.90 -> 26.13, 131072 x 67 (peeled) 27.95 -> 23.81,
      //   65536 x 192 29.82 -> 29.57; softmax 28.02 -> 25.98, 27.84 -> 23.81, 29.94 -> 29.12;
      //   2, 9-12 and 65-95 (session67_rows.txt, call 2): ReduceScale bfloat16 1048576 x 16 36.86
      //   -> 22.51 (21.60), float32 1048576 x 8 32.40 -> 21.74 (21.54), bfloat16 262144 x 72 32.55
      //   -> 26.39 (26.91), 262144 x 96 34.75 -> 29.94 (29.66), 262144 x 90 (peeled) 37.71 ->
      //   36.16, 65536 x 520 43.51 -> 40.37, 65536 x 640 54.75 -> 44.90 (44.84), 65536 x 601
      //   (peeled) 52.91 -> 46.35 (47.48), 65536 x 700 (peeled) 56.57 -> 51.86 (48.37); softmax
      //   33.31 -> 21.63, 29.23 -> 21.30, 29.57 -> 26.69, 32.48 -> 29.74, 36.91 -> 35.78, 44.88 ->
      //   41.02, 48.62 -> 45.04, 55.73 -> 47.84, 60.76 -> 52.02; call 4, bfloat16 65536 x 77
      //   (h200_models.json's, peeled, 10 packs) ReduceScale 14.48 -> 13.50 (16.00), softmax 14.11
      //   -> 13.62 (20.85);
      //   1 (call 3, 2 lanes -> 1): ReduceScale bfloat16 1048576 x 8 20.48 -> 13.63 (13.54), float32
      //   1048576 x 4 18.18 -> 13.50 (23.31); softmax 18.72 -> 13.23 (14.02), 16.75 -> 13.01 (14.77).
      // Kept as they were: rows of 3-4 packs (2 lanes of 2, call 3: within 2%, float32 softmax
      // 262144 x 12 11.79 -> 12.39), float32 rows of 9-12 packs (3 on 4 lanes: 262144 x 36 and x 48
      // even, peeled 262144 x 45 ReduceScale 32.54 -> 34.14), rows of 96 packs (3 on 32: bfloat16
      // ReduceScale 131072 x 768 97.49 -> 100.02, softmax even; call 1, 65536 x 768 52.74 ->
      // 54.82), and 4 packs a lane on 4, 8, 16 lanes at 16, 32, 64 packs (call 1; they load no row
      // ahead: bfloat16 ReduceScale 442368 x 128 60.24 -> 76.02, 131072 x 256 40.27 -> 44.40).
      // REDUCE_OPS_WARP_PACKS=2 or off (a developer knob, for measurement): the table before
      // sessions 66-67 (a pack a lane on 4 lanes up to 4 packs, else 2 packs a lane up to 64, 4 up
      // to 128); 3 or unset: this one.
      if constexpr (kVec * sizeof(In) == 16) {
        if (env_positive("REDUCE_OPS_WARP_PACKS", 3) >= 3) {
          if (packs <= 1) return run(Int<1>{}, Int<1>{});
          if (packs <= 2) return run(Int<1>{}, Int<2>{});
          if constexpr (sizeof(In) == 2) {
            if (packs > 8 && packs <= 12) return run(Int<3>{}, Int<4>{});
          }
          if (packs > 16 && packs <= 24) return run(Int<3>{}, Int<8>{});
          if (packs > 32 && packs <= 48) return run(Int<3>{}, Int<16>{});
          if (packs > 64 && packs < 96) return run(Int<3>{}, Int<32>{});
        }
      }
      if (packs <= 4) return run(Int<1>{}, Int<4>{});
      if (packs <= 8) return run(Int<2>{}, Int<4>{});
      if (packs <= 16) return run(Int<2>{}, Int<8>{});
      if (packs <= 32) return run(Int<2>{}, Int<16>{});
    }
  }
  if constexpr (kVec == 1 && sizeof(In) == 4 && std::is_same_v<In, Out>) {
    if (packs > 32 && packs <= 32 * kMaxWarpPacks && !ForcedStrategy().any() &&
        !env_equals("REDUCE_OPS_ELEMENT_ROWS", "off")) {
      return launch_element_rows<In, Out, Acc, Policy>(x, y, g, policy, stream);
    }
  }
  if (packs <= 32) return run(Int<1>{}, Int<32>{});
  if (packs <= 64) return run(Int<2>{}, Int<32>{});
  if (packs <= 128) return run(Int<4>{}, Int<32>{});
  return run(Int<8>{}, Int<32>{});
}

// The forward's block rows that run on waves of looping blocks (launch_block): 4.5 KB of traffic,
// bfloat16 rows of 1152 values.
constexpr int64_t kSmallBlockRowBytes = 4608;

// "block": the smallest of 2, 4, 8 packs per thread that keeps the block within
// kPreferredRegThreads threads, 8 packs and up to kMaxRegThreads threads past that.
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
void launch_block(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  if constexpr (kVec > 1) {  // the dispatcher never asks for kVec == 1 (block_fits is false)
    const int64_t packs = g.cols / kVec;
    // Where row_loads_marked holds, 16-byte packs load under an L2 evict_last policy
    // (load_evict_last), each row when its turn comes (else REDUCE_OPS_AHEAD applies). H200
    // (h200_study/session58_rows.txt), plain -> marked, us: softmax float32 16384 x 4096 133.0 ->
    // 128.7, 65536 x 2048 263.4 -> 252.7, 4096 x 32768 265.5 -> 257.6; ReduceScale float32
    // 16384 x 4096 133.5 -> 128.5 (0.96x -> 1.00x torch.compile), bfloat16 4096 x 32768 136.0 ->
    // 131.8; as much over 8 inputs read once each (no line left by one call serving the next).
    // Loading the next row ahead into registers (Ahead::kRegisters) gained nothing beside it. Rows
    // moving under 3 L2s lost to the marks (session59_rows.txt: float32 ReduceScale 2048 x 4096,
    // 67 MB, 19.9 -> 20.8 us).
    const bool last_loads = kVec * sizeof(In) == 16 && row_loads_marked(row_traffic<In, Out>(g));
    // Rows that move at most kSmallBlockRowBytes (one read and one write) run on 16 waves of resident
    // blocks, each looping over rows (small_block_grid), not a block a row. H200 (rows_ab.py,
    // h200_study/session74.txt, call 6), us, a block a row -> 16 waves (torch.compile): ReduceScale
    // bfloat16 131072 x 1032 141.57 -> 133.77, 131072 x 1100 157.13 -> 145.82 (300.05), 262144 x 1100
    // 307.91 -> 284.62, peeled 131072 x 1101 157.65 -> 146.46; softmax 140.36 -> 138.78, 148.66 ->
    // 147.68, 262144 x 1100 even, peeled 149.28 -> 147.55; float32 131072 x 384 and 512 within
    // 0.4% (call 5: 448 even). Past them it lost: bfloat16 131072 x 1280 and 1536 0.4-0.9%, 1800 and
    // 2048 (128-thread blocks) 2%. REDUCE_OPS_BLOCK_WAVES=<n>|off (a developer knob, for
    // measurement): n waves, or a block a row.
    const bool small_rows = g.cols * static_cast<int64_t>(sizeof(In) + sizeof(Out)) <= kSmallBlockRowBytes;
    auto run = [&](auto packs_tag) {
      constexpr int kPacks = decltype(packs_tag)::value;
      if constexpr (kVec * sizeof(In) == 16) {
        if (last_loads) {
          auto kernel = row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, false, Ahead::kNone, false, kPeeled, true>;
          const int threads = warps_of_threads(packs, kPacks);
          const int64_t grid = small_block_grid(kernel, g.rows, threads, small_rows, "REDUCE_OPS_BLOCK_WAVES");
          kernel<<<grid, threads, 0, stream>>>(x, y, g, policy, 0u);
          return;
        }
      }
      // The next row is not loaded ahead (see the 2-pack rows below); REDUCE_OPS_AHEAD=registers
      // still loads it into registers where the kernel has them. The bulk copy (Ahead::kShared)
      // lost here (launch_cluster).
      with_ahead<kPacks <= kMaxPrefetchPacks, false>(Ahead::kNone, [&](auto ahead_tag) {
        auto kernel =
            row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, false, decltype(ahead_tag)::value, false, kPeeled>;
        const int threads = warps_of_threads(packs, kPacks);
        const int64_t grid = small_block_grid(kernel, g.rows, threads, small_rows, "REDUCE_OPS_BLOCK_WAVES");
        kernel<<<grid, threads, 0, stream>>>(x, y, g, policy, 0u);
      });
    };
    // REDUCE_OPS_BLOCK_PACKS=2|4|8 (a developer knob, for measurement) forces the packs per thread
    // where the row fits that many in kMaxRegThreads threads.
    const int64_t forced = env_positive("REDUCE_OPS_BLOCK_PACKS", 0);
    if (forced == 2 && packs <= 2 * kMaxRegThreads) return run(Int<2>{});
    if (forced == 4 && packs <= 4 * kMaxRegThreads) return run(Int<4>{});
    if (forced == 8) return run(Int<kMaxRegPacks<Acc>>{});
    // Rows whose 8-pack block would take more than kPreferredRegThreads threads, short of a full
    // kMaxRegThreads: half of each thread's packs staged in shared memory (row_norm_regs_kernel's
    // kStaged), so that the block keeps to kPreferredRegThreads or fewer and two blocks share an
    // SM, where the plain block sat alone on its SM with part of its registers idle. H200
    // (tune_rows.py, h200_study/session19_block_staged.txt), plain -> staged, % of copy: bfloat16
    // 16384 x 36864 softmax 75 -> 96, ReduceScale 78 -> 97; 8192 x 40000 79 -> 95, 82 -> 95;
    // float32 16384 x 20000 93 -> 96, 83 -> 96; but float32 8192 x 28000 (875 threads) softmax
    // 98 -> 95 (ReduceScale 94 -> 95). Full 1024-thread blocks stay plain (float32 4096 x 32768: 96
    // plain, 94 staged; bfloat16 4096 x 65536 softmax 88 -> 93 but ReduceScale 95 -> 94), and so do
    // rows of 512 threads or fewer (float32 8192 x 16384 96 -> 95, bfloat16 4096 x 32768 93 -> 91).
    // REDUCE_OPS_BLOCK_HOLD=registers|shared (a developer knob) forces either where the staged
    // kernel can run.
    if constexpr (kVec * sizeof(In) == 16) {
      constexpr int kPacks = kMaxRegPacks<Acc>;
      const bool can_stage = props().major >= 9 && forced == 0;  // bulk copies: sm_90+
      const int plain_threads = warps_of_threads(packs, kPacks);
      // One getenv either way: the knob can only turn the default off (registers) or on (shared).
      const bool staged = plain_threads > kPreferredRegThreads && plain_threads < kMaxRegThreads
                              ? !env_equals("REDUCE_OPS_BLOCK_HOLD", "registers")
                              : env_equals("REDUCE_OPS_BLOCK_HOLD", "shared");
      if (can_stage && staged) {
        with_marked_loads<true>(last_loads, [&](auto last) {
          auto kernel = row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, false, Ahead::kNone, true, kPeeled,
                                             decltype(last)::value>;
          const int threads = warps_of_threads(packs, 2 * kPacks);
          const int64_t smem = stage_smem<In, kVec, kPacks>(threads);
          allow_smem(kernel, smem);
          kernel<<<row_kernel_grid(kernel, g.rows, threads, smem), threads, smem, stream>>>(x, y, g, policy, 0u);
        });
        return;
      }
    }
    // 16-bit rows of 16-byte packs (softmax of 1728-16384 values, ReduceScale of 8193-16384): 4 packs
    // a thread where that keeps more warps resident on an SM than 8 packs, else 8, which take the
    // ties (they fold 4x the values a barrier and keep their words raw: row_norm.cuh's MaxFold).
    // An SM's registers are split over its 4 sub-partitions, so with sm_90's counts the 4-pack
    // blocks (softmax 50 registers a thread, 56 allocated: 36 warps an SM; ReduceScale 42, 48
    // allocated: 40 warps; peeled 40: 48) fit 3 blocks of 12-13 warps but 2 of 14-16, where the
    // 8-pack blocks (57-63, 64 allocated) hold 28-32 warps throughout.
    // H200 (h200_study/session71.txt, sections 3-10), us, 8 -> 4 packs, bfloat16 softmax: 16384 x
    // 3072 53.76 -> 52.19, 16384 x 4096 68.67 -> 67.46, 16384 x 5120 84.90 -> 82.82, 16384 x 6144
    // 100.02 -> 97.95, 4096 x 12288 54.05 -> 52.99; ties on 8: 8192 x 8192 68.74 (4: 69.18), 8192 x
    // 10240 84.99 (88.54), 4096 x 16384 69.28 (74.05). ReduceScale, 4 -> 8: 8192 x 13312 (13 warps)
    // 105.34 -> 106.66, 8192 x 13824 (14) 117.70 -> 110.50, 8192 x 14336 120.70 -> 113.98
    // (torch.compile 115.8), 8192 x 16384 131.73 -> 129.63; peeled 4096 x 14001 (3 blocks of 14
    // warps) 58.94 -> 59.84. float16 alike. Session 18 (h200_study/session18_block_packs.txt) had
    // put every 16-bit softmax row on 8 packs, when 4 ran 7-39 points of copy lower. Softmax rows
    // under 1728 values stay there (bfloat16, 8 -> 4 packs: 131072 x 1536 193.12 -> 194.42, x 1600
    // 201.50 -> 206.14, x 1664 208.58 -> 209.73; x 1728 216.93 -> 214.82, 98304 x 1792 169.70 ->
    // 168.19; session71.txt section 9), and so do rows past 16384 (4096 x 32768: 4 packs 54% of copy
    // in session 18). Shorter 16-bit ReduceScale rows keep the rule below (2 packs; 8 lost at 16384
    // x 4096, 66.62 -> 67.58, session 70).
    constexpr int64_t kSoftmaxFourPacksFrom = 216;
    // The blocks of kPacks packs a thread (the kernel run() launches) an SM holds at once.
    auto resident = [&](auto packs_tag) {
      constexpr int kPacks = decltype(packs_tag)::value;
      return with_marked_loads<kVec * sizeof(In) == 16>(last_loads, [&](auto last) {
        auto kernel = row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, false, Ahead::kNone, false, kPeeled,
                                           decltype(last)::value>;
        return int64_t{resident_blocks(kernel, warps_of_threads(packs, kPacks), 0)};
      });
    };
    if constexpr (sizeof(In) == 2) {
      if constexpr (kVec * sizeof(In) == 16) {
        constexpr int kMost = kMaxRegPacks<Acc>;
        const int64_t from = Policy::kNeedsSum ? kSoftmaxFourPacksFrom : 2 * kPreferredRegThreads + 1;
        if (packs >= from && packs <= 4 * kPreferredRegThreads) {
          auto resident_warps = [&](auto packs_tag) {
            return resident(packs_tag) * (warps_of_threads(packs, decltype(packs_tag)::value) / kWarpSize);
          };
          if (resident_warps(Int<4>{}) > resident_warps(Int<kMost>{})) return run(Int<4>{});
          return run(Int<kMost>{});
        }
      }
      if constexpr (Policy::kNeedsSum) return run(Int<kMaxRegPacks<Acc>>{});
    }
    // Rows of 4- and 8-byte values (float32, float64) of 512-1024 packs whose loads are not marked
    // (under kMarkedTrafficL2s of traffic): 4 packs a thread, not 2. H200 (rows_ab.py, 4 inputs in
    // turn), us, 2 packs with the next row ahead (as then) -> 4 (REDUCE_OPS_BLOCK_PACKS=4): float32
    // (h200_study/session108.txt, calls 3 and 4) softmax 8192 x 2048 38.11 -> 36.74, 4096 x 2048
    // 21.98 -> 20.90, 2048 x 3072 17.82 -> 16.96, 1024 x 4096 13.98 -> 12.90, 4096 x 4096 37.95 ->
    // 37.22; ReduceScale 8192 x 2048 38.21 -> 37.82, 4096 x 2048 22.05 -> 21.60, 1024 x 4096 13.66
    // -> 13.41, 4096 x 4096 37.92 -> 37.86; peeled (session109.txt, call 1; 2 packs forced -> 4)
    // softmax 2048 x 4095 23.78 -> 21.70, 4096 x 4095 41.22 -> 37.82, 8192 x 2049 38.96 -> 37.60,
    // ReduceScale 2048 x 4095 23.26 -> 21.94, 4096 x 4095 40.00 -> 37.98; float64 (call 2) softmax
    // 4096 x 1024 34.82 -> 22.98, 8192 x 1024 63.23 -> 38.96, 1024 x 2048 20.96 -> 15.81,
    // ReduceScale 4096 x 1024 22.27 -> 21.54, 1024 x 2048 14.74 -> 13.31 (2 packs without the next
    // row: 23.52, 40.38, 16.00; 21.89, 13.97; float64 ReduceScale 1024 x 1024 the one loss, 9.28
    // against 9.47). Marked rows keep 2 packs, as 512 threads of them beat 256 of 4 there
    // (session108.txt, call 2: float32 softmax 16384 x 4096 128.45 against 128.96, 16384 x 3072
    // 97.70 against 97.89; ReduceScale 16384 x 4096 128.64 against 129.09).
    if constexpr (sizeof(In) >= 4) {
      if (!last_loads && packs >= 2 * 256 && packs <= 2 * kPreferredRegThreads) return run(Int<4>{});
    }
    // Float32 softmax rows of 256-511 packs (1024-2044 values), where the rows pass one wave of
    // their 2-pack blocks by more than 2 rows an SM: 4 packs. Within that, the twice as many
    // threads of 2 packs keep more loads in flight; past it, their second wave costs more (the
    // 2-pack blocks, 30 registers, hold 64 warps an SM: a wave of 16 blocks an SM of 1024 values,
    // 10 of 1536, 8 of 2000). H200 (session109.txt, calls 1-3), us, 2 -> 4 packs: 1024 values, 2560
    // rows 10.34 -> 10.08, 3072 11.39 -> 10.82, 4096 13.25 -> 12.64, 8192 21.22 -> 20.67, 16384
    // 36.80 -> 36.22, 32768 (marked) 66.85 -> 66.40; 1536 values, 2048 rows 11.41 -> 10.82, 4096
    // 17.30 -> 16.64, 16384 (marked) 51.42 -> 51.02; 2000 values, 2048 rows 13.31 -> 13.12, 8192
    // 36.51 -> 35.90. Losses at a wave and a quarter or less: 1024 values, 2048 rows 8.83 -> 9.15,
    // 2376 9.63 -> 9.79; 1536, 1584 rows 9.57 -> 9.89; 2000, 1320 rows 10.11 -> 10.50. ReduceScale
    // was mixed (2560 x 1024 10.34 -> 9.86, 4096 x 1024 13.15 -> 13.28, 2048 x 2000 13.25 ->
    // 13.34): 2 packs.
    if constexpr (sizeof(In) == 4 && Policy::kNeedsSum) {
      if (packs >= 256 && packs < 2 * 256 && g.rows > (resident(Int<2>{}) + 2) * sm_count()) return run(Int<4>{});
    }
    // Elsewhere 2 packs a thread, without the next row loaded ahead: it lost wherever it still
    // applied (rows of 512 packs or more on 2 packs), us, ahead -> not (REDUCE_OPS_AHEAD=none;
    // session109.txt, calls 1 and 2): bfloat16 ReduceScale 1024 x 8192 14.14 -> 13.54, 4096 x 8192
    // 39.39 -> 37.82, 4096 x 5120 27.74 -> 25.60, 4096 x 7168 36.67 -> 33.70, 1024 x 4096 9.47 ->
    // 9.06, 2048 x 4096 13.73 -> 13.46, peeled 8192 x 4099 42.16 -> 38.11 (8192 x 4096 even: 37.70
    // -> 37.92, 38.08 -> 38.00); float16 alike; float64 (above) too. It had gained where blocks
    // looped over rows (bfloat16 softmax 16384 x 4096: 80% -> 86% of copy,
    // h200_study/tune_rows_grids.txt), before one block a row and the marked loads.
    if (packs <= 2 * kPreferredRegThreads) return run(Int<2>{});
    if (packs <= 4 * kPreferredRegThreads) return run(Int<4>{});
    return run(Int<kMaxRegPacks<Acc>>{});
  }
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
bool launch_cluster(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                    bool automatic) {
  if constexpr (kVec > 1) {
    constexpr int kPacks = kMaxRegPacks<Acc>;
    constexpr RowOp kOp = Policy::kNeedsSum ? RowOp::kSoftmax : RowOp::kReduceScale;
    // Softmax clusters bulk-copy their next row into shared memory (H200, 1024 x 262144 float32:
    // 65% -> 77% of copy, bfloat16 62 -> 64); ReduceScale's gain nothing (float32 82 -> 78,
    // bfloat16 78 -> 80), nor do block-per-row kernels (4096 x 32768 float32 softmax 95 -> 79:
    // a block there runs one row) or the backward's clusters (bfloat16 88 -> 81).
    constexpr Ahead kAutomatic = Policy::kNeedsSum ? Ahead::kShared : Ahead::kNone;
    // Half of each block's share of the row staged in shared memory (kStaged; no next row then),
    // unless REDUCE_OPS_CLUSTER_HOLD=registers (a developer knob): a block holds twice the packs,
    // so a cluster needs half the blocks and each SM moves twice the bytes per cluster barrier.
    // H200 (tune_rows.py), registers -> staged, % of copy: 1024 x 262144 softmax float32 78 -> 84,
    // ReduceScale float32 79 -> 89, bfloat16 softmax 71 -> 70 and ReduceScale 86 -> 85 (noise);
    // 2048 x 131072 softmax float32 79 -> 87, bfloat16 67 -> 77; 128 x 1048576 ReduceScale
    // float32 63 -> 74, bfloat16 60 -> 69, softmax bfloat16 49 -> 56, float32 62 -> 60 (the
    // split path before: the staged clusters of 16 blocks fit the row).
    if constexpr (kVec * sizeof(In) == 16) {
      if (!env_equals("REDUCE_OPS_CLUSTER_HOLD", "registers")) {
        auto kernel = row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, true, Ahead::kNone, true>;
        auto launch = [&](int blocks, int threads) {
          return launch_on_clusters(kernel, g.rows, blocks, threads, stage_smem<In, kVec, kPacks>(threads), stream,
                                    x, y, g, policy);
        };
        return try_cluster_sizes(g.rows, g.cols, g.cols / kVec, 2 * kPacks, automatic, kOp, launch);
      }
    }
    auto launch = [&](int blocks, int threads) {
      return with_ahead<false, kVec * sizeof(In) == 16>(kAutomatic, [&](auto ahead_tag) {
        constexpr Ahead kMode = decltype(ahead_tag)::value;
        auto kernel = row_norm_regs_kernel<In, Out, Acc, Policy, kVec, kPacks, true, kMode>;
        return launch_on_clusters(kernel, g.rows, blocks, threads, ahead_smem<kMode, In, kVec, kPacks>(threads), stream,
                                  x, y, g, policy);
      });
    };
    return try_cluster_sizes(g.rows, g.cols, g.cols / kVec, kPacks, automatic, kOp, launch);
  }
  return false;  // unaligned rows: no cluster kernel (see launch_vec)
}

// Softmax's cluster_row blocks a row: of fewest..kClusterRowMaxBlocks, the count that keeps the
// most rows on an SM at once, resident blocks (the occupancy query at that block size) over the
// blocks a row takes, which is resident warps x the share of their threads holding values; ties
// go to more (smaller) blocks of at least kClusterRowLeastWarps warps. A softmax block's exps lie
// between its loads and the cluster's exchange, when it moves no bytes, so the bytes an SM keeps
// in flight follow the rows it holds. The fewest blocks, as before, gave 7-warp blocks (3 of them
// an SM at 80 registers: 21 warps against 24) or blocks with a fifth of their threads idle. H200
// (rows_ab.py, h200_study/session72.txt, section 4), us, fewest -> this rule: bfloat16 2048 x
// 100003 259.86 (7 blocks of 7 warps) -> 223.71 (13 of 4), 2048 x 50000 119.36 -> 107.58, 2048 x
// 70000 163.90 -> 147.30, 2048 x 40968 98.02 -> 89.98, 2048 x 120000 259.52 -> 249.63, 2048 x
// 151936 348.48 -> 345.22; float32 2048 x 100003 483.17 -> 448.38, 2048 x 50000 217.70 ->
// 210.43; even or faster on 11 shapes of 1-4096 rows in both dtypes. Sections 1 and 3 timed every
// count from 5 to 16 on 8 row lengths: the rule ranked them but for ties, where more blocks were
// as fast or faster; 2-warp blocks lost (bfloat16 1024 x 65536 on 16 blocks: 81.0 against 71.1 on
// 8). ReduceScale, which computes nothing there, came out within 1% on every count that keeps 20
// warps an SM or more, and keeps the fewest blocks.
constexpr int kClusterRowLeastWarps = 3;

// `resident_of(blocks, threads)`: the blocks an SM holds at once, 0 where the device cannot run such
// clusters (those counts are passed over).
template <typename Resident>
int64_t softmax_cluster_row_blocks(int64_t packs, int64_t fewest, int per_thread, Resident resident_of) {
  int64_t best = fewest, best_resident = 0;
  for (int64_t blocks = fewest; blocks <= kClusterRowMaxBlocks; ++blocks) {
    const int threads = warps_of_threads(ceil_div(packs, blocks), per_thread);
    if (blocks > fewest && threads < kClusterRowLeastWarps * kWarpSize) continue;
    const int64_t resident = resident_of(blocks, threads);
    if (resident == 0) continue;
    // resident / blocks >= best_resident / best, in integers.
    if (best_resident == 0 || resident * best >= best_resident * blocks) {
      best = blocks;
      best_resident = resident;
    }
  }
  return best;
}

// Whether `blocks` blocks of `threads` threads, kClusterRowValues values a thread, hold aligned rows
// of `packs` packs with no pack to spare: every block's share whole.
template <int kVec>
bool cluster_row_whole(int64_t packs, int64_t blocks, int threads) {
  return blocks * threads * (kClusterRowValues / kVec) == packs;
}

// cluster_row's kernel for `blocks` blocks of `threads` threads on rows of `packs` packs: rows that
// fill every thread's packs (power-of-two columns) take the kernel without a guard per pack.
// kHeldRaw: the kernel that holds 16-bit softmax rows as raw words (cluster_row_choice).
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled, bool kHeldRaw = false>
auto cluster_row_kernel(int64_t packs, int64_t blocks, int threads) {
  const bool whole = !kPeeled && cluster_row_whole<kVec>(packs, blocks, threads);
  return whole ? row_norm_cluster_row_kernel<In, Out, Acc, Policy, kVec, !kPeeled, kPeeled, kHeldRaw>
               : row_norm_cluster_row_kernel<In, Out, Acc, Policy, kVec, false, kPeeled, kHeldRaw>;
}

// cluster_row's launch on rows of g: blocks a row (0 where the kernel does not apply, the count
// asked for cannot hold the row, or the device cannot run the cluster), threads a block, the
// blocks an SM holds at once, and which kernel (held_raw: kHeldRaw's).
struct ClusterRowPlan {
  int blocks = 0;
  int threads = 0;
  int64_t resident = 0;
  bool held_raw = false;
};

template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled, bool kHeldRaw = false>
ClusterRowPlan cluster_row_plan(const RowGeometry& g, cudaStream_t stream) {
  ClusterRowPlan plan;
  if constexpr (kVec * sizeof(In) == 16 && std::is_same_v<Acc, float>) {
    constexpr int kPacks = kClusterRowValues / kVec;
    const int64_t packs = g.cols / kVec;
    // Two blocks at least: a cluster of one would store its partials into its own shared memory
    // through the cluster window, which compute-sanitizer's memcheck rejects ("Cluster needs to
    // have at least 2 blocks") and aborts the kernel on (the results were right without it).
    const int64_t fewest = std::max<int64_t>(2, ceil_div(packs, int64_t{kPacks} * kClusterRowThreads));
    // The blocks an SM holds, 0 where the device cannot run such clusters.
    const auto resident_of = [&](int64_t blocks, int threads) {
      const auto kernel = cluster_row_kernel<In, Out, Acc, Policy, kVec, kPeeled, kHeldRaw>(packs, blocks, threads);
      cudaLaunchConfig_t config;
      cudaLaunchAttribute attr;
      if (setup_clusters(config, attr, kernel, static_cast<int>(blocks), dim3(threads), 0, stream) <= 0) return 0;
      return resident_blocks(kernel, threads, 0);
    };
    int64_t automatic = fewest;
    if constexpr (Policy::kNeedsSum) {
      // Asked once a row length (and device): each candidate's queries are memoized, but walking
      // up to 15 of them cost host time every call. Keyed (-100 - packs, -2): below the keys of
      // resident_blocks, setup_clusters and max_block_threads on the same kernel. Not by rows: a
      // count past the fewest has blocks of 3 warps or more (6144 values and more), so its grid
      // passes kMaxGridBlocks only past 10^13 values, and the check below refuses it.
      const auto family = row_norm_cluster_row_kernel<In, Out, Acc, Policy, kVec, false, kPeeled, kHeldRaw>;
      automatic = memoized_kernel_query(reinterpret_cast<const void*>(family), -100 - packs, -2, [&] {
        return static_cast<int>(softmax_cluster_row_blocks(packs, fewest, kPacks, resident_of));
      });
    }
    const int64_t blocks = env_positive("REDUCE_OPS_CLUSTER", automatic);
    if (blocks < fewest || blocks > kClusterRowMaxBlocks || g.rows * blocks > kMaxGridBlocks) return plan;
    const int threads = warps_of_threads(ceil_div(packs, blocks), kPacks);
    const int64_t resident = resident_of(blocks, threads);
    if (resident > 0) plan = {static_cast<int>(blocks), threads, resident, kHeldRaw};
  }
  return plan;
}

// Which values cluster_row's 16-bit softmax rows hold from the read to the write: exp(x - max) as
// float, 64 registers of them (80 a thread: 3 blocks of 256 an SM), or the raw words, 32 registers
// (64 a thread: 4 blocks an SM), taking exp once more for the write (kHeldRaw). The SM's fourth
// block keeps its bytes in flight while the others take their exps and wait on the exchange; on
// rows whose clusters all fit in one wave no block follows, and the second exp only lengthens
// each row. So: the raw words where the rows of g take more than one wave of the float kernel's
// clusters (its blocks an SM x SMs), else floats. Float32 rows hold floats either way (the same
// registers). H200 (rows_ab.py, h200_study/session75.txt, section 3), bfloat16, us, floats ->
// this rule: 2048 x 151936 345.2 -> 308.6 (85 -> 95% of copy), 1024 x 262144 282.6 -> 265.0,
// 4096 x 128256 520.8 -> 506.6, 2048 x 100003 (peeled) 223.6 -> 205.4, 1000 x 200000 245.0 ->
// 226.4, 2048 x 50000 107.4 -> 106.1, 128 x 151936 32.0 -> 28.6, 48 x 151936 17.1 -> 16.1, 32 x
// 262144 18.0 -> 16.3; 2048 x 40968 89.7 -> 91.3 (the one loss; 4096 x 65536 even). In one wave
// the raw words lost: 32 x 151936 12.4 against 13.1, 24 x 151936 11.0 against 11.1 (section 2:
// 8 x 262144 9.4 against 9.7, 1 x 151936 7.0 against 7.2-7.7). float16 alike (2048 x 151936
// 348.6 -> 310.4).
// Aligned rows of up to kClusterRowFloatCols values keep floats however many their rows: there
// the raw words lost. H200 (rows_ab.py, h200_study/session76.txt, sections 2 and 4), bfloat16, us,
// raw -> floats: 2048 x 40968 91.3 -> 89.4, 4096 x 40968 175.0 -> 170.4, 8192 x 40968 338.3 ->
// 332.0, 1024 x 43008 48.7 -> 48.0, 2048 x 43008 90.2 -> 88.8, 4096 x 43008 174.1 -> 171.5, 8192 x
// 43008 340.2 -> 338.6 (float16 alike); from 44032 the raw words win (4096 x 44032 176.7 against
// 181.3, 2048 x 45056 95.1 against 96.5; session75.txt, section 9: 0.6-2.8% at 45056-51200).
// Peeled rows keep the rule above (1024-4096 x 41001 0.8-5.7% faster on raw words).
// REDUCE_OPS_CLUSTER_ROW_HELD=raw|float forces one (a developer knob, for measurement).
constexpr int64_t kClusterRowFloatCols = 43008;

template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
ClusterRowPlan cluster_row_choice(const RowGeometry& g, cudaStream_t stream) {
  const ClusterRowPlan floats = cluster_row_plan<In, Out, Acc, Policy, kVec, kPeeled>(g, stream);
  if constexpr (Policy::kNeedsSum && sizeof(In) == 2) {
    if (floats.blocks == 0) return floats;
    // One getenv: where floats are the default only "raw" takes the raw words, elsewhere only
    // "float" skips them.
    const bool one_wave = g.rows * floats.blocks <= floats.resident * sm_count();
    const bool floats_first = one_wave || (!kPeeled && g.cols <= kClusterRowFloatCols);
    const bool raw = floats_first ? env_equals("REDUCE_OPS_CLUSTER_ROW_HELD", "raw")
                                  : !env_equals("REDUCE_OPS_CLUSTER_ROW_HELD", "float");
    if (raw) {
      const ClusterRowPlan words = cluster_row_plan<In, Out, Acc, Policy, kVec, kPeeled, true>(g, stream);
      if (words.blocks > 0) return words;
    }
  }
  return floats;
}

// "cluster_row": blocks of up to kClusterRowThreads threads x kClusterRowValues values that hold
// the row, the fewest (2 or more) for ReduceScale, softmax_cluster_row_blocks' count for softmax
// (or REDUCE_OPS_CLUSTER=<blocks>, a developer knob, where those hold it), each block's share over
// whole warps (blocks past the row's end may hold nothing): cluster_row_plan. Returns false,
// launching nothing, where the kernel does not apply (see row_norm_cluster_row_kernel) or the
// device cannot run the cluster.
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
bool launch_cluster_row(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  if constexpr (kVec * sizeof(In) == 16 && std::is_same_v<Acc, float>) {
    const ClusterRowPlan plan = cluster_row_choice<In, Out, Acc, Policy, kVec, kPeeled>(g, stream);
    if (plan.blocks == 0) return false;
    const int blocks = plan.blocks, threads = plan.threads;
    // However few the rows, unlike the staged clusters (clusters_lose_to_split): H200
    // (tune_rows.py, h200_study/session48_cluster_row.txt), GB/s, split vs this, softmax float32
    // 1 x 262144 189 vs 241, 8 x 262144 1150 vs 1334, 32 x 262144 2054 vs 2704; bfloat16 1 x 131072
    // 56 vs 78, 16 x 262144 1163 vs 1425; ReduceScale float32 8 x 262144 1095 vs 1360, bfloat16
    // 4 x 131072 230 vs 331. H100 the same way: softmax float32 1 x 262144 180 vs 235, bfloat16
    // 16 x 262144 1062 vs 1232; ReduceScale bfloat16 64 x 262144 807 vs 2024.
    const auto kernel = [&] {
      if constexpr (Policy::kNeedsSum && sizeof(In) == 2) {
        if (plan.held_raw) {
          return cluster_row_kernel<In, Out, Acc, Policy, kVec, kPeeled, true>(g.cols / kVec, blocks, threads);
        }
      }
      return cluster_row_kernel<In, Out, Acc, Policy, kVec, kPeeled>(g.cols / kVec, blocks, threads);
    }();
    cudaLaunchConfig_t config;
    cudaLaunchAttribute attrs[2];
    setup_clusters(config, attrs[0], kernel, blocks, dim3(threads), 0, stream);  // runs: cluster_row_plan asked
    config.gridDim = dim3(static_cast<unsigned>(g.rows * blocks));
    // Clusters of more than 8 blocks ask the scheduler to balance its load: the occupancy query
    // then fits one more of them at once (16 blocks: 21 -> 22 on 132 SMs, 13: 23 -> 24). Harness,
    // H200, GB/s, default -> load-balancing, two runs each: bfloat16 softmax 1024 x 262144 3734 ->
    // 3788-3798, 1000 x 200000 3222 -> 3272, float32 softmax 1000 x 200000 3550-3567 -> 3666-3669;
    // clusters of 8 lost 0.5-0.9% (bfloat16 softmax 2048 x 131072 3998 -> 3965-3981), of 4 even
    // (h200_study/session48_cluster_row.txt, section 8).
    if (blocks > 8) {
      attrs[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
      attrs[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicyLoadBalancing;
      config.attrs = attrs;
      config.numAttrs = 2;
    }
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, x, y, g, policy));
    return true;
  }
  return false;
}

// Shared memory of the "smem" kernel for rows of `cols` elements: the row, and for unaligned rows
// (kVec == 1: row_norm_smem_peeled_kernel) a pack more, where the row sits at its own misalignment.
template <typename In, int kVec>
int64_t row_smem_bytes(int64_t cols) {
  if constexpr (kVec == 1) return (ceil_div(cols, int64_t{kMaxVec<In>}) + 1) * 16;
  return cols * static_cast<int64_t>(sizeof(In));
}

// The "smem" kernel for rows of g (shared memory allowed), and its threads: unaligned rows move
// their aligned middles by 16-byte packs, so threads as for 16-byte packs.
template <typename In, typename Out, typename Acc, typename Policy, int kVec>
auto smem_kernel(const RowGeometry& g, int& threads) {
  threads = block_per_row_threads(ceil_div(g.cols, kVec == 1 ? kMaxVec<In> : kVec));
  auto kernel = [] {
    if constexpr (kVec == 1) {
      // The bulk copy on sm_90+ unless REDUCE_OPS_SMEM_LOAD=packs (a developer knob, for measurement).
      const bool bulk = props().major >= 9 && !env_equals("REDUCE_OPS_SMEM_LOAD", "packs");
      return bulk ? row_norm_smem_peeled_kernel<In, Out, Acc, Policy, true>
                  : row_norm_smem_peeled_kernel<In, Out, Acc, Policy, false>;
    } else {
      return row_norm_smem_kernel<In, Out, Acc, Policy, kVec>;
    }
  }();
  allow_smem(kernel, row_smem_bytes<In, kVec>(g.cols));
  return kernel;
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_smem(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream) {
  int threads = 0;
  const auto kernel = smem_kernel<In, Out, Acc, Policy, kVec>(g, threads);
  kernel<<<grid_for(g.rows), threads, row_smem_bytes<In, kVec>(g.cols), stream>>>(x, y, g, policy);
}

// Whether cluster_row holds at least as many rows of g on an SM at once as "smem" (its blocks an SM
// over its blocks a row, against smem's blocks an SM, a row each). Float32 softmax rows that are
// not whole 16-byte packs, past a block (32768) and within shared memory, took "smem" before
// cluster_row; smem's row of 128-227 KB leaves one block an SM. H200 (rows_ab.py,
// h200_study/session72.txt, section 7), us, smem -> cluster_row on softmax's count (torch.compile):
// 4096 x 33001 320.32 -> 289.73 (533.94; 6 blocks of 3 warps, 8 an SM: 1.33 rows), 4096 x 36001
// 335.82 -> 304.14, 2048 x 36001 175.87 -> 158.98, 8192 x 36001 640.75 -> 593.44, 2048 x 40001
// (5 of 4, 6 an SM: 1.2 rows) 188.58 -> 173.79, 4096 x 40001 360.96 -> 334.69, 2048 x 45001 (1
// row) 204.74 -> 202.02, 4096 x 45001 390.21 -> 388.67. Under 1 row cluster_row came out even
// (section 6: 2048 x 56001, 0.86 rows, 245.60 -> 242.48; 2048 x 50257, 0.89, 223.95 -> 223.38;
// 4096 x 50257 430.66 -> 433.70, 8192 x 50257 844.38 -> 851.87), and those stay on smem.
// (16-bit rows of up to 65536 stay on "block": cluster_row lost 1-6% there, section 6.)
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
bool cluster_row_holds_as_many_rows_as_smem(const RowGeometry& g, cudaStream_t stream) {
  const ClusterRowPlan plan = cluster_row_choice<In, Out, Acc, Policy, kVec, kPeeled>(g, stream);
  if (plan.blocks == 0) return false;
  constexpr int kScalarVec = kPeeled ? 1 : kVec;
  int threads = 0;
  const auto kernel = smem_kernel<In, Out, Acc, Policy, kScalarVec>(g, threads);
  const int64_t smem_rows = resident_blocks(kernel, threads, row_smem_bytes<In, kScalarVec>(g.cols));
  return plan.resident >= smem_rows * plan.blocks;
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec>
void launch_split(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                  const at::TensorOptions& opts) {
  const RowSplit plan = split_rows(g.rows, g.cols);
  const SplitArgs s{plan.splits, plan.chunk};
  at::Tensor partial;
  auto* pp = partials_scratch<RowPartial<Acc>>(g.rows * s.splits, opts, partial);
  const int64_t grid = grid_for(g.rows * s.splits);
  if constexpr (sizeof(In) == 4) {
    row_norm_partial_kernel_4_blocks<In, Acc, Policy, kVec><<<grid, kSplitThreads, 0, stream>>>(x, pp, g, s);
  } else {
    row_norm_partial_kernel<In, Acc, Policy, kVec><<<grid, kSplitThreads, 0, stream>>>(x, pp, g, s);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_dependent(row_norm_apply_kernel<In, Out, Acc, Policy, kVec>, grid, dim3(kSplitThreads), 0, stream, x, y,
                   static_cast<const RowPartial<Acc>*>(pp), g, s, policy);
}

// Whether rows of g that fit a block take cluster_row before it (launch_vec): 16-bit rows past 40960
// values (session 48's rule, but peeled softmax rows), and shorter rows, float32 too, where they are
// too few for the block's waves (fewer than the count an SM below). Softmax takes cluster_row on
// more rows only where cluster_row's shares are whole (cluster_row_kernel's guard-free kernel):
// elsewhere it lost. Peeled 16-bit softmax rows only past 40960, where few or where the block would
// be a plain 1024-thread one (one an SM: rows of 8161-8192 packs, which the staged block does not
// take); peeled float32 rows never. H200 (rows_ab.py, h200_study/session76.txt, sections 2-10),
// us, block -> cluster_row, bfloat16 but where named:
//   ReduceScale from 12288 values on fewer than 24 rows an SM: 1024 x 12288 17.9 -> 17.1, 2048 x
//     16384 38.3 -> 37.1, 2048 x 24576 54.8 -> 51.4, 2048 x 26000 58.9 -> 55.2, 1024 x 32776 41.7
//     -> 38.1, 2048 x 40960 85.6 -> 83.9, 3072 x 24576 78.3 -> 74.9, peeled 1024 x 33001 40.4 ->
//     38.3; 4096 rows even (32776 133.8 against 133.3, 40960 163.3 against 164.1). Float32 on fewer
//     than 8: 1024 x 12288 31.7 -> 28.7, 1024 x 13000 33.4 -> 32.1, 1024 x 32768 71.8 -> 68.2
//     (512 x 20000 26.1 against 26.4, the one loss).
//   Softmax from 24576 values on fewer than 8 rows an SM: 1024 x 24576 32.9 -> 30.6, 1024 x 36864
//     48.3 -> 42.4, 1024 x 26000 35.0 -> 34.7, 1024 x 39000 50.1 -> 47.5; on fewer than 16 where
//     the shares are whole: 2048 x 24576 54.7 -> 52.5, 2048 x 40960 90.2 -> 85.0, 2111 x 36864
//     84.9 -> 78.4, where not mixed (2048 x 26000 58.3 against 60.1, 2048 x 34816 78.7 -> 75.0);
//     from 3072 rows mixed (3072 x 28672 89.2 against 90.8, 3072 x 40960 129.4 -> 125.7), and
//     shorter rows too (2048 x 20480 47.7 against 48.7). Float32 from 12288, fewer than 8 an SM,
//     whole shares: 1024 x 12288 31.6 -> 28.7, 1024 x 24576 55.5 -> 51.3, 1024 x 32768 72.0 ->
//     68.1; not whole the block won (1024 x 13000 33.3 against 35.7, 1024 x 20000 46.5 against 49.8).
//   Peeled softmax past 40960 on fewer than 8 rows an SM: 1024 x 41001 51.8 -> 50.3, 1024 x 50257
//     61.2 -> 57.4, 1024 x 55001 65.3 -> 60.8, 1024 x 65537 83.6 -> 71.0; 2048 x 65537 154.1 ->
//     136.0, 4096 x 65537 294.3 -> 263.8 (1024 threads). On 2048 rows mixed (41001 89.9 against
//     93.3, 60001 128.4 against 130.6, 50257 110.9 against 108.2), 4096 rows the block by up to 7%;
//     float32 2048 x 20001 84.2 against 98.2.
constexpr int kFewRowsPerSM = 8;
constexpr int kWholeSoftmaxFewRowsPerSM = 16;
constexpr int kReduceScaleFewRowsPerSM = 24;

// Whether cluster_row's plan for the aligned rows of g gives every block a whole share.
template <typename In, typename Out, typename Acc, typename Policy, int kVec>
bool cluster_row_shares_whole(const RowGeometry& g, cudaStream_t stream) {
  const ClusterRowPlan plan = cluster_row_choice<In, Out, Acc, Policy, kVec, false>(g, stream);
  return plan.blocks > 0 && cluster_row_whole<kVec>(g.cols / kVec, plan.blocks, plan.threads);
}

template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled>
bool cluster_row_before_block(const RowGeometry& g, int64_t packs, cudaStream_t stream) {
  const int64_t sms = sm_count();
  const bool few = g.rows < kFewRowsPerSM * sms;
  if constexpr (sizeof(In) == 4) {
    if (kPeeled || g.cols < 12288 || !few) return false;
    return !Policy::kNeedsSum || cluster_row_shares_whole<In, Out, Acc, Policy, kVec>(g, stream);
  } else if constexpr (!Policy::kNeedsSum) {
    return g.cols > 40960 || (g.cols >= 12288 && g.rows < kReduceScaleFewRowsPerSM * sms);
  } else if constexpr (kPeeled) {
    return g.cols > 40960 && (few || warps_of_threads(packs, kMaxRegPacks<Acc>) >= kMaxRegThreads);
  } else {
    if (g.cols > 40960) return true;
    if (g.cols < 24576) return false;
    return few || (g.rows < kWholeSoftmaxFewRowsPerSM * sms &&
                   cluster_row_shares_whole<In, Out, Acc, Policy, kVec>(g, stream));
  }
}

// The forward dispatcher (strategies named at the head of this file). kVec == 1 (unaligned rows
// that cannot be peeled) has no register block or cluster kernels: scalar loads gain nothing from
// them over "smem". kPeeled (unaligned rows, 16-byte packs, see launch_row_norm): the warp, block
// and cluster_row kernels hold the rows' aligned middles and edges (row_norm.cuh's RowPacks), the
// persistent clusters do not, and "smem" and "split" take them as kVec == 1 rows.
template <typename In, typename Out, typename Acc, typename Policy, int kVec, bool kPeeled = false>
void launch_vec(const In* x, Out* y, const RowGeometry& g, const Policy& policy, cudaStream_t stream,
                const at::TensorOptions& opts) {
  constexpr int kScalarVec = kPeeled ? 1 : kVec;  // "smem" and "split"
  // A peeled row's whole packs: at most cols / kVec.
  const int64_t packs = kPeeled ? g.cols / kVec : ceil_div(g.cols, kVec);
  // warp: up to 8 packs x 32 lanes (kMaxWarpPacks) fit a lane's registers.
  const bool warp_fits = packs <= 32 * kMaxWarpPacks;
  // block: kMaxRegPacks x kMaxRegThreads packs (128 KB) fit one block's registers.
  const bool block_fits = kVec > 1 && packs <= int64_t{kMaxRegPacks<Acc>} * kMaxRegThreads;
  // The automatic choice: a warp per row up to 2 packs a lane (4 for 16-bit and peeled float32
  // rows), a block per row (up to 1024 threads) wherever that fits, clusters only past that. H200
  // (tune_rows.py), warp vs block since the block kernels run one block per row, % of copy:
  // float32 262144 x 512 softmax 96 vs 99, 65536 x 1024 95 vs 97 (ReduceScale 94 vs 96); bfloat16
  // 65536 x 1024 softmax 91 vs 87 (ReduceScale 92 vs 91), 262144 x 512 95 vs 75, 131072 x 1536 75
  // vs 94, 65536 x 2048 81 vs 92 (ReduceScale 83 vs 96). At 4096 x 32768 float32 one 1024-thread
  // block beat a cluster of two 512-thread blocks (softmax 95% vs 85%, ReduceScale 96 vs 88).
  // Peeled float32 rows too take the warp up to 4 packs a lane: H200 (rows_ab2.py,
  // h200_study/session61_peeled_warp.txt), us, block -> warp: ReduceScale 32768 x 263 26.7 -> 23.2
  // (torch.compile 22.1), 32768 x 325 28.5 -> 26.6; softmax 28.3 -> 22.9 (22.0), 30.1 -> 26.5;
  // even (within 1.6%) at 383, 453, 511 and 515.
  const int lane_packs = sizeof(In) == 2 || (kPeeled && sizeof(In) == 4) ? 4 : 2;
  // Aligned float32 rows of 65-95 packs (260-380 values) take the warp at 3 packs a lane too
  // (launch_warp), where a block a row (64 threads) was bound by the SMs' block launch rate. H200
  // (rows_ab.py, h200_study/session74.txt, call 6), us, block -> warp (torch.compile): softmax 131072
  // x 264 85.99 -> 69.84 (69.61), 131072 x 300 88.29 -> 78.66 (79.47), 131072 x 352 93.61 -> 91.00
  // (91.78), 262144 x 320 173.38 -> 161.20 (163.23), 32768 x 300 26.42 -> 24.70 (24.30); ReduceScale
  // 85.39 -> 70.43 (70.38), 86.05 -> 79.52 (80.41), 90.70 -> 91.66, 167.98 -> 162.26, 25.74 -> 25.04.
  // At 96 packs (4 a lane) the block stayed ahead (131072 x 384 97.80 against 98.58).
  const bool three_packs = sizeof(In) == 4 && kVec * sizeof(In) == 16 && !kPeeled && packs < 3 * kWarpSize;
  const bool warp_preferred = warp_fits && (kVec == 1 || packs <= lane_packs * kWarpSize || three_packs);
  // smem: the row fits one block's opt-in shared memory (227 KB on sm_90).
  const bool smem_fits = row_smem_bytes<In, kScalarVec>(g.cols) <= block_smem_limit();
  // Block-per-row strategies with too few rows for the GPU lose to "split" (see too_few_blocks).
  const bool few_rows = too_few_blocks(g.rows, 1, g.cols);
  // 16-bit rows widened to a wider output (8-byte input packs) past one block take "split": its
  // two reads beat the clusters' one. H200, bfloat16 -> float32 softmax, % of copy (one read, one
  // write), cluster (automatic before) vs split: 1024 x 262144 49 vs 67, 2048 x 131072 55 vs 67,
  // 512 x 524288 40 vs 66, 4096 x 65536 59 vs 68 (h200_study/session24.txt).
  const bool widening = kVec > 1 && sizeof(In) == 2 && kVec * sizeof(In) < 16;
  // 16-bit rows past 40960 values take cluster_row before a block: H200 (tune_rows.py,
  // h200_study/session48_cluster_row.txt), % of copy, block vs cluster_row, bfloat16 softmax
  // 4096 x 65536 89 vs 96, 1024 x 65536 77 vs 87, 2048 x 49152 86 vs 92, but 4096 x 40960 90 vs 87
  // (its blocks' shares not whole) and 8192 x 32768 95 vs 95; ReduceScale 4096 x 65536 95 vs 96,
  // 2048 x 49152 90 vs 93. H100: softmax 1024 x 65536 89 vs 92, 2048 x 49152 91 vs 96, 4096 x
  // 40960 94 vs 96.
  // Peeled softmax rows take "block" (16-bit, up to 65536 values) or "smem" (float32) before
  // cluster_row. H200 (tune_rows.py, h200_study/session52_peeled_rows.txt), % of copy, cluster_row
  // vs block (bfloat16) or smem (float32), 2048 / 1024 / 4096 x 50257: bfloat16 78 / 72 / 82 vs
  // 86 / 78 / 91, float32 79 / 75 / 82 vs 87 / 81 / 91. Not so aligned rows whose cluster_row
  // shares are not whole (section 5 there): float32 2048 x 50176 cluster_row 90 vs smem 73, 4096
  // x 45056 93 vs 83; bfloat16 2048 x 96000 92 vs 54 (past one block; peeled 2048 x 100003 74 vs
  // 69, 2048 x 70001 76 vs 63: section 6); only bfloat16 within one block leans to the block (2048
  // x 50176 85 vs 82, 4096 x 40960 90 vs 87, 4096 x 45056 91 vs 91). So the peeled cluster_row's
  // softmax is what trails (float32 50257 at 79%, against 90% for aligned 50176); its ReduceScale
  // leads (float32 94 vs 91 at 2048 x 50257, bfloat16 93 vs 89). Since session 72 (softmax's
  // cluster_row count), float32's smem gives way to cluster_row where that holds as many rows on an
  // SM (cluster_row_holds_as_many_rows_as_smem: rows of up to about 45000).
  // Since session 76 shorter rows too, float32 as well, where they are few (softmax: where
  // cluster_row's shares are whole but on the fewest), and peeled 16-bit softmax rows past 40960
  // where they are few (cluster_row_before_block).
  const bool softmax_peeled = kPeeled && Policy::kNeedsSum;
  const bool cluster_row_first =
      !widening && sizeof(In) <= 4 && cluster_row_before_block<In, Out, Acc, Policy, kVec, kPeeled>(g, packs, stream);
  const ForcedStrategy forced;
  if (forced.is("warp") && warp_fits) {
    launch_warp<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream);
  } else if (forced.is("block") && block_fits) {
    launch_block<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream);
  } else if (forced.is("cluster_row") && launch_cluster_row<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream)) {
    // launched
  } else if (forced.is("cluster") && !kPeeled && launch_cluster<In, Out, Acc, Policy, kVec>(x, y, g, policy, stream, false)) {
    // launched
  } else if (forced.is("smem") && smem_fits) {
    launch_smem<In, Out, Acc, Policy, kScalarVec>(x, y, g, policy, stream);
  } else if (forced.is("split")) {
    launch_split<In, Out, Acc, Policy, kScalarVec>(x, y, g, policy, stream, opts);
  } else if (warp_preferred) {
    launch_warp<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream);
  } else if (cluster_row_first && launch_cluster_row<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream)) {
    // launched
  } else if (block_fits && !few_rows) {
    launch_block<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream);
  } else if (softmax_peeled && sizeof(In) == 4 && smem_fits && !few_rows &&
             !cluster_row_holds_as_many_rows_as_smem<In, Out, Acc, Policy, kVec, kPeeled>(g, stream)) {
    launch_smem<In, Out, Acc, Policy, kScalarVec>(x, y, g, policy, stream);
  } else if (!widening && !cluster_row_first && launch_cluster_row<In, Out, Acc, Policy, kVec, kPeeled>(x, y, g, policy, stream)) {
    // launched (where cluster_row_first, it was tried above)
  } else if (!widening && !kPeeled && launch_cluster<In, Out, Acc, Policy, kVec>(x, y, g, policy, stream, true)) {
    // launched
  } else if (smem_fits && !few_rows && !widening) {
    launch_smem<In, Out, Acc, Policy, kScalarVec>(x, y, g, policy, stream);
  } else {
    launch_split<In, Out, Acc, Policy, kScalarVec>(x, y, g, policy, stream, opts);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename In, typename Out, typename Acc, typename Policy>
void launch_row_norm(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y, const Policy& policy) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const In* xp = static_cast<const In*>(x.const_data_ptr());
  Out* yp = static_cast<Out*>(y.data_ptr());  // y may be x (in-place ReduceScale)
  constexpr int kVec = std::min(kMaxVec<In>, kMaxVec<Out>);
  const bool vectorize = g.cols % kVec == 0 && g.x_row_stride % kVec == 0 && g.y_row_stride % kVec == 0 &&
                         is_aligned(xp, sizeof(In) * kVec) && is_aligned(yp, sizeof(Out) * kVec);
  if (vectorize) return launch_vec<In, Out, Acc, Policy, kVec>(xp, yp, g, policy, stream, x.options());
  // x's and y's rows contiguous (row stride = cols, or one row) on 16-byte boundaries: what packed
  // rows and the tile below read and write by 16-byte packs.
  const bool contiguous = (g.rows == 1 || (g.x_row_stride == g.cols && g.y_row_stride == g.cols)) &&
                          is_aligned(xp, 16) && is_aligned(yp, 16);
  // Rows of 4 or 8 bytes (16-bit rows of 2 or 4, float32 rows of 2) of x and y contiguous on 16-byte
  // boundaries may go 2-4 rows a 16-byte pack, a thread a pack (row_norm_packed_rows_kernel), before
  // a lane a row (launch_lane_rows on 4- or 8-byte packs: below, and launch_warp's 16-bit rows of 4).
  // They do by default where that won: every ReduceScale row (its 2-4 stats a store) and 16-bit
  // softmax rows of 2. H200 (h200_study/session69_packed_rows.txt, call 2), us, a lane a row ->
  // packed rows (torch.compile): ReduceScale bfloat16 1048576 x 2 9.01 -> 7.71 (10.93), 4194304 x 2
  // 22.06 -> 17.02 (27.87), 1048576 x 4 10.08 -> 9.67 (13.48), 4194304 x 4 26.43 -> 25.68 (40.37),
  // float32 1048576 x 2 9.78 -> 9.68 (12.26), 4194304 x 2 25.63 -> 25.36 (38.69); softmax bfloat16
  // 1048576 x 2 7.76 -> 7.01 (7.55), 4194304 x 2 16.88 -> 13.65 (15.94), float16 7.68 -> 6.97
  // (6.53), 16.53 -> 13.29 (15.46). Softmax's 16-bit rows of 4 and float32 rows of 2 came out within
  // 3% either way (bfloat16 1048576 x 4 8.96 -> 9.12, 4194304 x 4 21.82 -> 21.28; float32 1048576 x 2
  // 9.04 -> 9.26, 4194304 x 2 21.60 -> 21.26), and stay a lane a row. (Call 1, ReduceScale's stats
  // stored a row at a time: bfloat16 4194304 x 2 22.19 -> 29.10.) REDUCE_OPS_PACKED_ROWS=on|off (a
  // developer knob) forces either where the packs fit; a forced strategy and REDUCE_OPS_ROW_TILE=on
  // skip it.
  if constexpr (std::is_same_v<In, Out> && sizeof(In) <= 4) {
    const int64_t row_bytes = g.cols * static_cast<int64_t>(sizeof(In));
    const bool fits = g.cols >= 2 && (row_bytes == 4 || row_bytes == 8) && contiguous && !ForcedStrategy().any() &&
                      !env_equals("REDUCE_OPS_ROW_TILE", "on");
    const bool wins = !Policy::kNeedsSum || (sizeof(In) == 2 && g.cols == 2);
    if (fits && (env_equals("REDUCE_OPS_PACKED_ROWS", "on") || (wins && !env_equals("REDUCE_OPS_PACKED_ROWS", "off")))) {
      auto launch = [&](auto cols) {
        constexpr int kCols = decltype(cols)::value;
        if constexpr (kCols < kMaxVec<In>) {
          const int64_t packs = g.rows / (kMaxVec<In> / kCols);
          const int64_t blocks = std::max<int64_t>(1, ceil_div(packs, int64_t{kBlock}));
          row_norm_packed_rows_kernel<In, Acc, Policy, kCols><<<blocks, kBlock, 0, stream>>>(xp, yp, g.rows, policy);
        }
      };
      if (g.cols == 2) launch(Int<2>{});
      else launch(Int<4>{});
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  // 16-bit rows of one or 3-15 whole 8-byte packs (4 or 12-60 values), x's and y's rows on 8-byte
  // boundaries, take "warp" on 8-byte packs, before the tile (4, 12) and the peeled warp (20-60): a
  // lane a row (one pack, since session 68), lane groups of 2 (up to 4 packs, 2 packs a lane, since
  // session 66; 4 lanes of a pack before) or 4 and 8 lanes of 2 packs, 2 rows a lane group at once
  // since session 65 (launch_warp; before, one at a time on kPeeledWarpWaves waves). Rows of 4, tile
  // -> a lane a row, H200 (h200_study/session68_rows.txt, call 1), us (torch.compile): ReduceScale
  // bfloat16 1048576 x 4 13.09 -> 10.14 (16.35), float16 12.96 -> 9.66 (15.42); softmax 13.22 ->
  // 9.31 (9.62), 13.26 -> 9.36 (8.99). REDUCE_OPS_HALF_PACKS=off (a developer knob)
  // skips it, and so do REDUCE_OPS_ROW_TILE=on and a forced strategy. Session 64, against the tile (12)
  // and the peeled warp (20-60), us (h100_study/session64_packs.txt and h200_study/session64_packs.txt;
  // torch.compile in brackets): H100, ReduceScale bfloat16 131072 x 20 11.33 -> 9.82 (9.82), 524288 x
  // 20 27.87 -> 23.55 (20.54), 1048576 x 12 29.31 -> 28.45 (24.77), 65536 x 28 9.55 -> 8.51, 32768 x 60
  // 8.80 -> 8.45; softmax 131072 x 20 11.81 -> 9.76 (11.68), 1048576 x 12 28.99 -> 26.59, 65536 x 52
  // 11.84 -> 10.88; float16 alike. H200, ReduceScale bfloat16 262144 x 20 15.46 -> 13.60 (13.18),
  // 524288 x 20 25.34 -> 20.61 (18.14), 131072 x 12 8.67 -> 8.29, 32768 x 60 8.22 -> 7.62; softmax
  // 262144 x 20 15.78 -> 13.06 (14.37), 524288 x 20 25.50 -> 19.74 (23.20), 1048576 x 12 26.85 ->
  // 24.93; one loss, ReduceScale 1048576 x 12 26.78 -> 27.84 (19.71). 16 waves lost on the H100 at
  // 1048576 x 12 (29.31 -> 33.44). 4-byte packs (16-bit rows of 10 or 50) and float32 rows on 8-byte
  // packs lost or came out even (bfloat16 ReduceScale 524288 x 10 15.36 -> 20.61), and so did the
  // backward on 8-byte packs (bfloat16 262144 x 20 14.94 -> 18.27).
  if constexpr (std::is_same_v<In, Out> && sizeof(In) == 2) {
    constexpr int kHalf = kVec / 2;
    const bool half_packs = g.cols % kHalf == 0 && (g.cols == kHalf || g.cols >= 3 * kHalf) && g.cols <= 15 * kHalf &&
                            g.x_row_stride % kHalf == 0 && g.y_row_stride % kHalf == 0 && is_aligned(xp, 8) &&
                            is_aligned(yp, 8) && !ForcedStrategy().any() && !env_equals("REDUCE_OPS_HALF_PACKS", "off") &&
                            !env_equals("REDUCE_OPS_ROW_TILE", "on");
    if (half_packs) {
      launch_warp<In, Out, Acc, Policy, kHalf, false>(xp, yp, g, policy, stream, /*few_waves=*/true);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  // Rows of 2 (16-bit and float32: a 4- or 8-byte pack), x's and y's rows on the pack's boundaries,
  // not taken as packed rows above, go a lane a row on row_norm_rows_kernel, before the tile, as
  // 16-bit rows of 4 above: 2 rows a lane at once, softmax 4 (the rows of 4's choice, not measured
  // apart here). The figures below are before packed rows.
  // REDUCE_OPS_PAIR_ROWS=off (a developer knob) skips it, and so do
  // REDUCE_OPS_ROW_TILE=on and a forced strategy. H200 (h200_study/session68_rows.txt, call 4), us,
  // tile -> a lane a row (torch.compile): ReduceScale bfloat16 1048576 x 2 12.59 -> 8.75 (10.67),
  // 4194304 x 2 31.15 -> 21.95 (26.82), float32 12.30 -> 9.54 (12.59), 33.89 -> 25.39 (40.90);
  // softmax bfloat16 12.77 -> 7.52 (6.77), 31.10 -> 16.78 (16.02), float32 12.05 -> 8.56 (7.75),
  // 32.02 -> 21.67 (20.40); float16 1048576 x 2 ReduceScale 12.80 -> 8.88, softmax 11.89 -> 7.23.
  if constexpr (std::is_same_v<In, Out> && sizeof(In) <= 4) {
    constexpr int kPair = 2;
    const bool pairs = g.cols == kPair && g.x_row_stride % kPair == 0 && g.y_row_stride % kPair == 0 &&
                       is_aligned(xp, kPair * sizeof(In)) && is_aligned(yp, kPair * sizeof(In)) &&
                       !ForcedStrategy().any() && !env_equals("REDUCE_OPS_PAIR_ROWS", "off") &&
                       !env_equals("REDUCE_OPS_ROW_TILE", "on");
    if (pairs) {
      launch_lane_rows<In, Out, Acc, Policy, kPair>(xp, yp, g, policy, stream);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  // Rows that are not whole 16-byte packs, x's and y's rows contiguous on 16-byte boundaries (a
  // fresh y, or x itself), go a tile of consecutive rows a block through shared memory
  // (row_norm_tile_kernel on tile_plan's tiles) where that won: rows too short to peel (under two
  // packs, below: they went an element a lane), and 16-bit and float32 rows of up to 32 elements.
  // Float32 rows of 9-31, peeled warp -> tile, us: H100 (h100_study/session63_tiles.txt, call 2)
  // softmax 131072 x 10 10.75 -> 9.34, ReduceScale 10.59 -> 9.25; H200 (h200_study/
  // session63_tiles.txt, calls 6-7, 2 waves) softmax 131072 x 10 10.40 -> 8.67, 131072 x 15 11.01
  // -> 9.50, 131072 x 17 12.35 -> 11.74, 131072 x 25 14.59 -> 13.34, 131072 x 31 15.36 -> 14.66,
  // ReduceScale alike but 131072 x 19 (12.03 -> 12.16); call 8, 1 wave: softmax 131072 x 17 12.51
  // -> 11.07, 262144 x 31 23.84 -> 22.42, ReduceScale 131072 x 19 12.19 -> 11.33. H200
  // (rows_ab2.py, h200_study/session62_tile.txt, call 8), us, before -> tile (torch.compile):
  // bfloat16 softmax 262144 x 3 33.39 -> 7.49 (6.46), 131072 x 7 20.99 -> 6.30 (9.18), 131072 x 10
  // 23.14 -> 8.70 (8.74), 131072 x 20 12.74 -> 11.20 (10.85); float32 262144 x 3 36.45 -> 7.33,
  // 131072 x 7 22.91 -> 6.62; ReduceScale alike (bfloat16 131072 x 7 24.00 -> 6.46). Longer 16-bit
  // rows lost or came out even against the peeled warp (call 5: bfloat16 65536 x 150 softmax 19.20
  // -> 22.72, ReduceScale 19.39 -> 24.00), and longer float32 rows within 5% either way up to 100
  // (150-197 lost). REDUCE_OPS_ROW_TILE=on|off (a developer knob) forces either where the tile
  // fits; a forced strategy (REDUCE_OPS_STRATEGY) skips it.
  if constexpr (std::is_same_v<In, Out>) {
    if (contiguous && tile_fits(g.cols, sizeof(In), 1) && !ForcedStrategy().any()) {
      const bool wins = g.cols < 2 * kMaxVec<In> || (sizeof(In) <= 4 && g.cols <= 32);
      if (env_equals("REDUCE_OPS_ROW_TILE", "on") || (wins && !env_equals("REDUCE_OPS_ROW_TILE", "off"))) {
        launch_tiles(tile_plan(g.rows, g.cols, sizeof(In), 1), kRowTileWaves, stream,
                     [](auto width) {
                       return row_norm_tile_kernel<In, Out, Acc, Policy, decltype(width)::value, kTilePer>;
                     },
                     xp, yp, g, policy);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        return;
      }
    }
  }
  // Other rows are peeled (their aligned middles by 16-byte packs, RowPacks) where y's rows lie
  // on x's misalignment (same element size, same start and row stride modulo 16 bytes: y a
  // fresh tensor of x's shape, or x itself), unless REDUCE_OPS_ROW_PEEL=off (a developer knob,
  // for measurement). H100 (tune_rows.py, h100_study/session52_peeled_rows.txt), % of copy,
  // element kernels -> peeled: softmax bfloat16 16384 x 1021 52 -> 72, 8192 x 4097 79 -> 88,
  // 512 x 262147 40 -> 92 (split -> cluster_row), float32 2048 x 100003 39 -> 94; ReduceScale
  // bfloat16 1024 x 50257 87 -> 92. Float32 rows of 68-255 elements stay element rows (then on
  // the warp kernel, since session 78 on launch_element_rows): peeled, 65536 x 77 softmax lost 66
  // -> 61 (ReduceScale 65 -> 63), 32768 x 197 71 -> 70; 16-bit rows gained there (bfloat16 32768
  // x 197 softmax 51 -> 56).
  if constexpr (sizeof(In) == sizeof(Out) && std::is_same_v<Acc, float>) {
    const auto bytes_16 = [](const void* p, int64_t stride) {
      return (reinterpret_cast<uintptr_t>(p) + static_cast<uint64_t>(stride) * sizeof(In)) % 16;
    };
    // Float32 rows of up to 16 whole packs are peeled too. H200 (rows_ab2.py,
    // h200_study/session61_peeled_warp.txt), us, element warp -> peeled warp, ReduceScale: 131072 x
    // 10 26.4 -> 10.5, 131072 x 21 26.8 -> 13.2, 131072 x 37 28.5 -> 17.9 (torch.compile 20.8),
    // 65536 x 45 16.7 -> 13.3, 65536 x 61 17.1 -> 14.3; softmax 24.0 -> 10.5, 24.7 -> 13.7, 26.6
    // -> 17.7 (29.8), 16.0 -> 13.3, 16.6 -> 14.5. Not past that: 65536 x 77 17.8 -> 17.9 and 17.5
    // -> 18.1, 65536 x 150 25.6 -> 28.7 and 26.4 -> 27.9.
    const bool short_float = sizeof(In) == 4 && g.cols / kVec <= 16;
    const int64_t shortest = sizeof(In) == 4 && !short_float ? 256 : 2 * kVec;  // two packs at least
    const bool peel = g.cols >= shortest && reinterpret_cast<uintptr_t>(xp) % 16 == reinterpret_cast<uintptr_t>(yp) % 16 &&
                      (g.rows == 1 || bytes_16(xp, g.x_row_stride) == bytes_16(yp, g.y_row_stride)) &&
                      !env_equals("REDUCE_OPS_ROW_PEEL", "off");
    if (peel) return launch_vec<In, Out, Acc, Policy, kVec, true>(xp, yp, g, policy, stream, x.options());
  }
  launch_vec<In, Out, Acc, Policy, 1>(xp, yp, g, policy, stream, x.options());
}

// Rows of up to this many packs (past 32) the backward's warp kernel takes 16 lanes a row at 3 packs a
// lane (launch_backward_rows' sixteen_lanes): all 48 slots. 40 until session 74, when 16-bit lanes
// came to hold raw words (HeldPack); H200 (rows_ab.py, h200_study/session74.txt, calls 3-4), us,
// the block a warp a row (16-bit) or 2 packs over 32 lanes (float32) -> 16 lanes (torch.compile):
// bfloat16 131072 x 328 68.96 -> 64.66 (64.85), 131072 x 352 71.45 -> 68.50 (68.43), 131072 x 384
// 73.94 -> 73.58 (73.58), 32768 x 384 25.39 -> 24.38; peeled 65536 x 335 45.81 -> 38.94 (44.51),
// 65536 x 383 46.40 -> 43.01 (48.77); float32 131072 x 164 65.97 -> 64.91, 131072 x 176 69.41 ->
// 68.75, 131072 x 192 even. 4 packs over 16 lanes at 49-64 came out even with the block (131072 x
// 416 80.14 against 79.86, 512 96.35 against 96.55): not taken.
constexpr int64_t kSixteenLanePacks = 48;

// 16-bit rows of up to this many packs (past 64) the backward's warp kernel takes 32 lanes a row at 3
// packs a lane (launch_backward_rows' three_packs).
constexpr int64_t kThreePackLanePacks = 80;

// The backward's warp layouts that take softmax_backward_warp_capped_kernel (64 registers, where
// ptxas gives the raw-word kernel 50-56, both 4 blocks an SM): 16-bit rows on 16 lanes of 3 packs.
// H200 (rows_ab.py, h200_study/session74.txt, call 2), us, plain -> capped: bfloat16 peeled 65536 x
// 265 34.30 -> 32.48, 65536 x 319 38.49 -> 37.30; float16 34.59 -> 32.50, 38.62 -> 37.23; aligned
// rows within 0.5% (131072 x 264 53.42 -> 53.50, 262144 x 264 100.43 -> 99.94).
// REDUCE_OPS_BACKWARD_WARP_CAP=off (a developer knob, for measurement): the plain kernel there too.
template <typename T, int kVec, int kPacks, int kWidth>
constexpr bool kCappedBackwardWarp = sizeof(T) == 2 && kVec * sizeof(T) == 16 && kPacks == 3 && kWidth == 16;

// The backward's warp kernel for a layout: the capped twin where kCappedBackwardWarp holds (unless
// REDUCE_OPS_BACKWARD_WARP_CAP=off, read only there), else the plain one; both of one type.
template <typename T, typename Acc, int kVec, int kPacks, int kWidth, bool kLastLoads, bool kPeeled>
auto backward_warp_kernel() {
  if constexpr (kCappedBackwardWarp<T, kVec, kPacks, kWidth>) {
    if (!env_equals("REDUCE_OPS_BACKWARD_WARP_CAP", "off")) {
      return softmax_backward_warp_capped_kernel<T, Acc, kVec, kPacks, kWidth, kLastLoads, kPeeled>;
    }
  }
  return softmax_backward_warp_kernel<T, Acc, kVec, kPacks, kWidth, kLastLoads, kPeeled>;
}

// The backward's float32 element rows of 129-256 values (kVec == 1: rows of 129-255 on 16-byte
// boundaries that launch_backward_rows does not peel, 33-64 whole packs and an odd tail) go a warp a
// row on softmax_backward_rows_kernel, ceil(cols / 32) values a lane (5-8), every load in flight,
// as the forward's (launch_element_rows). H200 (rows_ab.py, h200_study/session78.txt, section 6),
// us, the looping warp kernel -> this (torch.compile): 32768 x 129 19.42 -> 18.78 (19.14), 65536 x
// 150 35.10 -> 34.78 (34.43), 32768 x 197 25.63 -> 25.41 (25.50), 262144 x 197 151.39 -> 148.80
// (148.93), 16384 x 255 21.09 -> 18.88 (18.50). Shorter rows keep the looping kernel: at 77 values
// it lost on 16 lanes (65536 x 77 21.47 -> 22.24, 131072 x 77 35.76 -> 36.99) and on 32 (23.30,
// 39.84); 65536 x 100 came out even. REDUCE_OPS_BACKWARD_ELEMENT_ROWS=off (a developer knob, for
// measurement): the looping kernel there too; a forced strategy skips it as well.
template <typename T, typename Acc>
void launch_backward_element_rows(const T* grad, const T* out, T* gx, const BackwardRows& r, cudaStream_t stream) {
  with_int_in<5, kMaxWarpPacks>(ceil_div(r.cols, int64_t{kWarpSize}), [&](auto per_tag) {
    auto kernel = softmax_backward_rows_kernel<T, Acc, decltype(per_tag)::value, kWarpSize>;
    kernel<<<ceil_div(r.rows, kBlock / kWarpSize), kBlock, 0, stream>>>(grad, out, gx, r);
  });
}

// The backward dispatcher: the forward's strategies with both rows on chip, so each register
// kernel thread holds up to kRowPacks packs of each row (the clusters: kMaxRegPacks of grad, with
// out's in shared memory).
template <typename T, typename Acc, int kVec>
void launch_backward_rows(const T* grad, const T* out, T* gx, const BackwardRows& r, cudaStream_t stream,
                          const at::TensorOptions& opts) {
  constexpr int kRowPacks = 4;  // 2 x 4 packs: the forward's 8 packs of registers
  const int64_t packs = ceil_div(r.cols, kVec);
  // Rows that are not whole 16-byte packs (kVec == 1) of tensors that start on 16-byte boundaries:
  // a warp holds up to 8 elements of each row a lane (rows of 129-256, which a block per row took),
  // or the row's aligned middle by 16-byte packs where that wins (peeled_warp below); longer rows
  // go by their aligned middles' packs on the register block and clusters as aligned rows do
  // (peeled_regs, below), or the "smem" kernel (softmax_backward_smem_peeled_kernel) and the
  // "split" kernels each segment's (SegmentPacks), unless REDUCE_OPS_BACKWARD_PEEL=off (a
  // developer knob, for measurement: the element paths). Split, H200
  // (h200_study/session60_backward_split.txt), off -> on, us: float32
  // 2048 x 50257 665.2 -> 510.1 (torch.compile 645.3), 64 x 1000003 509.3 -> 327.2, 8 x 16777215
  // 1042.4 -> 657.8; bfloat16 8 x 16777215 565.8 -> 324.8. H200 (h200_study/session59_rows.txt), off -> on, us:
  // bfloat16 32768 x 197 33.2 -> 20.7 (torch.compile 19.4), 65536 x 150 51.6 -> 31.1, 16384 x 511
  // 32.2 -> 22.5, 8192 x 4099 125.8 -> 53.8, 2048 x 50257 485.4 -> 195.7 (torch.compile 322.9);
  // float32 32768 x 197 37.1 -> 25.7, 8192 x 4099 153.4 -> 99.9. 16 elements a lane lost to the
  // peeled "smem" at 257-511 (bfloat16 16384 x 511: 62.1 vs 22.5 us; float32 51.4 vs 31.2), and
  // the peeled "smem" to 8 a lane at 129-256 (bfloat16 32768 x 197: 32.5 vs 20.8).
  const bool peel = kVec == 1 && is_aligned(grad, 16) && is_aligned(out, 16) && is_aligned(gx, 16) &&
                    !env_equals("REDUCE_OPS_BACKWARD_PEEL", "off");
  constexpr int kPeeledVec = kMaxVec<T>;
  const int64_t peeled_slots = ceil_div(r.cols, kPeeledVec);
  // warp: 4 packs of each row per lane (the forward's 8 packs of registers); 8 elements (peel).
  const bool warp_fits = packs <= 32 * (peel ? 8 : kRowPacks);
  // The peeled "smem" kernel's kGrad: grad's packs in shared memory beside out's (0), or read again
  // from the L2, their first read marked evict_last (2), where both rows do not fit one block's
  // shared memory but out's does (it beats the split), or where out's alone fits at least twice
  // the blocks an SM and their rows of grad, resident together, take at most a third of the L2.
  // REDUCE_OPS_BACKWARD_SMEM=both|l2|l2_marked (0, 1: unmarked, 2) forces one (a developer knob).
  // H200 (h200_study/session60_backward_split.txt), us, the split or both rows -> grad read again:
  // float32 2048 x 50257 503.4 -> 463.1 (split), 4096 x 32001 629.3 -> 448.6 (split); bfloat16
  // 4096 x 32001 243.5 -> 202.0 (1 -> 2 blocks an SM, 17 MB of grad), 1024 x 100003 252.5 -> 238.4
  // (split). Lost: bfloat16 2048 x 50257 196.5 -> 222.3 (1 -> 2 blocks, 26 MB), float32 8192 x 4099
  // 99.8 -> 100.8 (7 -> 8 blocks).
  const int64_t out_smem = peeled_slots * 16;
  auto grad_mode = [&] {
    if (!peel || env_equals("REDUCE_OPS_BACKWARD_SMEM", "both")) return 0;
    if (env_equals("REDUCE_OPS_BACKWARD_SMEM", "l2")) return 1;
    if (env_equals("REDUCE_OPS_BACKWARD_SMEM", "l2_marked")) return 2;
    if (warp_fits || out_smem > block_smem_limit()) return 0;  // the warp's rows; the split's
    if (2 * out_smem > block_smem_limit()) return 2;
    const int threads = block_per_row_threads(peeled_slots);
    auto both_kernel = softmax_backward_smem_peeled_kernel<T, Acc, 0>;
    auto grad_kernel = softmax_backward_smem_peeled_kernel<T, Acc, 2>;
    allow_smem(both_kernel, 2 * out_smem);  // before the occupancy queries, which count it
    allow_smem(grad_kernel, out_smem);
    const int both = resident_blocks(both_kernel, threads, 2 * out_smem);
    const int one = resident_blocks(grad_kernel, threads, out_smem);
    const int64_t grad_bytes = one * sm_count() * r.cols * static_cast<int64_t>(sizeof(T));
    return one >= 2 * both && 3 * grad_bytes <= props().l2CacheSize ? 2 : 0;
  };
  const int grad_from_l2 = grad_mode();
  const int64_t smem = peel ? (grad_from_l2 ? 1 : 2) * out_smem : 2 * r.cols * static_cast<int64_t>(sizeof(T));
  // The register kernels (block, cluster) take peeled rows by their aligned middles' packs
  // (softmax_backward_regs_kernel's kPeeled): kRegVec-element packs, reg_packs of them a row at most.
  constexpr int kRegVec = kVec > 1 ? kVec : kPeeledVec;
  const bool regs_apply = kVec > 1 || peel;
  const int64_t reg_packs = kVec > 1 ? packs : peeled_slots;
  // block: kRowPacks x kMaxRegThreads packs of each row (2 x 64 KB) fit one block's registers.
  const bool block_fits = regs_apply && reg_packs <= int64_t{kRowPacks} * kMaxRegThreads;
  // Peeled rows take the register kernels in auto as aligned rows do (block where it fits and the
  // rows are many, then clusters), unless REDUCE_OPS_BACKWARD_PEELED_REGS=off (a developer knob,
  // for measurement: "smem", its clusters and the split, as before). H200 (rows_ab.py,
  // h200_study/session73.txt, call 2), us, off -> on: bfloat16 2048 x 50257 193.25 -> 163.92
  // (clusters of 2; 75.7% -> 89.2% of copy), 4096 x 32001 202.14 -> 184.99 (block), 1024 x 100003
  // 211.71 -> 169.36, 512 x 200003 255.90 -> 171.50, 8192 x 14337 180.10 -> 164.86, 16384 x 4099
  // 109.79 -> 97.09; float32 2048 x 50257 413.30 -> 312.72 (70.8% -> 93.5%), 4096 x 32001 449.73
  // -> 381.57, 1024 x 100003 500.75 -> 319.22, 8192 x 14337 371.84 -> 323.65, 32768 x 1031 104.61
  // -> 97.34, 64 x 100003 38.72 -> 33.95; the aligned rows of the same sizes came out the same
  // (bfloat16 2048 x 50264 165.18, float32 304.16).
  const bool peeled_regs = kVec > 1 || (peel && !env_equals("REDUCE_OPS_BACKWARD_PEELED_REGS", "off"));
  // A warp up to 2 packs a lane (1 for 16-bit rows; 16-bit rows of 33-48 and 65-80 packs at 3 packs
  // a lane, below), then a block wherever it fits, then clusters. H200 (tune_rows.py), warp vs
  // block: 65536 x 1024 bfloat16 75% vs 93% of copy;
  // since the block kernels run one block per row, bfloat16 262144 x 512 95 vs 101, float32
  // 262144 x 256 100% on the warp; 4096 x 32768 bfloat16: block 99%, a cluster 94%.
  // Rows of 33-48 packs (kSixteenLanePacks; 33-40 until session 74) go 16 lanes a row at 3 packs a
  // lane (48 slots), where 2 packs over 32 lanes left half of them idle and the block ran them a
  // warp a row (a 1-warp block, 32 an SM), unless REDUCE_OPS_BACKWARD_16_LANES=off (a developer
  // knob, for measurement). H200 (rows_ab.py, h200_study/session73.txt, calls 9-10), us, 16-bit
  // rows on the block / float32 rows on 32 lanes -> 16 lanes (torch.compile), call 10: bfloat16
  // 131072 x 264 84.64 -> 66.78 (54.27), 131072 x 320 85.02 -> 82.69 (63.71), 262144 x 264 163.60
  // -> 124.35 (101.58), peeled 65536 x 265 45.15 -> 41.60 (36.80), 65536 x 301 45.44 -> 45.18,
  // 65536 x 319 45.79 -> 46.67 (the one loss); float16 peeled 65536 x 265 45.02 -> 35.58 (36.67);
  // float32 131072 x 132 58.03 -> 53.44 (53.39), 131072 x 160 64.10 -> 62.69 (62.56). With raw
  // words (session 74, HeldPack) 16-bit rows of 264-320 reach torch.compile: 131072 x 264 53.50
  // (53.80), 131072 x 320 62.58 (62.81). 5-8 packs over 8 lanes lost to 16 lanes but on peeled
  // 65536 x 300 (43.68 against 44.93; 131072 x 264 79.55, 131072 x 400 175.23).
  const bool sixteen_lanes = !env_equals("REDUCE_OPS_BACKWARD_16_LANES", "off");
  // 16-bit rows of 65-80 packs (520-640 values) go a warp a row at 3 packs a lane, where the block ran
  // them in 64-thread blocks a row, 33-40 threads of them holding packs. H200 (rows_ab.py,
  // h200_study/session74.txt, call 11), us, block -> warp (torch.compile): bfloat16 131072 x 520
  // 103.35 -> 98.56 (100.19), 262144 x 520 199.66 -> 193.69 (193.02), 131072 x 600 113.82 -> 113.18,
  // 4096 x 600 9.38 -> 9.02; call 12: 131072 x 560 108.82 -> 106.21, 131072 x 640 (80 packs) 118.46 ->
  // 119.22 (float16 0.4% behind), even at 700, the block 0.7% ahead at 760 (95 packs); float32 rows of
  // 65-95 packs within 0.4% either way, left on the block. REDUCE_OPS_BACKWARD_3_PACKS=off (a developer
  // knob, for measurement): the block there too.
  constexpr bool kThreePacks = sizeof(T) == 2 && kVec > 1;  // the only instantiations of that layout
  const bool three_packs = kThreePacks && packs > 2 * kWarpSize && packs <= kThreePackLanePacks &&
                           !env_equals("REDUCE_OPS_BACKWARD_3_PACKS", "off");
  const bool warp_preferred =
      warp_fits && (kVec == 1 || packs <= (sizeof(T) == 2 ? 1 : 2) * kWarpSize ||
                    (sixteen_lanes && packs <= kSixteenLanePacks) || three_packs);
  // smem: both rows fit one block's opt-in shared memory.
  const bool smem_fits = smem <= block_smem_limit();
  const bool few_rows = too_few_blocks(r.rows, 1, r.cols);
  // Marked loads by size (row_loads_marked: grad and out read, grad_x written), in the warp,
  // block and cluster kernels. H200 (h200_study/session59_rows.txt), plain -> marked, us: float32
  // 4096 x 32768 398.5 -> 390.6 (0.96x -> 0.98x torch.compile), 1024 x 262144 898 -> 854;
  // bfloat16 16384 x 4096 98.4 -> 96.3, 442368 x 128 84.6 -> 82.8.
  const bool marked = kRegVec * sizeof(T) == 16 && row_loads_marked(3 * r.rows * r.cols * static_cast<int64_t>(sizeof(T)));
  auto warp = [&] {
    auto run = [&](auto packs_tag, auto width_tag) {
      constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value;
      with_marked_loads<kVec * sizeof(T) == 16>(marked, [&](auto last) {
        auto kernel = backward_warp_kernel<T, Acc, kVec, kPacks, kWidth, decltype(last)::value, false>();
        const int64_t groups = ceil_div(r.rows, kBlock / kWidth);
        kernel<<<warp_kernel_grid(kernel, groups), kBlock, 0, stream>>>(grad, out, gx, r);
      });
    };
    // 16 lanes for 9-16 packs (bfloat16 x 128): 32 lanes left half of them idle (H200,
    // 442368 x 128 bfloat16: 89% of copy). Rows of a pack, of 2 and of 3-4 packs on 1, 2 and 4
    // lanes, where 8 lanes left 7, 6 or 4 of them idle. H200 (h200_study/session67_rows.txt, call 2),
    // us, 8 lanes -> 2 or 4 (torch.compile): bfloat16 1048576 x 16 52.19 -> 30.42 (29.78), 1048576
    // x 8 49.56 -> 22.43 (17.46), 524288 x 32 37.38 -> 30.71 (29.27), 262144 x 24 22.02 -> 15.90
    // (14.86); float32 1048576 x 8 44.45 -> 29.50 (29.76), 1048576 x 16 57.44 -> 50.88 (52.21),
    // 262144 x 12 19.06 -> 15.06 (14.85); call 3, a pack on 2 lanes -> 1: bfloat16 1048576 x 8 22.24
    // -> 17.98 (17.52), float32 1048576 x 4 20.06 -> 17.68 (30.16). A pack a lane, not 2 packs on
    // fewer lanes: 2 packs a lane over 4, 8, 16 lanes lost at 9-32 packs (call 1: bfloat16 442368 x
    // 128 82.96 -> 89.82). REDUCE_OPS_BACKWARD_LANES=<n> (a developer knob, for measurement): n
    // lanes a row at fewest (8: the table before).
    const int64_t fewest = env_positive("REDUCE_OPS_BACKWARD_LANES", 1);
    if constexpr (kVec == 1 && std::is_same_v<T, float>) {
      if (packs > 4 * kWarpSize && packs <= kMaxWarpPacks * kWarpSize && !ForcedStrategy().any() &&
          !env_equals("REDUCE_OPS_BACKWARD_ELEMENT_ROWS", "off")) {
        return launch_backward_element_rows<T, Acc>(grad, out, gx, r, stream);
      }
    }
    if (kVec > 1 && fewest <= 1 && packs <= 1) run(Int<1>{}, Int<1>{});
    else if (kVec > 1 && fewest <= 2 && packs <= 2) run(Int<1>{}, Int<2>{});
    else if (kVec > 1 && fewest <= 4 && packs <= 4) run(Int<1>{}, Int<4>{});
    else if (kVec > 1 && packs <= 8) run(Int<1>{}, Int<8>{});
    else if (kVec > 1 && packs <= 16) run(Int<1>{}, Int<16>{});
    else if (packs <= 32) run(Int<1>{}, Int<32>{});
    else if (kVec > 1 && sixteen_lanes && packs <= kSixteenLanePacks) run(Int<3>{}, Int<16>{});
    else if (packs <= 64) run(Int<2>{}, Int<32>{});
    else if (three_packs) {
      if constexpr (kThreePacks) run(Int<3>{}, Int<32>{});
    }
    else if (packs <= 32 * kRowPacks) run(Int<kRowPacks>{}, Int<32>{});
    else if constexpr (kVec == 1) run(Int<8>{}, Int<32>{});  // peel: warp_fits caps rows at 256
  };
  // block: 2 packs of each row per thread while that keeps kPreferredRegThreads, else kRowPacks.
  // Unlike the forward's, these blocks stay in registers past 512 threads: out's packs staged in
  // shared memory (8 packs a thread, as the clusters) lost on the H200 (tune_rows.py,
  // h200_study/session19_block_staged.txt), registers -> staged, % of copy: float32 16384 x 12000
  // 103 -> 100, 8192 x 14000 102 -> 99; bfloat16 8192 x 24000 101 -> 98; the rest even.
  // Peeled rows by 16-byte packs in a warp (softmax_backward_warp_kernel's kPeeled; a row's middle
  // has at most cols / kPeeledVec whole packs, its head and tail go an element a lane), where they
  // beat the element warp kernel: rows of up to 4 whole packs (16-bit) or 16 (wider), and past 16
  // (16-bit) or 64. H200 (rows_ab2.py, h200_study/session61_peeled_warp.txt), us, elements ->
  // packs: bfloat16 131072 x 20 20.0 -> 13.2, 131072 x 37 21.5 -> 16.3 (torch.compile 21.0), 65536
  // x 150 31.6 -> 28.3, 32768 x 197 21.2 -> 18.5 (19.6), 32768 x 263 46.4 -> 20.9, 32768 x 511
  // 52.7 -> 34.1, 16384 x 1021 36.3 -> 31.1; float32 131072 x 37 28.5 -> 23.3, 65536 x 45 17.5 ->
  // 16.0, 65536 x 61 19.7 -> 18.9, 32768 x 263 38.9 -> 31.7, 32768 x 511 56.5 -> 53.6. The
  // elements kept: bfloat16 65536 x 61 14.3 against 14.8, 65536 x 77 15.9 against 18.0; float32
  // 65536 x 77 21.5 against 25.1, 65536 x 150 35.4 against 37.1; even at bfloat16 65536 x 45 and
  // 100, float32 131072 x 20, 65536 x 100 and 32768 x 197. REDUCE_OPS_BACKWARD_WARP=packs|elements
  // (a developer knob) forces either where it fits.
  const int64_t peeled_whole = r.cols / kPeeledVec;
  // Past a whole pack a lane (16-bit rows; past kSixteenLanePacks, sixteen_lanes) or two (wider),
  // the register block (peeled_regs), as for aligned rows (warp_preferred). H200 (rows_ab.py,
  // h200_study/session73.txt, call 3), us,
  // peeled warp -> block: bfloat16 65536 x 300 47.62 -> 45.38, 65536 x 511 60.40 -> 52.26, 65536 x
  // 700 74.08 -> 69.94, 32768 x 1021 53.79 -> 52.06, 131072 x 400 even; float32 131072 x 263
  // 105.09 -> 100.51, 65536 x 511 100.45 -> 97.47, 65536 x 300 even. Within them the warp won
  // (bfloat16 131072 x 263: 60.00 against 84.74, 262144 x 200 82.08 against 162.78).
  const bool peeled_block_wins =
      peeled_regs && block_fits && !few_rows &&
      peeled_whole > std::max<int64_t>((sizeof(T) == 2 ? 1 : 2) * kWarpSize, sixteen_lanes ? kSixteenLanePacks : 0);
  const bool peeled_warp_fits = peel && peeled_whole <= 32 * kRowPacks;
  const bool peeled_warp_wins = !peeled_block_wins && (sizeof(T) == 2 ? peeled_whole <= 4 || peeled_whole > 16
                                                                        : peeled_whole <= 16 || peeled_whole > 64);
  const bool peeled_warp_preferred =
      peeled_warp_fits && (env_equals("REDUCE_OPS_BACKWARD_WARP", "packs") ||
                           (peeled_warp_wins && !env_equals("REDUCE_OPS_BACKWARD_WARP", "elements")));
  // A lane group of 4 up to 4 whole packs, then 2 packs a lane over 4 and 8 lanes (float32
  // 131072 x 37: 24.0 us against 26.9 over 16 lanes a pack each), then 32 lanes (one pack a lane:
  // bfloat16 65536 x 150 29.9 us against 31.7 over 16 lanes, 32768 x 197 18.7 against 19.7), each
  // group several rows (kPeeledWarpWaves).
  auto peeled_warp = [&] {
    if constexpr (kVec == 1) {
      auto run = [&](auto packs_tag, auto width_tag) {
        constexpr int kPacks = decltype(packs_tag)::value, kWidth = decltype(width_tag)::value;
        auto kernel = backward_warp_kernel<T, Acc, kPeeledVec, kPacks, kWidth, false, true>();
        const int64_t groups = ceil_div(r.rows, kBlock / kWidth);
        kernel<<<warp_kernel_grid(kernel, groups, true), kBlock, 0, stream>>>(grad, out, gx, r);
      };
      if (peeled_whole <= 4) run(Int<1>{}, Int<4>{});
      else if (peeled_whole <= 8) run(Int<2>{}, Int<4>{});
      else if (peeled_whole <= 16) run(Int<2>{}, Int<8>{});
      else if (peeled_whole <= 32) run(Int<1>{}, Int<32>{});
      else if (sixteen_lanes && peeled_whole <= kSixteenLanePacks) run(Int<3>{}, Int<16>{});
      else if (peeled_whole <= 64) run(Int<2>{}, Int<32>{});
      else run(Int<kRowPacks>{}, Int<32>{});
    }
  };
  // "tile" (softmax_backward_tile_kernel on tile_plan's tiles): peeled rows of up to kTileMaxCols
  // elements, for 16-bit rows and float32 rows of up to 48, before the peeled and element warps.
  // REDUCE_OPS_BACKWARD_TILE=on|off (a developer knob) forces either where the tile fits. H200
  // (rows_ab2.py, h200_study/session62_tile.txt), us, off -> tile (torch.compile), call 8:
  // bfloat16 262144 x 3 15.84 -> 7.01 (8.29), 131072 x 7 10.50 -> 6.50 (9.50), 131072 x 10 12.58
  // -> 8.42 (7.97), 65536 x 150 28.22 -> 22.46 (20.93); float32 262144 x 3 12.61 -> 7.04, 131072 x
  // 10 11.01 -> 9.70; call 4: bfloat16 131072 x 37 16.29 -> 15.58 (21.06), 65536 x 77 15.98 ->
  // 15.14 (18.05), 65536 x 100 18.94 -> 16.99 (15.74), 32768 x 197 18.78 -> 17.06 (19.65), 32768 x
  // 251 20.29 -> 19.78; float32 131072 x 37 23.26 -> 22.21. float32 rows of 61-197 were even or
  // lost (65536 x 150 35.14 -> 36.35), but 32768 x 251 gained (33.57 -> 31.26). One wave lost
  // (bfloat16 65536 x 150: 25.28), 4 were even; 4 KB tiles won at 10-37 elements and lost past
  // them, 16 KB tiles lost.
  const bool tile_wins = sizeof(T) == 2 || (sizeof(T) == 4 && r.cols <= 48);
  const bool tile_preferred =
      peel && tile_fits(r.cols, sizeof(T), 2) &&
      (env_equals("REDUCE_OPS_BACKWARD_TILE", "on") || (tile_wins && !env_equals("REDUCE_OPS_BACKWARD_TILE", "off")));
  auto tile = [&] {
    if constexpr (kVec == 1) {
      launch_tiles(tile_plan(r.rows, r.cols, sizeof(T), 2), kBackwardTileWaves, stream,
                   [](auto width) { return softmax_backward_tile_kernel<T, Acc, decltype(width)::value, kTilePer>; },
                   grad, out, gx, r);
    }
  };
  // Blocks of one warp (16-bit rows of 49-64 packs; 41-64 with sixteen_lanes off) run on a grid of
  // kWarpRowWaves waves of resident blocks, each looping over rows, not a block a row: 131072
  // 1-warp blocks took 85 us at any length from 320 to 448 values (Nsight Compute, bfloat16 131072
  // x 384: 28% achieved occupancy of 50%), the rate at which the SMs take up new blocks.
  // H200 (rows_ab.py, h200_study/session74.txt, call 2), us, a block a row -> 16 waves
  // (torch.compile): bfloat16 131072 x 328 85.15 -> 68.96 (65.50), 131072 x 384 85.25 -> 74.18
  // (74.70), 131072 x 400 85.50 -> 77.36 (78.20), 262144 x 384 164.83 -> 142.75 (143.17), 131072 x
  // 448 85.95 -> 85.40, 131072 x 512 96.08 -> 96.54, peeled 65536 x 401 even; 8 waves lost 1-3%
  // to 16. REDUCE_OPS_BACKWARD_BLOCK_WAVES=<n>|off (a developer knob, for measurement): n waves, or
  // a block a row.
  auto block = [&] {
    auto run = [&](auto packs_tag) {
      constexpr int kPacks = decltype(packs_tag)::value;
      with_marked_loads<kRegVec * sizeof(T) == 16>(marked, [&](auto last) {
        auto kernel =
            softmax_backward_regs_kernel<T, Acc, kRegVec, kPacks, false, false, decltype(last)::value, kVec == 1>;
        const int threads = warps_of_threads(reg_packs, kPacks);
        const int64_t grid =
            small_block_grid(kernel, r.rows, threads, threads == kWarpSize, "REDUCE_OPS_BACKWARD_BLOCK_WAVES");
        kernel<<<grid, threads, 0, stream>>>(grad, out, gx, r, 0u);
      });
    };
    if (reg_packs <= 2 * kPreferredRegThreads) run(Int<2>{});
    else run(Int<kRowPacks>{});
  };
  auto cluster = [&](bool automatic) {
    if (!regs_apply) return false;
    constexpr bool kPeeled = kVec == 1;
    // No bulk copy of the next rows here: it lost (H200, 1024 x 262144 bfloat16: 88% -> 81%).
    // out's packs wait in shared memory (kOutShared) unless REDUCE_OPS_CLUSTER_HOLD=registers
    // (a developer knob): a block holds twice the packs, so a cluster needs half the blocks and
    // each SM moves twice the bytes per cluster barrier. H200 (tune_rows.py), registers ->
    // shared: float32 1024 x 262144 63% -> 82% of copy (16 -> 8 blocks), 2048 x 131072
    // 91 -> 94 (8 -> 4); bfloat16 1024 x 262144 88 -> 93 (8 -> 4), 128 x 1048576 56 -> 62
    // (split -> 16 blocks); 4096 x 32768 (the block per row) unchanged.
    if (!env_equals("REDUCE_OPS_CLUSTER_HOLD", "registers")) {
      constexpr int kPacks = kMaxRegPacks<Acc>;
      return with_marked_loads<kRegVec * sizeof(T) == 16>(marked, [&](auto last) {
        auto kernel =
            softmax_backward_regs_kernel<T, Acc, kRegVec, kPacks, true, true, decltype(last)::value, kPeeled>;
        auto launch = [&](int blocks, int threads) {
          return launch_on_clusters(kernel, r.rows, blocks, threads, stage_smem<T, kRegVec, kPacks>(threads), stream,
                                    grad, out, gx, r);
        };
        return try_cluster_sizes(r.rows, r.cols, reg_packs, kPacks, automatic, RowOp::kSoftmaxBackward, launch);
      });
    }
    auto kernel = softmax_backward_regs_kernel<T, Acc, kRegVec, kRowPacks, true, false, false, kPeeled>;
    auto launch = [&](int blocks, int threads) {
      return launch_on_clusters(kernel, r.rows, blocks, threads, 0, stream, grad, out, gx, r);
    };
    return try_cluster_sizes(r.rows, r.cols, reg_packs, kRowPacks, automatic, RowOp::kSoftmaxBackward, launch);
  };
  // The peeled "smem" kernel on clusters of C blocks, a segment of the row each (kCluster), where
  // REDUCE_OPS_BACKWARD_SMEM=cluster (C from REDUCE_OPS_CLUSTER, 2 by default), or in auto by
  // smem_cluster_preferred's rule (below). H200 (h200_study/session61_peeled_warp.txt, calls 8-9),
  // us, auto -> clusters of 2: float32 2048 x 50257 463.9 -> 411.7 (grad read again from the L2
  // before), bfloat16 1024 x 100003 235.5 -> 211.7 (the split before); lost where both rows fit a
  // block (bfloat16 2048 x 50257 192.3 -> 239.2, 4096 x 32001 202.6 -> 238.8) and at float32 4096 x
  // 32001 (445.3 -> 500.0, grad's rows from the L2: 17 MB resident against 26 for 50257).
  // Returns false, launching nothing, where the device cannot run the cluster or a block's share
  // exceeds its shared memory.
  auto shared_cluster = [&] {
    if constexpr (kVec == 1) {
      const int blocks = static_cast<int>(env_positive("REDUCE_OPS_CLUSTER", 2));
      const int64_t chunk = ceil_div(ceil_div(r.cols, blocks), kPeeledVec) * kPeeledVec;
      const int64_t slots = chunk / kPeeledVec + 1;
      const int64_t bytes = (2 * slots + 1) * 16;  // both rows' packs, then the exchange
      if (blocks < 2 || blocks > kMaxClusterBlocks || bytes > block_smem_limit()) return false;
      auto kernel = softmax_backward_smem_peeled_kernel<T, Acc, 0, true>;
      cudaLaunchConfig_t config;
      cudaLaunchAttribute attr;
      const int active = setup_clusters(config, attr, kernel, blocks, dim3(block_per_row_threads(slots)), bytes, stream);
      if (active <= 0) return false;
      // As many clusters as run at once, each looping over rows. One cluster a row lost: H200,
      // clusters of 2, bfloat16 2048 x 50257 282.6 us against 239.2 looping, float32 433.8 against
      // 411.7 (calls 8 and 9).
      config.gridDim = dim3(static_cast<unsigned>(blocks * std::min<int64_t>(r.rows, active)));
      C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, grad, out, gx, r, slots));
      return true;
    }
    return false;
  };
  // Clusters of 2 in auto where both rows exceed one block's shared memory, a cluster of 2 holds
  // them, and grad's rows resident under the re-read (a block an SM) exceed 0.3 of the L2 (60 MB
  // on the H200). H200 (h200_study/session62_tile.txt, calls 3-4), us, the re-read (l2_marked) ->
  // clusters of 2, by resident grad: float32 2048 x 50257 (26.5 MB) 462.1 -> 413.6, 1536 x 50257
  // 346.4 -> 311.3, 1024 x 45001 (23.8 MB) 195.4 -> 183.9, 4096 x 40001 (21.1 MB) 646.9 -> 615.3;
  // bfloat16 2048 x 90001 (23.8 MB) 389.1 -> 365.9, 1024 x 100003 (the split before) 236.4 ->
  // 212.1; even at bfloat16 1024 x 80001 (21.1 MB); kept, as the re-read won: float32 4096 x 32001
  // (16.9 MB) 447.5 against 499.6. Asked only where "smem" runs (its getenvs off the other paths).
  auto smem_cluster_preferred = [&] {
    if (env_equals("REDUCE_OPS_BACKWARD_SMEM", "both") || env_equals("REDUCE_OPS_BACKWARD_SMEM", "l2") ||
        env_equals("REDUCE_OPS_BACKWARD_SMEM", "l2_marked")) {
      return false;
    }
    const int64_t half_slots = ceil_div(ceil_div(r.cols, 2), kPeeledVec) + 1;
    const int64_t resident_grad = sm_count() * r.cols * static_cast<int64_t>(sizeof(T));
    return 2 * out_smem > block_smem_limit() && (2 * half_slots + 1) * 16 <= block_smem_limit() &&
           10 * resident_grad > 3 * static_cast<int64_t>(props().l2CacheSize);
  };
  auto shared = [&] {
    if constexpr (kVec == 1) {
      if (peel && (env_equals("REDUCE_OPS_BACKWARD_SMEM", "cluster") || smem_cluster_preferred()) && shared_cluster()) {
        return;
      }
      if (peel) {
        auto kernel = grad_from_l2 == 2   ? softmax_backward_smem_peeled_kernel<T, Acc, 2>
                      : grad_from_l2 == 1 ? softmax_backward_smem_peeled_kernel<T, Acc, 1>
                                          : softmax_backward_smem_peeled_kernel<T, Acc, 0>;
        allow_smem(kernel, smem);
        kernel<<<grid_for(r.rows), block_per_row_threads(peeled_slots), smem, stream>>>(grad, out, gx, r,
                                                                                         peeled_slots);
        return;
      }
    }
    auto kernel = softmax_backward_smem_kernel<T, Acc, kVec>;
    allow_smem(kernel, smem);
    kernel<<<grid_for(r.rows), block_per_row_threads(packs), smem, stream>>>(grad, out, gx, r);
  };
  auto split = [&] {
    const RowSplit plan = split_rows(r.rows, r.cols);
    const SplitArgs s{plan.splits, plan.chunk};
    at::Tensor partial;
    Acc* pp = partials_scratch<Acc>(r.rows * s.splits, opts, partial);
    const int64_t grid = grid_for(r.rows * s.splits);
    auto run = [&](auto peeled) {
      constexpr bool kPeeled = decltype(peeled)::value;
      softmax_backward_partial_kernel<T, Acc, kVec, kPeeled><<<grid, kSplitThreads, 0, stream>>>(grad, out, pp, r, s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      launch_dependent(softmax_backward_apply_kernel<T, Acc, kVec, kPeeled>, grid, dim3(kSplitThreads), 0, stream,
                       grad, out, gx, static_cast<const Acc*>(pp), r, s);
    };
    // Peeled segments (peel): their aligned middles by 16-byte packs.
    if constexpr (kVec == 1) {
      if (peel) return run(std::true_type{});
    }
    run(std::false_type{});
  };
  const ForcedStrategy forced;
  if (forced.is("warp") && peeled_warp_preferred) peeled_warp();
  else if (forced.is("warp") && warp_fits) warp();
  else if (forced.is("block") && block_fits) block();
  else if (forced.is("cluster") && cluster(false)) {
    // launched
  } else if (forced.is("smem") && smem_fits) shared();
  else if (forced.is("split")) split();
  else if (tile_preferred) tile();
  else if (peeled_warp_preferred) peeled_warp();
  else if (warp_preferred) warp();
  else if (peeled_regs && block_fits && !few_rows) block();
  else if (peeled_regs && cluster(true)) {
    // launched
  } else if (smem_fits && !few_rows) shared();
  else split();
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Plans g's inner-dim tiles (inner_tiles, launch.h) and launches kernel_for(hold, cluster,
// two_blocks) on them with `args` and then the tiles per outer index. kernel_for takes integral
// constants (packs a thread holds: kHold, kInnerHold or kInnerScalarHold, or 0 for streamed shares;
// clusters or not; whether the launch is of held plain blocks of kInnerThreads, for which it may
// return a kernel that fits two of them an SM) and returns the kernel.
// Clusters only where kClusters (16-byte packs), of the planned size or, where the device cannot
// run that, half as many blocks (a plan of its own); plain blocks otherwise.
template <bool kClusters, int kHold, typename KernelFor, typename... Args>
void launch_inner_tiles(const InnerGeometry& g, int vec, int element_bytes, WideRows wide_rows, cudaStream_t stream,
                        KernelFor kernel_for, Args... args) {
  auto launch = [&](const InnerTiles& t, auto cluster) {
    auto run = [&](auto kernel) {
      if constexpr (decltype(cluster)::value) {
        cudaLaunchConfig_t config;
        cudaLaunchAttribute attr;
        if (setup_clusters(config, attr, kernel, t.cluster, t.block, 0, stream) <= 0) return false;
        config.gridDim = dim3(static_cast<unsigned>(t.grid));
        C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args..., t.tiles_per_outer));
      } else {
        kernel<<<t.grid, t.block, 0, stream>>>(args..., t.tiles_per_outer);
      }
      return true;
    };
    if (!t.held) return run(kernel_for(Int<0>(), cluster, std::false_type()));
    if constexpr (!decltype(cluster)::value) {
      if (int64_t{t.block.x} * t.block.y == kInnerThreads) return run(kernel_for(Int<kHold>(), cluster, std::true_type()));
    }
    return run(kernel_for(Int<kHold>(), cluster, std::false_type()));
  };
  if constexpr (kClusters) {
    if (props().major >= 9) {
      int most = kInnerMaxCluster;
      for (InnerTiles t;
           (t = inner_tiles(g, vec, element_bytes, kHold, kInnerThreads, most, wide_rows)).cluster > 1;
           most = t.cluster / 2) {
        if (launch(t, std::true_type())) return;
      }
    }
  }
  launch(inner_tiles(g, vec, element_bytes, kHold, kInnerThreads, 1, wide_rows), std::false_type());
}

// launch(std::integral_constant<int, vec>) for the widest pack of the inner-dim kernels that
// fits(bytes) allows (an inner dim that is a whole number of packs, aligned storage): 16 bytes,
// 8 for 16-bit elements (kInnerHalfHold a thread: a multiple of 4 values but not 8, where scalar
// loads, one 2-byte value an instruction, set the pace), else single values.
template <typename T, typename Fits, typename Launch>
void launch_widest_inner_pack(Fits fits, Launch launch) {
  constexpr int kVec = kMaxVec<T>;
  if (fits(16)) return launch(std::integral_constant<int, kVec>());
  if constexpr (sizeof(T) == 2) {
    if (fits(8)) return launch(std::integral_constant<int, kVec / 2>());
  }
  launch(std::integral_constant<int, 1>());
}

// Rows of 64 bytes in the inner tiles (launch.h's WideRows, where the measures are). Forward:
// 16-bit inputs wherever they leave enough tiles but with 16-byte packs (never); 32- and 64-bit
// scalar loads where they hold or neither width does; float32 16-byte packs where they hold;
// float64 16-byte packs never. Backward: wherever they leave enough tiles, but with 8-byte packs
// where they hold or neither width does.
template <typename In, int kVec>
constexpr WideRows kForwardWideRows = sizeof(In) == 2 ? (kVec == kMaxVec<In> ? WideRows::kNever : WideRows::kAlways)
                                      : kVec == 1     ? WideRows::kHeldFirst
                                      : sizeof(In) == 4 ? WideRows::kWhereHeld
                                                        : WideRows::kNever;
template <typename T, int kVec>
constexpr WideRows kBackwardWideRows = kVec == kMaxVec<T> || kVec == 1 ? WideRows::kAlways : WideRows::kHeldFirst;

// Split inner plan (row_norm.cuh's split inner-dim kernels): blocks of kInnerSplitThreads,
// blockDim.x packs across the columns (the inner packs rounded up to a power of two, at most
// REDUCE_OPS_INNER_SPLIT_TX, default kInnerSplitTx), the rest rows of threads; the cols cut into
// segments of whole rounds (4 rows a thread, REDUCE_OPS_INNER_SPLIT_ROUNDS of them at least),
// as many as one wave of `resident` blocks takes (small shapes: a round each, so tests see many
// segments). None where the folds need more counters than zeroed_counters holds. H100 forward,
// us at 8 / 16 / 32 / 64 packs across (h100_study/session30_inner_split.txt):
// float32 (16384, 256) over dim 0 30.1 / 30.5 / 35.7 / 37.1, bfloat16 (4096, 1024) 29.9 / 28.7 /
// 38.9 / 34.4, (8192, 4096) 96.9 / 95.8 / 100.7 / 100.2, (65536, 64) 35.2 / 35.9 / 34.7 / 36.4;
// two or four rounds a thread at least (fewer, longer segments) were as fast or slower.
constexpr int kInnerSplitTx = 16;

struct InnerSplitPlan {
  ColsArgs a;
  dim3 block;
};

inline std::optional<InnerSplitPlan> inner_split_plan(const InnerGeometry& g, int vec, int64_t resident) {
  const int64_t packs = ceil_div(g.inner, vec), widest = env_positive("REDUCE_OPS_INNER_SPLIT_TX", kInnerSplitTx);
  int bx = 1;
  while (bx < widest && bx < packs && bx < kInnerSplitThreads) bx *= 2;
  const int by = kInnerSplitThreads / bx;
  ColsArgs a{g.outer, g.cols, g.inner, g.cols * g.inner, g.inner, 1, 1, g.cols, 1, ceil_div(packs, bx), 1};
  const int64_t round = int64_t{by} * kColsRound;
  const int64_t least = round * env_positive("REDUCE_OPS_INNER_SPLIT_ROUNDS", 1);
  const int64_t splits = std::max<int64_t>(1, std::min(resident / (g.outer * a.tiles), ceil_div(g.cols, least)));
  a.chunk = ceil_div(ceil_div(g.cols, splits), round) * round;
  a.splits = ceil_div(g.cols, a.chunk);
  set_fold_groups(a, by);
  if (a.splits > 1 && cols_fold(a).counters > kMaxCounters) return std::nullopt;
  return InnerSplitPlan{a, dim3(bx, by)};
}

// Runs policy p (kV columns a thread) on the split inner-dim kernels; false where there is no
// plan (the caller takes the tiles).
template <int kV, typename P>
bool launch_inner_split(const P& p, const InnerGeometry& g, const at::Tensor& like, cudaStream_t stream) {
  using Stat = typename P::Stat;
  using Factor = typename P::Factor;
  const auto fold = inner_split_fold_kernel<P, kV>;
  const auto apply = inner_split_apply_kernel<P, kV>;
  const size_t smem = kInnerSplitThreads * kV * sizeof(Stat);
  const int64_t resident = sm_count() * resident_blocks(fold, kInnerSplitThreads, smem);
  const std::optional<InnerSplitPlan> plan = inner_split_plan(g, kV, resident);
  if (!plan) return false;
  const ColsArgs& a = plan->a;
  const ColsFold need = cols_fold(a);
  const int64_t columns = g.outer * g.inner;
  // One buffer: the folds' partials (16-byte aligned runs), then the factors.
  const int64_t partial_bytes = a.splits > 1 ? ceil_div(need.partial_rows * columns * sizeof(Stat), 16) * 16 : 0;
  at::Tensor scratch_t = at::empty({partial_bytes + columns * static_cast<int64_t>(sizeof(Factor))},
                                   like.options().dtype(at::kByte));
  auto* bytes = static_cast<unsigned char*>(scratch_t.mutable_data_ptr());
  ColsScratch<Stat> scratch{reinterpret_cast<Stat*>(bytes), nullptr};
  at::Tensor graph_owned;
  if (a.splits > 1) scratch.counters = zeroed_counters(need.counters, like, stream, graph_owned);
  auto* factors = reinterpret_cast<Factor*>(bytes + partial_bytes);
  const int64_t grid = grid_for(a.splits * a.outer * a.tiles);
  fold<<<grid, plan->block, smem, stream>>>(p, a, scratch, factors);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  apply<<<grid, plan->block, 0, stream>>>(p, a, factors);
  return true;
}

// Whether softmax (kBackward: its backward) over a middle dim takes the split kernels rather
// than the tiles (REDUCE_OPS_STRATEGY=split or =tiles forces either), by the tiles at the
// narrowest width (32 bytes a row): split where they are at most a quarter of the SMs; the
// forward also where a plain block cannot hold a tile's cols in registers (`hold` packs a
// thread, kInnerThreads threads), the tiles are at most 4 per SM and the input kInnerSplitBytes
// or more. Below that the split's floor (two launches, 23-30 us for 16-32 MB of traffic) loses to
// the tiles' clusters; rechecked after the fold launch's online combine lost its branches (fold
// 25.7 -> 15.2 us), the rule picked the slower only for bfloat16 (2048, 8192) over dim 0 (held
// tiles 64.8 us, split 49.5: session32_split_fold.txt, section 4), and since the tiles' warp
// combine and two blocks an SM it no longer does (42.5 us: session33_combine_warps.txt).
// H100, us tiles -> split (h100_study/session30_inner_split.txt): forward float32 over dim 0
// (65536, 64) 49.6 -> 31.6, (16384, 256) 43.5 -> 31.7 (32 tiles), (4096, 1024) 34.1 -> 28.6
// (128 tiles, 16 MB), (8192, 4096) 221 -> 154 (512 tiles), bfloat16
// (4, 8192, 512) over dim 1 82.0 -> 59.9; bfloat16 (4096, 1024) (64 tiles, 8 MB) stays: 22.3
// against 28.9. Backward float32 (65536, 64) 58.7 -> 41.5, bfloat16 (16384, 256) 31.1 -> 24.9,
// but float32 (4096, 1024) 36.1 against 40.2, (8192, 4096) 205 against 243 and (4, 8192, 512)
// 108 against 131.
constexpr int64_t kInnerSplitBytes = int64_t{16} << 20;

template <bool kBackward>
bool inner_split_wanted(const InnerGeometry& g, int vec, int element_bytes, int hold, const ForcedStrategy& forced) {
  if (forced.is("split")) return true;
  if (forced.is("tiles")) return false;
  const int64_t sms = sm_count();
  const int64_t tiles = g.outer * ceil_div(ceil_div(g.inner, vec), inner_narrowest(vec, element_bytes));
  if (tiles * 4 <= sms) return true;
  if (kBackward || tiles > 4 * sms) return false;
  return !inner_held(g, vec, element_bytes, hold, kInnerThreads) &&
         g.outer * g.cols * g.inner * element_bytes >= kInnerSplitBytes;
}

}  // namespace
}  // namespace cuda
}  // namespace reduce_ops
