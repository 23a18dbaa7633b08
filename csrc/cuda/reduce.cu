// Launch of the reductions: picks kernel, block, grid and split from the view and the device.
//
// Strategies (REDUCE_OPS_STRATEGY forces one where the shape allows, for tests and measurement):
//   few    a block per row, every pack loaded at once (few aligned rows of up to 1024 packs,
//          such as a small tensor reduced whole), and for split rows segments of one round
//          each (whole tensors up to 16 MB); automatic only: any forced strategy skips them
//   short  lanes per row, several rows in flight (short rows; the default for them: aligned rows
//          by 16-byte packs, others by 8-, 4- or 2-byte packs)
//   group  lanes per row, one row at a time   warp   a warp per row, medium rows
//   block  a block per row                    split  several blocks per row, one launch
// Columns (a reduction over an outer dim, chosen by layout):
//   few    a block reads the whole reduced dim (up to 2048 rows) at once, all blocks in one
//          wave (small inputs; automatic only, as the rows' few)
//   wave   one or two rounds of loads a thread, all blocks in one wave (small inputs)
//   stream many rounds a thread, the reduced dim split over up to one wave (split: at least 2)
//   (a split of wave or stream folds its segments' partials in the launch, or from 16 segments
//   by a second launch: launch_cols_plan)
//   groups columns that are not whole 16-byte packs: rows taken a few at a time, as whole packs,
//          then each column's partials folded (launch_cols_row_groups; automatic only, as few)
//   full   columns that are not whole packs, no row groups: a block as wide as the columns, one
//          element a thread (launch_cols_full_width; automatic only, as few)
//   packed columns that are not whole packs, as row groups in one column tile: a block as wide as
//          a group's packs, the groups folded in shared memory, the segments' partials by a second
//          launch, each thread loading 16 rows of packs a round (4 for small inputs whose row
//          groups would take three launches; launch_cols_packed; automatic only)
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>

#include "common/dispatch.h"
#include "cuda/launch.h"
#include "cuda/reduce.cuh"
#include "ops.h"

namespace reduce_ops {
namespace cuda {
namespace {

// Fewest reduced rows one column-split segment holds (the streaming plan's): where it sets the
// split, tall inputs of 16-64 MB, more segments keep more loads in flight. H200, us, 256 -> 128
// rows (h200_study/session81.txt, sections 9-10): modes interleaved, bfloat16 sums over dim 0
// 32768 x 512 15.20 -> 14.82 (256 blocks -> 512), 8192 x 2048 15.07 -> 14.78, float32 amax
// 16384 x 512 14.62 -> 14.40, the other 27 cases within 0.7% (the SMs set the split of 65536 x
// 1024 and 442368 x 128), 64 rows as 128, 512 up to 18% slower; builds in separate processes,
// 32768 x 512 16.26 -> 15.97 (amax 15.06 -> 14.85), 8192 x 2048 15.62 -> 15.49, 16384 x 1024
// 15.46 -> 15.62 (inside base's own spread, 15.36-15.55), 20 cases' geomean 1.000. Measured and
// rejected on the H200: combining a block's rows of partials a thread per column instead of kVec
// columns per thread of the first row made bfloat16 sums 7-16% slower (float32 and amax within
// noise or mixed).
constexpr int64_t kMinColsChunk = 128;
// Rows of a column-split segment come in multiples of this: one round (kColsRound rows in
// flight) for each of up to 16 rows of threads, so that no thread ends on a partial round.
constexpr int64_t kColsChunkRows = 16 * kColsRound;
// Blocks an SM the streaming column plan splits for, at most (launch_cols).
constexpr int64_t kColsStreamBlocksPerSM = 4;
// A split row's segments: at least kMinReduceChunkBytes each (one unrolled round of 16-byte
// loads for each of 256 threads), and no more than about kReduceSplitBlocks of them in all,
// since each block pays its start, its block fold and its arrival. H200, whole sums and
// amaxes (tune_cols.py, REDUCE_OPS_REDUCE_CHUNK): 2^24 bfloat16 16.5 -> 15.2 us (1053 -> 512
// blocks), float32 23.0 -> 22.4; 2^20 bfloat16 8.2 -> 7.8 (256 -> 128 blocks); fewer than
// 128 blocks lost (2^20 float32 in 64 blocks: 8.4 -> 9.3 us).
constexpr int64_t kMinReduceChunkBytes = 16384;
constexpr int64_t kReduceSplitBlocks = 512;

// The shortest segment, in elements of In, of split rows of `bytes` in all (the rows kernels' and
// the runs kernel's): REDUCE_OPS_REDUCE_CHUNK, else by the bounds above.
template <typename In>
int64_t min_split_chunk(int64_t bytes) {
  return env_positive("REDUCE_OPS_REDUCE_CHUNK",
                      std::max(kMinReduceChunkBytes, bytes / kReduceSplitBlocks) / static_cast<int64_t>(sizeof(In)));
}
}  // namespace

// Counters and slots captured CUDA graphs use: module memory, zero when the module loads, so that
// the graph needs no fill node (H200, 2^20-element sum in a graph: 6.9 -> 5.7 us); handed out to
// one capture and never reused by another, since each launch leaves its counters and slots zero for
// the next replay. Past a pool, a capture gets its own zeroed buffer (a fill node).
constexpr int64_t kGraphCounterPool = 1 << 16;
__device__ unsigned graph_counter_pool[kGraphCounterPool];
constexpr int64_t kGraphSlotPool = 1 << 16;  // 512 KB: 64 captures of a whole float32 sum of 2^24 (1024 slots)
__device__ Slot graph_slot_pool[kGraphSlotPool];

namespace {
// n words of type Word (counters or slots) for the split kernels' last-block folds, zero whenever
// a kernel starts. Outside graph capture one buffer of `per_stream` words per (device, stream)
// serves every launch for the life of the process: launches on one stream run in order and each
// fold resets its words before it ends (a launch that needs more takes a zeroed buffer of its own,
// which `owned` keeps). Under capture the graph gets words of its own from the module's `pool` of
// `pool_size` (the symbol's address): a buffer shared with eager launches could be in use by one
// on another stream while the graph replays. The launches one capture records on one stream run in
// order too, so they share a piece of the pool (taken anew where one needs more): a graph of many
// split reductions takes what the largest needs, not their sum.
template <typename Word>
Word* zeroed_words(int64_t n, int64_t per_stream, const void* pool_symbol, int64_t pool_size, const at::Tensor& like,
                   cudaStream_t stream, at::Tensor& owned) {
  static_assert(sizeof(Word) == 4 || sizeof(Word) == 8, "32- or 64-bit words");
  const auto opts = like.options().dtype(sizeof(Word) == 4 ? at::kInt : at::kLong);
  const auto own = [&] {
    owned = at::zeros({n}, opts);
    return static_cast<Word*>(owned.mutable_data_ptr());
  };
  static std::mutex mutex;
  // Per device: the pool's address there and how much of it is handed out. The address is asked
  // on the device's first call, eager ones included, so that captures (which usually follow an
  // eager warm-up) need no runtime query.
  static auto* pools = new std::map<int, std::pair<Word*, int64_t>>();  // never freed
  // Per (device, stream): the capture that last took a piece of the pool there, and the piece.
  struct Piece {
    unsigned long long capture;
    Word* words;
    int64_t n;
  };
  static auto* pieces = new std::map<std::pair<int, cudaStream_t>, Piece>();  // never freed
  const std::lock_guard<std::mutex> lock(mutex);
  auto& [pool, used] = (*pools)[like.get_device()];
  if (pool == nullptr) {
    void* address = nullptr;
    C10_CUDA_CHECK(cudaGetSymbolAddress(&address, pool_symbol));
    pool = static_cast<Word*>(address);
  }
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    cudaStreamCaptureStatus status;
    unsigned long long capture = 0;
    C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture));
    Piece& piece = (*pieces)[{like.get_device(), stream}];
    if (piece.words != nullptr && piece.capture == capture && n <= piece.n) return piece.words;
    if (used + n > pool_size) return own();
    used += n;
    piece = {capture, pool + (used - n), n};
    return piece.words;
  }
  if (n > per_stream) return own();
  // Never destroyed: freeing device memory at process exit can outlive the allocator.
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  at::Tensor& buffer = (*buffers)[{like.get_device(), stream}];
  if (!buffer.defined()) buffer = at::zeros({per_stream}, opts);  // on `stream`: ordered before use
  return static_cast<Word*>(buffer.mutable_data_ptr());
}
}  // namespace

unsigned* zeroed_counters(int64_t n, const at::Tensor& like, cudaStream_t stream, at::Tensor& graph_owned) {
  TORCH_INTERNAL_ASSERT(n <= kMaxCounters);
  return zeroed_words<unsigned>(n, kMaxCounters, reinterpret_cast<const void*>(&graph_counter_pool), kGraphCounterPool,
                                like, stream, graph_owned);
}

Slot* zeroed_slots(int64_t n, const at::Tensor& like, cudaStream_t stream, at::Tensor& owned) {
  return zeroed_words<Slot>(n, kMaxSlots, reinterpret_cast<const void*>(&graph_slot_pool), kGraphSlotPool, like,
                            stream, owned);
}

namespace {

// Every segment starts on a 16-byte boundary and holds whole packs: the lean load path.
template <typename In>
bool segments_aligned(const In* x, const RowsArgs& a) {
  constexpr int kVec = kMaxVec<In>;
  const int64_t seg_len = a.splits > 1 ? a.chunk : a.cols;
  return a.elem_stride == 1 && is_aligned(x, 16) && a.cols % kVec == 0 && seg_len % kVec == 0 &&
         a.outer_stride % kVec == 0 && (a.inner == 1 || a.inner_stride % kVec == 0);
}

// Whether the staged and tiny rows (`cols` values each, `out_bytes` of results in all) load as a
// stream (load_streaming): rows of at least kStreamMinCols values (reduce.cuh says what shorter
// ones lost) whose output fits in the L2. Past it, the output's dirty lines leave for DRAM during
// the kernel whatever the loads, and streaming loads lost: H200, us, plain -> streaming
// (h200_study/session87.txt, section 7): float64 16777216 x 5 (134 MB out) sum 189.41 -> 195.58,
// amax 189.34 -> 196.35; where the output fits (33.5 MB), bfloat16 16777216 x 5 sum 58.72 ->
// 56.42, float64 4194304 x 5 54.40 -> 52.93.
inline bool stream_rows(int64_t cols, int64_t out_bytes) {
  return cols >= kStreamMinCols && out_bytes <= props().l2CacheSize;
}

// Dense rows shorter than a pack, of a 16-byte aligned x (reduce_tiny_rows_kernel), kCols = cols
// (from 2: a reduced dim of 1 is no row, reduce_geometry drops it).
template <typename In, typename Out, typename R, int kCols = 2>
void launch_tiny_rows(const In* x, Out* out, const RowsArgs& a, const R& r, cudaStream_t stream) {
  if constexpr (kCols < kMaxVec<In>) {
    if (a.cols != kCols) return launch_tiny_rows<In, Out, R, kCols + 1>(x, out, a, r, stream);
    using Tree = typename TreeReducer<R>::type;
    const int64_t threads = ceil_div(a.rows, kMaxVec<In>);  // a thread a pack's worth of rows
    auto kernel = reduce_tiny_rows_kernel<In, Out, Tree, kCols, false>;
    if constexpr (kCols >= kStreamMinCols) {  // no streamed kernel for rows of 2-3
      if (stream_rows(kCols, a.rows * static_cast<int64_t>(sizeof(Out)))) {
        kernel = reduce_tiny_rows_kernel<In, Out, Tree, kCols, true>;
      }
    }
    kernel<<<ceil_div(threads, kBlock), kBlock, 0, stream>>>(x, out, a.rows, is_aligned(out, 16), Tree{});
  }
}

// fn(Int<kWidth>{}) for the lanes of the short rows' kernel: the fewest (1 to 32, a power of two)
// that give each of a row's `packs` packs a lane.
template <typename Fn>
void with_row_lanes(int64_t packs, const Fn& fn) {
  if (packs <= 1) return fn(Int<1>{});
  if (packs <= 2) return fn(Int<2>{});
  if (packs <= 4) return fn(Int<4>{});
  if (packs <= 8) return fn(Int<8>{});
  if (packs <= 16) return fn(Int<16>{});
  return fn(Int<32>{});
}

// Short rows (one segment per row, inner == 1, elements adjacent) that are not whole 16-byte packs,
// by length, start or stride: reduce_short_rows_kernel over packs of `bytes` (8, 4 or 2: the widest
// that divides all three), a lane a pack, 1 to 32 lanes a row (packs <= 32). A lane takes 4 rows
// as the aligned rows' kernel, or 4 x 16 / bytes (at most 16) where the rows fill every SM's
// blocks at that: as many bytes in flight as 16-byte packs. H200, us, 4 rows -> more (session84.txt,
// section 1): bfloat16 4194304 x 9 sum (2-byte packs, 16 rows) 88.3 -> 83.2, x 14 (4-byte, 16) 50.8
// -> 47.8, x 26 101.4 -> 94.5; float32 4194304 x 7 (4-byte, 16) 49.2 -> 43.8; in CUDA graphs the more
// rows lost where they left few blocks (4096 x 9 bfloat16 2.0 -> 3.1), hence the rule.
template <typename In, typename Out, typename R, int kVec = 1>
void launch_narrow_rows(const In* x, Out* out, const RowsArgs& a, int64_t bytes, const R& r, cudaStream_t stream) {
  if constexpr (kVec * sizeof(In) < 16) {
    if (kVec * static_cast<int64_t>(sizeof(In)) != bytes) {
      return launch_narrow_rows<In, Out, R, kVec * 2>(x, out, a, bytes, r, stream);
    }
    using Tree = typename TreeReducer<R>::type;
    constexpr int kMoreRows = std::min<int>(4 * kMaxVec<In> / kVec, 16);
    const int64_t packs = a.cols / kVec;
    auto launch = [&](auto width_tag) {
      constexpr int kWidth = decltype(width_tag)::value;
      constexpr int kGroups = kBlock / kWidth;
      if (a.rows >= int64_t{kMoreRows} * kGroups * sm_count() * kBlocksPerSM) {
        reduce_short_rows_kernel<In, Out, Tree, kWidth, kVec, kMoreRows>
            <<<ceil_div(a.rows, kMoreRows * kGroups), kBlock, 0, stream>>>(x, out, a, Tree{});
      } else {
        reduce_short_rows_kernel<In, Out, Tree, kWidth, kVec, kShortRows>
            <<<ceil_div(a.rows, kShortRows * kGroups), kBlock, 0, stream>>>(x, out, a, Tree{});
      }
    };
    with_row_lanes(packs, launch);
  }
}

// One work item per row.
template <typename In, typename Out, typename R>
void launch_rows_unsplit(const In* x, Out* out, RowsArgs a, const R& r, cudaStream_t stream,
                         const ForcedStrategy& forced) {
  a.aligned = segments_aligned(x, a);
  const int64_t packs = ceil_div(a.cols, a.elem_stride == 1 ? kMaxVec<In> : 1);
  // The reducer of the kernels that fold a row as one tree (a compensated sum adds plain there).
  using Tree = typename TreeReducer<R>::type;
  auto group = [&](auto width_tag, auto unroll_tag) {
    constexpr int kWidth = decltype(width_tag)::value, kUnroll = decltype(unroll_tag)::value;
    const int64_t grid = grid_for(ceil_div(a.rows, kBlock / kWidth));
    // Rows a lane reads in one round (at most kUnroll packs or elements, and the edges) are
    // folded as one pairwise tree with a few adds (depth <= 13 for 32 lanes of 8 16-bit packs),
    // so a compensated sum adds plain there, as the short aligned rows' kernel. Its Neumaier
    // steps cost 5-17% (H200, float32 sums, time of the kernel, us, compensated -> plain;
    // h200_study/session56_columns.txt, section 3): 65536 x 77 8.40 -> 6.93, 32768 x 197 9.23 ->
    // 7.70, 16384 x 1000 17.06 -> 16.13, 16384 x 1021 17.66 -> 16.51 (torch.compile 9.15, 7.79,
    // 15.90, 16.18), where issue 3 allows compensation 2%.
    if (packs <= kWidth * kUnroll) {
      reduce_rows_group_kernel<In, Out, Tree, kWidth, kUnroll><<<grid, kBlock, 0, stream>>>(x, out, a, Tree{});
    } else {
      reduce_rows_group_kernel<In, Out, R, kWidth, kUnroll><<<grid, kBlock, 0, stream>>>(x, out, a, r);
    }
  };
  // Short rows: lanes per row so that each lane reads at most 4 packs, all in flight at once.
  // Medium rows (under 32 packs a lane), when there are 8 rows an SM or more: a warp per row with 8
  // packs in flight a lane; a block per row pays two barriers a row and held one pack a thread
  // (H200, 65536 x 1024 float32 by block per row: 46% of copy). The bound was 32 rows an SM, never
  // measured. H200, sums, 32 -> 8 rows an SM, separate processes, CUDA graph / eager (bench.py's
  // timer), us (h200_study/session107.txt, call 8): float32 4096 x 1000 7.95 -> 5.86 / 10.83 ->
  // 8.64, 2048 x 768 4.75 -> 3.61 / 7.73 -> 6.45, 1100 x 1000 3.83 -> 3.18, 2048 x 4000 10.76 ->
  // 9.51, 2048 x 2000 6.10 -> 5.93; bfloat16 3000 x 1500 8.73 -> 5.02 / 11.68 -> 7.96, 2048 x 2000
  // 5.44 -> 4.43 (torch.compile in call 7: float32 4096 x 1000 5.64, bfloat16 2048 x 2000 4.72).
  // 1024 rows, forced (call 7): float32 1000 3.34 -> 3.14, left to the block. Since sessions
  // 108-109 aligned rows of up to 1024 packs take the few rows' kernel first (up to 64 rows an SM
  // to 256 packs, any count past that: one_round_rows, below), faster than either; the rule is left
  // to unaligned rows and those past that, where under 8 rows an SM it was not measured on the
  // aligned rows' side (bfloat16 1024 x 1500, block -> warp forced: sum 4.39 -> 3.39, amax 3.98 ->
  // 3.64; 512 x 1500 sum 3.22 -> 2.95, amax 3.13 -> 3.21; session108.txt, call 1). Rows of up
  // to 256 packs (one round of the warp's 8 packs a lane) take the warp from 2 rows an SM. H200,
  // CUDA graphs, us, block -> warp (REDUCE_OPS_STRATEGY=warp; h200_study/session109.txt, call 6):
  // float32 264 x 1001 sum 2.89 -> 2.47, amax 2.91 -> 2.46, 528 x 1001 3.18 -> 2.72, 1024 x 1001
  // 3.74 -> 3.25, amax 3.78 -> 3.25. Longer rows stay on the block under 8 an SM (float32 264 x
  // 2050 sum 3.09 against 3.29 by the warp, amax 3.10 against 3.93; 528 x 3001 4.20 against 4.46;
  // bfloat16 264 x 3001 3.23 against 3.67; bfloat16 1024 x 2050 sum 4.49 against 3.93 the exception,
  // its amax even). Fewer rows than 2 an SM not measured.
  const bool many_rows = a.rows >= (packs <= 8 * kWarpSize ? 2 : 8) * sm_count();
  // Rows shorter than a pack, dense (or one row): a thread a pack's worth of rows
  // (reduce_tiny_rows_kernel). H200, us, the group kernel's unaligned path -> this
  // (h200_study/session83.txt section 3; torch.compile): bfloat16 16777216 x 4 sum 661 -> 47
  // (52.7), 16777216 x 2 amax 612 -> 29.9 (35.5), x 7 680 -> 79.4 (80.9); float32 16777216 x 2
  // sum 434 -> 53.2 (51.3), x 3 amax 412 -> 68.4 (66.9); 4096 x 3 bfloat16 sum in a CUDA graph
  // 2.46 -> 1.95 (1.44).
  // Plain rows of adjacent elements, no strategy forced: the tiny, staged and narrow rows' domain.
  const bool plain = a.elem_stride == 1 && a.inner == 1 && !forced.any();
  const bool dense = plain && (a.outer_stride == a.cols || a.rows == 1) && is_aligned(x, 16);
  if (dense && a.cols >= 2 && a.cols < kMaxVec<In>) return launch_tiny_rows(x, out, a, r, stream);
  // Dense rows of up to 128 bytes that are not whole 16-byte packs, from a size set by the narrow
  // packs' width (REDUCE_OPS_STAGED_MIN, bytes; below): staged in shared memory by whole packs
  // (reduce_staged_rows_kernel), 12 KB a block. H200, us (h200_study/session84.txt, sections 2-4;
  // torch.compile from section 3): base (the group kernel's unaligned path; float32 rows of 5-15
  // values staged a row a thread, 256 rows a block) -> now: bfloat16 4194304 x 9 sum 190.1 -> 27.7
  // (60.4), x 14 186.0 -> 35.0 (35.0), x 20 171.0 -> 48.3 (46.1), x 31 amax 176.3 -> 65.6 (175.1);
  // float32 4194304 x 5 sum 43.9 -> 31.0 (30.9), x 10 amax 45.9 -> 45.2 (49.8); float64 4194304 x 5
  // sum 125.7 -> 54.4 (57.4). Blocks of 24 KB (2-5 rows a thread) were up to 21% slower than 12 KB
  // (bfloat16 x 9 sum 33.5 against 27.7). Rows of whole 8-byte words, staged against narrow packs:
  // float32 4194304 x 10 amax 45.2 against 50.5, bfloat16 x 20 48.5 against 53.2, float64 x 5 54.7
  // against 62.5; bfloat16 x 12 1-3% slower (sum 30.8 against 30.3).
  const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(In));
  // The widest pack that divides the row's bytes, its start and its stride (none for one row), at
  // most 16 bytes: under 16, the width of the narrow packs that rows not whole 16-byte packs take
  // (launch_narrow_rows, below), or would take where they are staged.
  const int64_t narrow_bytes =
      widest_pack_bytes({static_cast<uint64_t>(row_bytes), reinterpret_cast<uintptr_t>(x),
                         a.rows == 1 ? 0 : static_cast<uint64_t>(a.outer_stride) * sizeof(In)});
  // Where staging starts, by the width of the narrow packs these rows would take instead (2, 4 or 8
  // bytes here). 2 or 4 bytes: from 32 KB of rows up to 64 bytes, and at any size past 64 bytes,
  // where the alternative is the group kernel's unaligned path, not the narrow packs. H200, sums
  // in CUDA graphs, us, narrow (or group) -> staged (h200_study/session88.txt, sections 2-4):
  // float32 x 5 1 row 1.60 -> 1.77, 16 rows 1.66 -> 1.71, 1024 rows (20 KB) 1.95 -> 1.92, 2048
  // 1.99 -> 1.96, 30000 (600 KB) 2.27 -> 2.10 (torch.compile 2.07); x 9 28000 2.33 -> 2.16;
  // bfloat16 x 9 1 row 1.60 -> 1.83, 1024 rows 1.96 -> 1.97, 24576 2.24 -> 2.09; x 10 and x 14 even
  // from 8192 rows to 1 MB (54000 x 10 2.22 -> 2.21); past 64 bytes, float32 x 31 1 row 1.97 ->
  // 1.96, 1024 rows 2.32 -> 2.10, bfloat16 x 63 1 row 2.03 -> 1.98, 1024 rows 2.48 -> 2.23. The
  // thresholds before (768 KB and 1 MB, session85.txt section 4) were set before the fold by words
  // (session 86) and the halved blocks (session 87). 8 bytes, from 4 MB: in graphs bfloat16 x 12
  // and float64 x 3 stay 0.02-0.06 us faster on the narrow packs up to 3 MB, float32 x 6 and
  // float64 x 5 staged 0.14-0.38 faster (session88.txt, section 3); by events (session85.txt,
  // with a 16-bit fold by words that was not kept) bfloat16 x 20, 131072 (5 MB) 6.27 against 5.89
  // narrow, 1048576 14.7 against 17.7.
  const int64_t staged_min = narrow_bytes == 8 ? int64_t{4} << 20 : row_bytes > 64 ? 0 : int64_t{32} << 10;
  if (dense && row_bytes % 16 != 0 && row_bytes <= 128 &&
      a.rows * row_bytes >= env_positive("REDUCE_OPS_STAGED_MIN", staged_min)) {
    // A block's rows: 256 x (12 KB / 256 / row bytes) up to 48 bytes a row, then 256 (at most 16 KB),
    // and 128 past 64 bytes (8-16 KB; their span is whole 16-byte packs). Blocks of 256 rows of
    // 65-128 bytes, 8 packs a thread, were slower, H200, us, 256 -> 128 rows (session86.txt,
    // section 6): float32 442368 x 30 sum 17.98 -> 16.26 (torch.compile 16.74 in section 7),
    // 4194304 x 17 73.06 -> 71.36; bfloat16 4194304 x 33 76.86 -> 68.45, x 63 127.46 -> 125.10;
    // float64 1048576 x 13 30.27 -> 29.66; float32 49152 x 30 in a CUDA graph 4.07 -> 3.47. 128 rows
    // of 49-64 bytes were slower (bfloat16 x 25 53.57 -> 56.13, float32 x 13 56.14 -> 57.02).
    // Rows of up to 24 bytes (512 a block) take 256 a block, a row a thread, while those blocks fit
    // in one wave of kBlocksPerSM an SM (the kernel's 32 registers and at most 16 KB let 8 in).
    // H200, us, 512 -> 256 rows (h200_study/session88.txt, sections 2 and 5): in CUDA graphs bfloat16
    // 262144 x 9 3.52 -> 3.26, 131072 x 9 2.74 -> 2.60, 262144 x 12 3.78 -> 3.54 (torch.compile 3.52),
    // float32 262144 x 5 3.49 -> 3.39; by events bfloat16 262144 x 9 6.24 -> 6.02; past one wave
    // 256 lost (bfloat16 393216 x 9 4.12 -> 4.21 in graphs, 786432 x 9 by events 8.38 -> 8.86).
    // Blocks fewer than the SMs are halved, down to 128 rows, so that more SMs share a small input.
    // H200, CUDA graphs, us, whole blocks -> halved (session87.txt, section 9; torch.compile):
    // bfloat16 65536 x 9 sum 2.40 -> 2.22 (6.30), 49152 x 9 2.32 -> 2.17 (2.94); float32 32768 x 9
    // 2.22 -> 2.18 (2.28); float64 32768 x 3 2.38 -> 2.32; the inputs whose blocks cover the SMs
    // unchanged (bfloat16 131072 x 9 2.73 -> 2.74). (By events, 4194304 x 9 bfloat16, 128 rows a block
    // lost: 23.62 -> 37.92 us, session87.txt section 2.)
    constexpr int64_t kSpan = 12288;  // bytes a block, about
    int block_rows =
        row_bytes > 64 ? kBlock / 2 : kBlock * static_cast<int>(std::max<int64_t>(1, kSpan / (kBlock * row_bytes)));
    if (block_rows > kBlock && ceil_div(a.rows, int64_t{kBlock}) <= sm_count() * kBlocksPerSM) block_rows = kBlock;
    while (block_rows > kBlock / 2 && ceil_div(a.rows, int64_t{block_rows}) < sm_count()) block_rows /= 2;
    const size_t smem = static_cast<size_t>(block_rows) * row_bytes;  // at most 16 KB: 4 packs a thread
    TORCH_INTERNAL_ASSERT(smem <= size_t{kStagedPacks} * kBlock * sizeof(uint4), "staged span past a block's loads");
    const bool streamed = stream_rows(a.cols, a.rows * static_cast<int64_t>(sizeof(Out)));
    auto kernel = streamed ? reduce_staged_rows_kernel<In, Out, Tree, false, true>
                           : reduce_staged_rows_kernel<In, Out, Tree, false, false>;
    // Rows of whole 8-byte words (16- and 32-bit values) are read by 8-byte words. H200, us, by
    // 32-bit words -> 8-byte (h200_study/session86.txt, section 1): float32 4194304 x 10 sum 47.20
    // -> 44.61, amax 47.42 -> 45.15; bfloat16 x 12 amax 28.61 -> 28.16, x 20 sum 43.78 -> 43.50.
    if constexpr (sizeof(In) < 8) {
      if (row_bytes % 8 == 0) {
        kernel = streamed ? reduce_staged_rows_kernel<In, Out, Tree, true, true>
                          : reduce_staged_rows_kernel<In, Out, Tree, true, false>;
      }
    }
    kernel<<<ceil_div(a.rows, block_rows), kBlock, smem, stream>>>(x, out, a.rows, static_cast<int>(a.cols),
                                                                   block_rows, Tree{});
    return;
  }
  // Other short rows that are not whole 16-byte packs (by length, start or stride), of up to 64
  // bytes, or 128 of 8-byte packs: the short rows' kernel over narrower packs (launch_narrow_rows).
  // H200, us, the group kernel's unaligned path -> this, timed on dense rows before they were
  // staged (session84.txt, section 1; torch.compile): bfloat16 4194304 x 12 amax 157.6 -> 29.8
  // (34.5), sum 170.7 -> 30.2 (28.3), float64 4194304 x 3 sum 123.6 -> 38.6 (36.0); in CUDA graphs
  // (section 3), 4096 x 9 bfloat16 sum 2.89 -> 1.96 (2.64). Past those lengths the group kernel
  // was faster (bfloat16 442368 x 50, 4-byte packs: amax 25.1 against 23.3; float32 442368 x 50,
  // 8-byte: 26.5 against 24.9).
  if (plain && !a.aligned && narrow_bytes < 16 && (row_bytes <= 64 || (narrow_bytes == 8 && row_bytes <= 128))) {
    return launch_narrow_rows(x, out, a, narrow_bytes, r, stream);
  }
  // Few short aligned rows (up to 2, 16 or 64 an SM by their length: below): a block each
  // (reduce_few_rows_kernel), every pack loaded at once: one warp of up to 8 packs a lane up to
  // 256 packs, then 4 or 8 warps of 4 packs a lane up to 1024. H100, CUDA graph, us, the kernels
  // chosen before -> these (h100_study/session42_small_rows.txt): float32 1024-element sum 1.91
  // -> 1.73, amax 1.84 -> 1.57; bfloat16 1024 sum 1.77 -> 1.54, into float32 2.02 -> 1.59; 256 x
  // 1024 float32 sum over dim -1 2.40 -> 1.98, bfloat16 amax 2.07 -> 1.86; faster in every case
  // measured (1 to 264 rows of 8 to 2048 elements). 64 x 4096 over dim -1, against the block
  // kernel (h100_study/session43_small.txt): float32 sum 2.32 -> 2.13 with 8 warps of 4 packs (4
  // warps of 8 packs took 2.72 in the bisect), amax 2.22 -> 1.85; bfloat16 sum 2.15 -> 1.86 with
  // 4 warps. Their rows are read in one round, so a compensated sum adds plain there
  // (TreeReducer): one pairwise tree, as the group and block kernels' one-round rows. H200, CUDA
  // graph, float32 sums, us, compensated -> plain (h200_study/session82.txt, section 1): 1024
  // whole 1.85 -> 1.77 (torch 2.44), 4096 whole 1.98 -> 1.93, 64 x 4096 over dim -1 2.24 -> 2.16,
  // 256 x 1024 2.16 -> 2.08.
  // The bound on rows was 2 an SM, measured on one side only. Past it, H200, CUDA graphs, sums, us,
  // the kernels chosen before (a block a row, the warp from 8 rows an SM, 16- and 32-lane groups)
  // -> this (a timing-only knob; h200_study/session108.txt, calls 4 and 5): float32 528 x 1000 2.85
  // -> 2.46, 1024 x 1000 3.34 -> 2.96, 8192 x 1000 9.52 -> 9.35, 528 x 4096 4.35 -> 3.97, 4096 x
  // 4096 17.35 -> 16.91, 528 x 512 2.39 -> 2.10; bfloat16 1024 x 2048 3.52 -> 3.06, 8192 x 2048
  // 9.89 -> 9.60, 4096 x 8192 17.68 -> 16.98, 1024 x 1024 2.71 -> 2.49, 1024 x 512 2.39 -> 2.23,
  // 2048 x 512 2.75 -> 2.71 (amaxes alike). Rows of up to 128 packs lost from 4096 rows (float32
  // 4096 x 512 4.22 -> 4.28, 8192 x 256 4.29 -> 6.46; bfloat16 4096 x 512 3.30 -> 3.95): one-warp
  // blocks a row, likely bound by the rate at which the SMs take up blocks (not profiled). So: up
  // to 32 packs 2 rows an SM, up to 128 packs 16, up to 256 packs 64, past that (blocks of 4 or 8
  // warps) any count. Past those bounds, H200, CUDA graphs, sums, us, the kernels chosen before
  // (the warp, or the block's one round where block_round holds; a block a row past 1023 packs) ->
  // this (h200_study/session109.txt, calls 1-3): float32 rows of 257-1024 packs 65536 x 1536 91.95
  // -> 91.20, 131072 x 1100 131.55 -> 129.48, 40000 x 1300 49.24 -> 48.50, 12000 x 3000 34.26 ->
  // 33.91, 16384 x 4096 60.62 -> 60.25; bfloat16 32768 x 3000 48.41 -> 46.07, 12000 x 3000 20.34 ->
  // 18.60, 16384 x 4096 32.78 -> 31.46, 131072 x 4096 242.29 -> 237.18, 16384 x 8192 61.02 ->
  // 60.16; even at bfloat16 16384 x 6000 (45.76 -> 45.78, amax 45.70 -> 45.91). One-warp rows past
  // 64 an SM were mixed (float32 16896 x 1000 17.44 -> 17.23, 20000 x 1024 20.62 -> 20.36, but
  // 16896 x 600 11.38 -> 12.34, 67584 x 600 38.59 -> 43.32), and rows of up to 128 packs lost past
  // 16 an SM (bfloat16 12000 x 800 7.04 -> 9.10; float32 3168 x 256 3.05 -> 3.38; 2640 x 512 the
  // exception, 3.53 -> 3.39), as did rows of up to 32 packs past 2 an SM, but for float32 rows of
  // 32 packs up to 8 an SM (1056 x 128 2.08 -> 2.02; 2112 x 128 2.16 -> 2.67).
  const int64_t one_round_rows_bound = packs <= kWarpSize       ? 2 * sm_count()
                                       : packs <= 4 * kWarpSize ? 16 * sm_count()
                                       : packs <= 8 * kWarpSize ? 64 * sm_count()
                                                                : kMaxGridBlocks;
  const bool one_round_rows =
      a.aligned && a.inner == 1 && packs <= 32 * kWarpSize && a.rows <= one_round_rows_bound;
  if (one_round_rows && !forced.any()) {
    auto launch = [&](auto warps_tag, auto packs_tag) {
      constexpr int kWarps = decltype(warps_tag)::value, kPacks = decltype(packs_tag)::value;
      reduce_few_rows_kernel<In, Out, Tree, kWarps, kPacks>
          <<<a.rows, kWarps * kWarpSize, 0, stream>>>(x, out, a.outer_stride, static_cast<int>(packs), Tree{});
    };
    if (packs <= kWarpSize) return launch(Int<1>{}, Int<1>{});
    if (packs <= 2 * kWarpSize) return launch(Int<1>{}, Int<2>{});
    if (packs <= 4 * kWarpSize) return launch(Int<1>{}, Int<4>{});
    if (packs <= 8 * kWarpSize) return launch(Int<1>{}, Int<8>{});
    if (packs <= 16 * kWarpSize) return launch(Int<4>{}, Int<4>{});
    return launch(Int<8>{}, Int<4>{});
  }
  if (a.aligned && a.inner == 1 && packs <= 32 && !forced.is("block") && !forced.is("group")) {
    // Short aligned rows: a pack per lane per row, 4 rows in flight per lane (kShortRows), 1 to 32
    // lanes a row. H200, 442368 x 128: 8 rows for 32-lane groups took float32 amax from 85% to
    // 68% of copy and left bfloat16 at 71%. Session 83 (h200_study/session83.txt), us, CUDA
    // graphs for the small ones: groups of 4 lanes at 4 rows a lane, not 8 (section 1): bfloat16
    // amax 1024 x 32 2.40 -> 2.00, float32 sum 8192 x 16 2.85 -> 2.13, 4194304 x 16 float32 amax
    // 78.2 -> 69.6. The block's groups taking its rows in turn, so each load reads consecutive
    // rows (section 2): bfloat16 2097152 x 32 sum 39.4 -> 35.4 (torch.compile 35.9), amax 38.9 ->
    // 35.5 (37.9); 4194304 x 16 sum 43.8 -> 37.1; float32 8388608 x 8 amax 87.7 -> 77.9 (77.6).
    // Rows of 1 and 2 packs on 1 and 2 lanes, where groups of 4 left lanes idle: bfloat16 8388608 x
    // 8 sum 68.2 -> 44.1 (44.8), amax 56.2 -> 44.1 (44.9); float32 16777216 x 4 amax 101.3 ->
    // 84.3 (84.3); bfloat16 4194304 x 16 sum 37.1 -> 35.7 (35.7).
    // The kernel folds a row as one tree: a compensated sum's kernel was the plain one's, SASS for
    // SASS, so the plain sum's serves both (TreeReducer), as for the narrow packs.
    auto rows = [&](auto width_tag) {
      constexpr int kWidth = decltype(width_tag)::value;
      reduce_short_rows_kernel<In, Out, Tree, kWidth>
          <<<ceil_div(a.rows, kShortRows * (kBlock / kWidth)), kBlock, 0, stream>>>(x, out, a, Tree{});
    };
    return with_row_lanes(packs, rows);
  }
  if (!forced.is("block")) {
    if (packs <= 16) return group(Int<4>{}, Int<4>{});
    if (packs <= 32) return group(Int<8>{}, Int<4>{});
    if (packs <= 64) return group(Int<16>{}, Int<4>{});
    if (packs <= 128) return group(Int<32>{}, Int<4>{});
    // Past that, the warp only while a block's threads would get under 4 packs each (one round of
    // the block kernel's 4 in flight). H200, 16384 x 4096 float32 (1024 packs), block vs warp: amax
    // 101% vs 95% of copy, sum 99% vs 99%; the warp kernel's 8 loads a lane are interleaved with
    // their maxes by ptxas (3 or 4 in flight). bfloat16 at 4096 (512 packs, 2 a thread): block
    // 61-70%, warp 87-89%. The block now loads a thread's 2-4 packs as one round and folds them as
    // a plain tree: aligned rows of 512-1023 float32 packs (2048-4092 values) or 576-1023 16-bit
    // packs (block_round) take it, unless the threads with a 4th pack end inside a warp: a measured
    // rule, its cause unknown (that warp's two trips, the 4-pack lanes' round and then the others',
    // are not it: a round taken a warp at a time lost more, session80.txt section 9). H200, us,
    // warp -> block (torch.compile; h200_study/session79.txt section 6, session80.txt sections
    // 1-3): float32 sums 32768 x 2048 65.18 -> 63.17 (62.40), 16384 x 2080 36.18 -> 34.51 (39.97),
    // 16384 x 3200 (800 packs) 51.68 -> 50.24 (49.98), 16384 x 3968 62.05 -> 61.26 (60.35);
    // bfloat16 16384 x 4608 40.14 -> 37.81 (43.84), 16384 x 6400 53.54 -> 50.40 (51.04). Split
    // warps lose: float32 16384 x 3300 (825 packs) 53.18 -> 56.32, 16384 x 4000 62.53 -> 63.90,
    // bfloat16 16384 x 8000 63.42 -> 69.20; so do 16-bit rows of 512-513 packs (bfloat16 16384 x
    // 4096 35.39 -> 35.79) and unaligned rows (float32 16384 x 2050 34.40 -> 36.51, bfloat16 16384
    // x 6501 55.90 -> 63.04). Since session 109 the few rows' kernel takes every aligned plain row
    // of up to 1024 packs past 256 first (one_round_rows, above, faster still); block_round is left
    // to aligned rows of two kept dims that do not merge (a.inner > 1: the last dim of (R, 2, C)
    // sliced from (R, 3, C)).
    const int64_t fourth_packs = packs - 3 * kRowsBlockThreads;  // threads with a 4th pack, if > 0
    const bool block_round = a.aligned && (kMaxVec<In> == 4 || kMaxVec<In> == 8) &&
                             packs >= 2 * kRowsBlockThreads + (kMaxVec<In> == 8 ? 2 * kWarpSize : 0) &&
                             (fourth_packs <= 0 || fourth_packs % kWarpSize == 0);
    if ((packs < 4 * kRowsBlockThreads && many_rows && !block_round) || forced.is("warp")) {
      return group(Int<32>{}, Int<8>{});
    }
  }
  // One block per row (grid.x's limit past 2^31 - 1 rows), as the row_norm block kernels
  // (softmax_launch.h's row_kernel_grid): H200, against grid_for's 4 waves of blocks looping over ~4
  // rows each, 16384 x 4096 float32 sum 64.7-64.9 -> 64.2-64.4 us, amax 63.8-64.0 -> 63.1-63.3,
  // 16384 x 8192 bfloat16 sum 64.6 -> 64.0; 4096 x 32768, 8192 x 8192 and 2048 x 65536 even
  // (h200_study/session21_reduce_rows.txt). Blocks of 512 threads lost up to 20% (the compensated
  // float32 sum at 16384 x 4096), of 128 threads 10-30%. Longer rows gain from 512: aligned rows
  // of 3072 packs or more (6 a thread of 512; 12288 float32, 24576 16-bit values) take them.
  // H200, us, 256 -> 512 threads (torch.compile; session80.txt sections 2-3): float32 sums 4096 x
  // 32768 122.85 -> 121.79 (120.85), 4096 x 24576 93.86 -> 92.99 (92.00), 8192 x 14336 107.39 ->
  // 106.94 (105.98); bfloat16 sums 4096 x 32000 62.75 -> 62.40 (61.57), 4096 x 32768 64.26 ->
  // 64.00 (62.75); shorter rows lose (bfloat16 4096 x 16384, 2048 packs: 34.64 -> 34.88; 16384 x
  // 8192 63.68 -> 69.31, 2 packs a thread).
  const bool wide_block = a.aligned && packs >= 6 * kRowsWideBlockThreads;
  const auto block = [&](const auto& reducer) {
    using Red = std::decay_t<decltype(reducer)>;
    const int64_t grid = std::min(a.rows, kMaxGridBlocks);
    if (wide_block) {
      reduce_rows_block_kernel<In, Out, Red, 4, kRowsWideBlockThreads>
          <<<grid, kRowsWideBlockThreads, 0, stream>>>(x, out, a, reducer);
    } else {
      reduce_rows_block_kernel<In, Out, Red, 4><<<grid, kRowsBlockThreads, 0, stream>>>(x, out, a, reducer);
    }
  };
  // Contiguous rows the threads read in one round (up to 4 packs a thread: 4096 float32 values)
  // are one pairwise tree, summed plain as the group kernels' (depth <= ceil(log2 cols) + 4).
  // H200, float32 16384 x 4096 sum, us (session79.txt, section 2): compensated 63.87 -> plain
  // 63.20 (torch.compile 62.18).
  if (a.elem_stride == 1 && a.cols <= 4 * kRowsBlockThreads * kMaxVec<In>) return block(typename TreeReducer<R>::type{});
  block(r);
}

// Rows: few long rows (and whole-tensor reductions, one row) are split over blocks in one
// launch; otherwise a work item per row.
template <typename In, typename Out, typename R>
void launch_rows(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                 cudaStream_t stream, const ForcedStrategy& forced) {
  using Acc = typename R::Acc;
  const In* x = xt.const_data_ptr<In>();
  Out* out = out_t.mutable_data_ptr<Out>();
  RowsArgs a{g.outer * g.inner, g.reduced, g.inner, g.outer_stride, g.inner_stride, g.reduced_stride, 1, g.reduced,
             false};
  const bool few_rows = a.rows < sm_count() * kBlocksPerSM;
  // Only where a split can follow: the knob's getenv is ~0.1 us of a launch.
  const int64_t bytes = a.rows * a.cols * static_cast<int64_t>(sizeof(In));
  const int64_t min_chunk = few_rows ? min_split_chunk<In>(bytes) : 0;
  // Rows long enough to split (at least two segments: 256 rows or fewer) are split where a block a
  // row would leave half the SMs idle, or some idle on 32 MB or more, or where the rows are 2 MB or
  // longer (a block a row keeps too few loads in flight). Elsewhere a block a row was faster. H200,
  // float32 sums, us, split -> a block a row (REDUCE_OPS_REDUCE_CHUNK; h200_study/session108.txt,
  // calls 2-5), CUDA graphs: 128 x 8192 3.87 -> 3.72, 128 x 32768 (16 MB) 10.24 -> 9.50 by events,
  // 132 x 32768 6.91 -> 6.70, 192 x 16384 5.66 -> 5.56 (amax 6.43 -> 5.35), 256 x 65536 19.18 ->
  // 17.74; bfloat16 192 x 32768 6.59 -> 5.51; 96 rows mixed (float32 96 x 32768 sum 5.69 -> 5.89,
  // amax 6.24 -> 5.79; bfloat16 96 x 65536 6.44 -> 5.90); events, 256 x 262144 (1 MB rows) 65.95
  // -> 64.50, 132 x 131072 22.29 -> 21.41. The split stayed ahead on 64 rows or fewer (32 x 65536
  // 4.75 against 6.89, 64 x 32768 4.74 against 5.15; 64 x 8192 3.33 against 3.27 the exception),
  // under 132 rows from 40 MB (80 x 131072 16.13 against 16.64, 96 x 262144 29.18 against 30.21;
  // 128 x 262144 36.45 against 36.26 the exception) and on rows of 2 MB or more (128 x 524288 65.60
  // against 66.50, 128 x 1048576 124.32 against 128.78, 200 x 1048576 191.71 against 192.06).
  const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(In));
  const bool split_pays = 2 * a.rows <= sm_count() || (a.rows < sm_count() && bytes >= (int64_t{32} << 20)) ||
                          row_bytes >= (int64_t{2} << 20);
  if (few_rows && a.cols >= 2 * min_chunk && split_pays) {
    const RowSplit plan = split_rows(a.rows, a.cols, min_chunk);
    a.splits = plan.splits;
    a.chunk = plan.chunk;
  } else if (forced.is("split") && a.rows <= kMaxCounters) {
    // Smallest segments (one pack-aligned 64-element chunk), so that small test shapes split.
    a.chunk = 64;
    a.splits = ceil_div(a.cols, a.chunk);
  }
  if (a.splits == 1) {
    launch_rows_unsplit(x, out, a, r, stream, forced);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // Split plain aligned rows of segments one round of loads covers (up to 16 MB whole):
  // reduce_split_few_kernel, segments of 256 threads x kPacks packs, 8 where that still makes
  // 128 blocks, else 4. H100, CUDA graph, us (h100_study/session43_small.txt): the bisect's 2^20
  // float32 sum took 3.47 with 32 KB segments, 3.80 with 16 KB, its bfloat16 sum 3.11 with 16 KB
  // and 3.20 with 8 KB, 4 x 65536 float32 over dim -1 2.96 with 8-32 KB alike; against the
  // kernel chosen before, 2^14 to 2^20 elements whole and 2-16 long rows are 6-18% faster
  // (2^20 float32 sum 4.53 -> 3.77, bfloat16 3.83 -> 3.18); at 2^22 the float32 sum is even
  // (9.72 -> 9.79), its bfloat16 sum and float32 amax 8-9% faster.
  // Automatic only, as the few rows.
  constexpr int kVec = kMaxVec<In>;
  const int64_t packs = a.cols / kVec;
  const bool one_round = !forced.any() && a.inner == 1 && a.elem_stride == 1 && is_aligned(x, 16) &&
                         a.cols % kVec == 0 && a.outer_stride % kVec == 0 && a.chunk / kVec <= 8 * kRowsBlockThreads;
  const bool wide = one_round && a.rows * ceil_div(packs, 8 * kRowsBlockThreads) >= 128;
  if (one_round) a.splits = ceil_div(packs, (wide ? 8 : 4) * kRowsBlockThreads);
  at::Tensor slots_owned, graph_owned;
  Slot* slots = zeroed_slots(a.rows * a.splits * kSlotWords<Acc>, xt, stream, slots_owned);
  unsigned* counters = zeroed_counters(a.rows, xt, stream, graph_owned);
  if (one_round) {
    // Rows of more than kWarpFoldPartials partials are wide: a narrow launch has fewer than 128
    // wide segments, fewer than 256 narrow ones.
    const auto kernel = !wide                          ? reduce_split_few_kernel<In, Out, R, 4>
                        : a.splits > kWarpFoldPartials ? reduce_split_few_kernel<In, Out, R, 8, true>
                                                       : reduce_split_few_kernel<In, Out, R, 8>;
    kernel<<<a.rows * a.splits, kRowsBlockThreads, 0, stream>>>(x, out, a.outer_stride, packs,
                                                              static_cast<int>(a.splits), slots, counters, r);
  } else {
    a.aligned = segments_aligned(x, a);
    // 4 packs in flight a thread, 8 blocks an SM: 8 packs and 4 blocks (the runs kernel's choice)
    // measured even here, its sums as fast as its amaxes already (H200, events, us: 2^28 float32
    // sum 237.50 -> 236.94, 2^30 930.08 -> 927.90, bfloat16 2^24 14.40 -> 15.01; session90.txt, 6).
    reduce_rows_split_kernel<In, Out, R, 4><<<grid_for(a.rows * a.splits), kRowsBlockThreads, 0, stream>>>(
        x, out, a, slots, counters, r);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The bytes of x that a reduction over an outer dim reads (the column launchers' size bounds).
template <typename In>
int64_t cols_input_bytes(const ReduceGeometry& g) {
  return g.outer * g.reduced * g.inner * static_cast<int64_t>(sizeof(In));
}

// Columns: lanes across columns (kVec each), the rest of the block across the reduced dim.
struct ColsLaunch {
  int bx, by;  // block shape
};

// The streaming block shape: up to 8 rows of threads along the reduced dim, each reading at
// least 16 rows; then lanes across the columns for the rest of the block, then more rows of
// threads if the columns run out. A block 256 columns wide left 65536 x 1024 float32 over dim 0
// with 8 blocks and a split of 256 (H200: 43% of copy); 32 x 8 gave 79%. Lanes first (whole
// rows, one row of threads) lost 0.5-2% where the block counts matched, and more where the
// segments' 256-row minimum left fewer blocks (H100, h200_study/session46_cols.txt).
// `lanes` caps the lanes across the columns (stream_plan narrows them to fill the last wave),
// `thread_rows` the first rows of threads (kElementThreadRows for some element tiles, stream_plan).
ColsLaunch cols_launch(const ColsArgs& a, int vec, int64_t lanes = kBlock, int64_t thread_rows = 8) {
  ColsLaunch l{1, 1};
  while (l.by < thread_rows && static_cast<int64_t>(l.by) * 2 * 16 <= a.chunk) l.by *= 2;
  while (l.bx * l.by < kBlock && static_cast<int64_t>(l.bx) * vec < a.inner && l.bx * 2 <= lanes) l.bx *= 2;
  while (l.bx * l.by < kBlock && static_cast<int64_t>(l.by) * 2 * 16 <= a.chunk) l.by *= 2;
  return l;
}

// A column launch: its arguments and block shape.
struct ColsPlan {
  ColsArgs a;
  ColsLaunch l;
};

// The second launch of a split column reduction (fold_partial_words_kernel, a programmatic
// dependent of the first): `splits` rows of partials `width` apart, outer index o's `cols` columns
// at o * padded (whole 16-byte words), `items` words in all. A warp a word where one round of its 4
// loads a lane covers the segments (up to 128) and the words are at least 2 an SM, else a block of
// 256 threads a word (up to 1024 segments in one round; 4 blocks an SM make 528). H200, CUDA graph,
// us, a block a word -> a warp (h200_study/session56_columns.txt, sections 2 and 6): sums over dim
// 0, bfloat16 16384 x 4096 (33 segments, 1024 words) 36.17 -> 34.55, 4096 x 32768 (4 segments, 8192
// words) 74.16 -> 66.53; float32 16384 x 4096 68.65 -> 64.27; but packed columns of few words lost
// (float32 32768 x 197, 99 words: 8.16 -> 9.93; 16384 x 197 6.60 -> 8.36): 13 blocks of 8 warps
// against 99 blocks. `few_words_a_warp` (the small packed kernel's partials,
// launch_cols_packed_small) takes a warp a word also for up to kFoldFewWords words (a word holds 4
// floats; until session 123 2 compensated partials of a float32 sum, whose partials are finished
// floats now): one block of 256 threads against 1-3 blocks. H200, CUDA graph, us, a block a word ->
// a warp (h200_study/session121.txt): call 1, float32 sums 16384 x 3 (2 words) 3.90 -> 3.66, 40000
// x 3 (2) 3.99 -> 3.95, amaxes 40000 x 3 (1) 3.82 -> 3.63, 20000 x 7 (2) 3.92 -> 3.76, 24000 x 9
// (3) 4.04 -> 3.88, 50000 x 11 (3) even; bfloat16 131072 x 6 (2) sum 4.16 -> 4.00, amax 4.38 ->
// 4.19; 4-6 words even or 0.98-0.99x (float32 sums of 7, 9 and 11 columns), 8 slower (float32 amax
// 12000 x 29 4.19 -> 4.42; session 120, call 4: 1.03-1.05x slower at 15-25 words). Out of sample
// (call 3, the rule built): float32 30000 x 5 sum (3 words) 4.37 -> 4.05, amax (2) 3.96 -> 3.65;
// bfloat16 100000 x 3 (1) sum 4.33 -> 4.15, amax 4.34 -> 3.99.
constexpr int64_t kFoldFewWords = 3;

template <typename Out, typename R, typename PartialT>
void launch_fold_partial_words(const PartialT* partial, Out* out, int64_t splits, int64_t width, int cols,
                               int padded, int64_t items, const R& r, cudaStream_t stream,
                               bool few_words_a_warp = false) {
  constexpr int kThreads = 256;
  if (splits <= 4 * kWarpSize && (items >= 2 * sm_count() || (few_words_a_warp && items <= kFoldFewWords))) {
    launch_dependent(fold_partial_words_kernel<Out, R, kWarpSize, kThreads, PartialT>,
                     grid_for(ceil_div(items, int64_t{kThreads / kWarpSize})), dim3(kThreads), 0, stream, partial, out,
                     splits, width, cols, padded, items, r);
  } else {
    launch_dependent(fold_partial_words_kernel<Out, R, kThreads, kThreads, PartialT>, grid_for(items), dim3(kThreads), 0,
                     stream, partial, out, splits, width, cols, padded, items, r);
  }
}

// Split column launches of at least this many segments fold their partials by a second launch
// (launch_fold_partial_words) rather than by the last blocks to arrive, where the columns are
// whole 16-byte words of partials (REDUCE_OPS_COLS_FOLD_LAUNCH sets the bound). The in-launch
// fold is a chain of dependent steps after the last block's loads (publish, arrive, load the
// group's rows, fold, publish, arrive, load, fold, store), run by one block while the SMs idle;
// a second launch has its blocks resident already and folds every word at once. H200, sums
// over dim 0, 20 back to back in a CUDA graph, us a call, in-launch -> second launch from 16
// (h200_study/session56_columns.txt, section 4): bfloat16 442368 x 128 31.68 -> 29.75, 65536 x
// 1024 36.34 -> 34.77, 131072 x 256 22.51 -> 19.97, 8192 x 256 5.56 -> 4.79; float32 442368 x
// 128 57.20 -> 54.82, 65536 x 1024 65.49 -> 63.26, 32768 x 512 22.06 -> 20.30, full-width 8192
// x 76 5.62 -> 4.74; of 34 cases none slower by more than 0.16 us (bfloat16 4096 x 4096 8.34 ->
// 8.50). From 2 segments: float32 4096 x 32768 (2 segments) 122.6 -> 127.8, 2048 x 4096 8.36 ->
// 8.94 (bfloat16 7.03 -> 6.36); from 8 or 32 within 0.6 us of 16.
constexpr int64_t kFoldLaunchMinSplits = 16;

// Launches reduce_cols_kernel (`kernel`, kVec columns a thread) on `plan`: the block shape's row
// gap, and with splits > 1 the partials and the folds they need: zeroed counters for the
// in-launch folds, or the second launch.
template <typename In, typename Out, typename R, typename Kernel>
void launch_cols_plan(Kernel kernel, const at::Tensor& xt, const at::Tensor& out_t, ColsPlan plan, int vec,
                      const R& r, cudaStream_t stream) {
  using Acc = typename R::Acc;
  ColsArgs& a = plan.a;
  const ColsLaunch& l = plan.l;
  a.row_gap = l.by * a.reduced_stride;
  ColsScratch<Acc> scratch{nullptr, nullptr};
  at::Tensor partial, graph_owned;
  const int64_t columns = a.outer * a.inner;
  if (a.splits > 1) {
    constexpr int64_t kW = kPartialsPerWord<Acc>;
    a.fold_launch = columns % kW == 0 && columns <= INT32_MAX &&
                    a.splits >= env_positive("REDUCE_OPS_COLS_FOLD_LAUNCH", kFoldLaunchMinSplits);
    const ColsFold fold = cols_fold(a);
    const int64_t partial_rows = a.fold_launch ? a.splits : fold.partial_rows;
    scratch.partial = partials_scratch<Acc>(partial_rows * columns, xt.options(), partial);
    if (!a.fold_launch) scratch.counters = zeroed_counters(fold.counters, xt, stream, graph_owned);
  }
  const size_t smem = static_cast<size_t>(l.bx) * l.by * vec * sizeof(Acc);
  Out* out = out_t.mutable_data_ptr<Out>();
  kernel<<<grid_for(a.splits * a.outer * a.tiles), dim3(l.bx, l.by), smem, stream>>>(xt.const_data_ptr<In>(), out, a,
                                                                                   scratch, r);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (a.fold_launch) {
    const int c = static_cast<int>(columns);
    launch_fold_partial_words<Out>(static_cast<const Acc*>(scratch.partial), out, a.splits, columns, c, c,
                                   columns / kPartialsPerWord<Acc>, r, stream);
  }
}

// The reduced dim of a column launch of one tile a work item (launch_cols_full_width,
// launch_cols_packed) split in segments of whole rounds of `round_rows` rows over the SMs, up to
// `most` blocks an SM (REDUCE_OPS_COLS_BLOCKS_PER_SM overrides): sets a.chunk and a.splits.
template <typename Kernel>
void split_one_tile(Kernel kernel, ColsArgs& a, ColsLaunch l, size_t smem, int64_t round_rows, int64_t most) {
  const int64_t per_sm =
      env_positive("REDUCE_OPS_COLS_BLOCKS_PER_SM", std::min<int64_t>(resident_blocks(kernel, l.bx * l.by, smem), most));
  const int64_t rounds = ceil_div(a.reduced, round_rows);
  a.chunk = std::min(ceil_div(a.outer * rounds, sm_count() * per_sm) * round_rows, a.reduced);
  a.splits = ceil_div(a.reduced, a.chunk);
}

// Element tiles (vec 1: columns not whole 16-byte packs) take the wave plan only unsplit and in at
// most kElementWaveBlocksPerSM blocks an SM; elsewhere the streaming plan was faster (its 32-64
// lanes of 4-8 rows of threads reading many rounds). H200, CUDA graph, us, wave -> streaming
// (h200_study/session117.txt, call 1): split in 2-7 segments, float32 amax over dim 0 523 x 1002
// 7.04 -> 4.96, 1569 x 1002 8.61 -> 6.17, 349 x 3002 8.12 -> 5.62, bfloat16 130 x 1002 4.91 ->
// 3.83, 681 x 1538 7.39 -> 5.28, float32 sums (compensated) 681 x 1538 8.53 -> 5.77; unsplit in
// 438-876 blocks, 74 x 7001 6.41 -> 3.96, 37 x 7001 sum 5.18 -> 3.53, 157 x 5001 sum 6.23 ->
// 4.63. Unsplit in up to 219 blocks the wave plan won 33 of 38 cases, by up to 37% (127 x 514
// amax 2.86 against 3.91, 26 x 5001 2.96 against 3.74), and lost 5 by 2-6% (compensated float32
// sums of 188-219 blocks, 9 x 7001); at 376 (87 x 3002, 174 x 3002) the streaming plan took
// 0.83-1.12x its time. Split in 2-4 with the streaming plan in 9-36 blocks it lost at most 5%
// (bfloat16 sum 255 x 514 4.67 -> 4.91). Out of sample (call 2, widths 67-12001): 45 of 53 changed
// cases faster, 0.79x in geomean (float32 amax 191 x 4097 9.78 -> 4.25); 6 up to 11% slower
// (bfloat16 254 x 258, streamed in 5 blocks; 4097 columns unsplit in 513). Lanes were not the
// cause: 16 or 32 lanes a wave block (fewer rows of threads, more segments) tied or lost.
// REDUCE_OPS_COLS_WAVE_ELEMENTS=all (a developer knob) takes the wave plan for element tiles
// wherever it fits, as before.
constexpr int64_t kElementWaveBlocksPerSM = 3;
bool element_wave_plan_kept(const ColsArgs& a) {
  if (a.splits == 1 && a.outer * a.tiles <= kElementWaveBlocksPerSM * sm_count()) return true;
  return env_equals("REDUCE_OPS_COLS_WAVE_ELEMENTS", "all");  // the getenv only where the rule says no
}

// Latency first ("wave"): a thread reads one round of rows (kColsRound rows of its kVec columns,
// all in flight at once), or two where one wave of blocks cannot hold one-round segments; as
// many rows of threads per block as the reduced dim fills (up to 32), lanes across the columns
// for the rest (at least 8 where the columns allow: 128-byte lines per row of a warp), and the
// reduced dim split over blocks for the rest. Taken while the blocks fit in one wave. Small
// inputs wait on their loads, not on bandwidth, and the streaming shape made them wait for one
// round after another: 1024 x 128 over dim 0 was 4 blocks of 8 rounds. H200, CUDA graph, us,
// streaming -> wave, with reduce.cuh's fold tree and division-free prologue
// (h200_study/session23.txt): float32 sum 1024 x 128 8.7 -> 5.6, 64 x 4096
// 4.7 -> 3.0, 256 x 1024 7.1 -> 5.7, 2048 x 1024 9.6 -> 7.6, 8192 x 256 10.4 -> 8.0; bfloat16
// 1024 x 128 6.5 -> 4.7. Up to 16 rows of threads: within 3% where they fit a wave, and 8192 x
// 256 no longer did (9.1 us). Two rounds against streaming, 16-32 MB: bfloat16 sums 10.3-11.5
// -> 9.1-9.5 us, float32 within 0.3%; four rounds moved float32 by -8% to +6%. Element tiles
// (vec 1) only where element_wave_plan_kept says so.
std::optional<ColsPlan> wave_plan(ColsArgs a, int vec, int64_t resident) {
  constexpr int kMaxRows = 32, kMinLanes = 8, kMaxRounds = 2;
  const int64_t thread_cols = ceil_div(a.inner, vec);
  ColsLaunch l{1, 1};
  while (l.by < kMaxRows && l.by * kColsRound < a.reduced) l.by *= 2;
  while (l.bx * l.by < kBlock && l.bx < thread_cols) l.bx *= 2;
  while (l.bx < kMinLanes && l.bx < thread_cols && l.by > 1) {
    l.bx *= 2;
    l.by /= 2;
  }
  a.tiles = ceil_div(thread_cols, l.bx);
  for (int rounds = 1;; rounds *= 2) {
    a.chunk = std::min<int64_t>(static_cast<int64_t>(l.by) * kColsRound * rounds, a.reduced);
    a.splits = ceil_div(a.reduced, a.chunk);
    if (a.outer * a.tiles * a.splits <= resident) break;
    if (rounds * 2 > kMaxRounds) return std::nullopt;
  }
  if (vec == 1 && !element_wave_plan_kept(a)) return std::nullopt;
  set_fold_groups(a, l.by);
  if (a.splits > 1 && cols_fold(a).counters > kMaxCounters) return std::nullopt;
  return ColsPlan{a, l};
}

// The share of the slots of its waves that `blocks` fill, `wave` blocks a wave.
double wave_fill(int64_t blocks, int64_t wave) {
  return static_cast<double>(blocks) / static_cast<double>(ceil_div(blocks, wave) * wave);
}

// Streaming: a thread reads many rounds of rows; when the kept columns leave SMs idle, the
// reduced dim is split over up to one wave of blocks (all of it with force_split: 2 segments).
// `resident`: the blocks the split plans for; `wave`: the blocks the SMs hold at once.
// Unsplit column tiles past one wave take 16 lanes across (64 float32 columns, 16 rows of threads,
// the same block) instead of 32 where that fills their last wave fuller by a tenth of its slots:
// with few blocks left, the last wave reads at a fraction of the bandwidth. H200, sums over dim 0
// (h200_study/session70.txt, section 6), us, 32 -> 16 lanes (torch): float32 2048 x 151936 279.5
// -> 273.6 (279.2; 1187 tiles in waves of 792 -> 2374), 4096 x 128256 479.3 -> 462.6 (469.8),
// 2048 x 110592 220.4 -> 204.4 (214.1); bfloat16 2048 x 180224 190.4 -> 173.6 (188.4; 704 tiles in
// waves of 660). Where the fill does not gain, 16 lanes lost or tied: float32 4096 x 65536 (one
// wave) 237.3 -> 248.8, the row groups of 2048 x 50257 (1571 tiles) 102.2 -> 107.2; bfloat16
// 4096 x 128256 232.5 -> 240.3. (float32 2048 x 262144, the same fill either way: 475.5 -> 468.2.)
// Tiles that 32 lanes would split in 2 or 4 take 16 or 8 lanes unsplit (the same block, its rows
// of threads taking the rest), where those alone fill more than half the blocks the split plans
// for: no partials, no fold, and every block reads its columns' whole reduced dim. H200, us, 32
// lanes split -> narrower lanes unsplit (torch.compile), same process (h200_study/session105.txt):
// in 2 -> 16 lanes (call 6): float32 sums over dim 0 2048 x 32768 66.72 -> 64.83 (64.38), 4096 x
// 32768 125.22 -> 123.58 (126.08), 8192 x 32768 243.70 -> 242.24, 4096 x 24576 (384 tiles) 96.90
// -> 95.42 (94.43); bfloat16 2048 x 65536 66.59 -> 64.99 (71.49), 4096 x 49152 96.86 -> 95.68; in 4
// -> 8 lanes (call 10): bfloat16 4096 x 32768 66.37 -> 65.41 (70.27), 2048 x 32768 36.90 -> 35.71;
// float32 2048 x 16384 36.99 -> 35.62 (36.32), 4096 x 16384 66.72 -> 65.36 (64.77), 8192 x 16384
// 124.86 -> 124.22; amaxes and float16 alike. Halving the lanes where they still split lost or
// tied (in 4 -> 16 lanes in 2: bfloat16 4096 x 32768 66.37 -> 66.85), and in 3 -> 16 lanes
// (filling 1/2 to 2/3 of the blocks) was mixed: 2048 rows 2-2.5% faster, 8192 up to 0.9% slower
// (call 8). Those keep the split. Tiles of an element a thread (columns not whole packs) are not
// narrowed to 8 lanes: a warp of 8 lanes reads 4 rows of 16 or 32 bytes a load. H200, us, 8 lanes
// unsplit -> 32 lanes in 4 (REDUCE_OPS_COLS_LANES=32; h200_study/session111.txt, call 4): float32
// sums over dim 0 4096 x 4097 27.74 -> 23.52, 8192 x 4097 52.51 -> 39.97, 8192 x 3999 52.29 ->
// 39.26, amax 49.28 -> 37.86; bfloat16 amax 3068 x 4098 18.46 -> 15.04, sums into float32 12280 x
// 4098 58.70 -> 36.29, 4792 x 3502 26.14 -> 19.23. Where they split in 2, 16-bit ones keep 32
// lanes from kWideElementTiles16BitBytes (`wide_16bit_elements`): H200, us, 16 lanes unsplit ->
// 32 lanes in 2, row groups off (h200_study/session112.txt, calls 1 and 5): bfloat16 amaxes over
// dim 0 from 31.5 MiB 0.2-4% faster (2060 x 8002 18.62 -> 17.92), from 45.8 MiB 3-9% (8132 x
// 6150 45.09 -> 42.05), compensated sums alike (4784 x 7002 32.46 -> 29.34), plain sums with
// reduce_cols_kernel's 16-bit fence 4-11% from 47 MiB (7141 x 7002 43.4 -> 38.7); at 16 MiB 16
// lanes won by 0.5-7% (amax 1385 x 6150 12.4 -> 13.0). Session 113 (h200_study/session113.txt,
// call 1) timed 16-32 MiB on the fenced kernel, us, 16 -> 32 lanes: at 28 MiB 32 lanes won at
// every width, sums and amaxes (2387 x 6150 sum 16.61 -> 16.48, 2097 x 7002 18.11 -> 17.38, 1835 x
// 8002 17.41 -> 16.64, 1744 x 8417 16.64 -> 15.97), at 24 MiB they were mixed (1797 x 7002 15.65 ->
// 16.26, 1572 x 8002 16.00 -> 15.49), at 16-20 MiB 16 lanes won or tied: hence 27 MiB. float32
// ones stay on 16 lanes: 16 won up to 95 MiB by 0-17%, and from 112 to 184 MiB the amaxes gained
// 1-4% by 32 where the sums moved both ways (5701 and 6001 columns 0-3% slower, 7001 and 8001 1-8%
// faster; session112.txt, calls 2, 4). Since session 113 16-bit element tiles take 64 lanes of 4
// rows of threads where those split in 4 or more (below), which is where 32-lane tiles split in 2
// but for the rounding of some outer counts (against 528 blocks, 7 x 1153-1184 columns: 7 x 19
// tiles of 64 lanes, too many for 4 segments, 7 x 37 of 32 in 2): this bound now applies to them
// almost only under REDUCE_OPS_COLS_THREAD_ROWS=8.
// REDUCE_OPS_COLS_LANES=<n> (a developer knob) caps the lanes across at n in every streaming plan.
constexpr int64_t kWideElementTiles16BitBytes = int64_t{27} << 20;
// 16-bit element tiles (vec 1), and since session 115 float32 ones of compensated sums, take 4
// rows of threads first, so 64 lanes across (128 bytes of a row a block, two warps side by side)
// where the columns allow, rather than 8 rows of 32 lanes (`element_tiles_4rows`).
// H200, us, 8 -> 4 rows of threads, odd row counts (no row group), 8-48 MiB
// (h200_study/session113.txt, call 6): bfloat16 sums over dim 0 839 x 5001 11.07 -> 9.76, 12559 x
// 1002 16.22 -> 15.52, 1797 x 7002 15.58 -> 14.78, 2047 x 6150 15.20 -> 14.18, 1025 x 4098 10.75 ->
// 9.79; compensated sums 3-15% faster, amaxes as the plain sums; of 36 widths x sizes, the plain
// sums and amaxes lost at 2050 columns (1.2-2.2%), at 683 x 6150 and 499 x 8417 (8 MiB, 2-3%) and
// 4193 x 3002 (2.4-3.9%). float32 amaxes keep 8 rows: they moved both ways (599 x 7001 11.39 ->
// 11.78, 6143 x 4097 31.17 -> 30.40), where the sums gained 1-11%; the compensated sums (float32's
// default) then take 4 (h200_study/session115.txt, call 2; float32 sums over dim 0, us, 8 -> 4
// rows, bench.py's timer | CUDA graph): 419 x 5001 (8 MiB) 11.01 -> 9.44 | 7.98 -> 6.46, 1537 x
// 4097 14.66 -> 13.17 | 11.77 -> 10.34, 25141 x 1001 (96 MiB) 33.60 -> 32.46 | 31.28 -> 30.18, 5991
// x 7001 (160 MiB) 55.26 -> 49.09 | 52.48 -> 46.03; the other 20 cases of 1001-7001 columns at
// 8-160 MiB 0.86-0.99x | 0.81-1.00x but 4193 x 3001 19.94 -> 20.22 | 17.20 -> 17.71 (plain float32
// sums, a knob's or a staged sum's, were not timed and keep 8). Only where the 64-lane tiles still
// split in 4 or more (every width above): where they would split in 2 and 32 lanes need no split, 4
// rows lost 1-14% (call 7: 349 x 12001 8.90 -> 10.08, 1201 x 12001 14.98 -> 15.81, 901 x 16001
// 14.72 -> 15.47). REDUCE_OPS_COLS_THREAD_ROWS=<n> (a developer knob) sets the first rows of
// threads for every streaming plan.
constexpr int64_t kElementThreadRows = 4;
ColsPlan stream_plan(ColsArgs a, int vec, int64_t resident, int64_t wave, bool force_split, bool wide_16bit_elements,
                     bool element_tiles_4rows) {
  const int64_t thread_cols = ceil_div(a.inner, vec);
  const int64_t forced_lanes = env_positive("REDUCE_OPS_COLS_LANES", 0);
  const int64_t lanes = forced_lanes > 0 ? forced_lanes : kBlock;
  const int64_t forced_rows = env_positive("REDUCE_OPS_COLS_THREAD_ROWS", 0);
  int64_t thread_rows = forced_rows > 0 ? forced_rows : 8;
  if (forced_rows == 0 && element_tiles_4rows &&
      a.outer * ceil_div(thread_cols, cols_launch(a, vec, lanes, kElementThreadRows).bx) * 4 <= resident) {
    thread_rows = kElementThreadRows;
  }
  ColsLaunch l = cols_launch(a, vec, lanes, thread_rows);
  a.tiles = ceil_div(thread_cols, l.bx);
  int64_t splits = 1;
  if (a.outer * a.tiles * 2 <= resident && a.reduced >= 2 * kMinColsChunk) {
    splits = std::min(resident / (a.outer * a.tiles), ceil_div(a.reduced, kMinColsChunk));
  } else if (force_split && a.reduced >= 2) {
    splits = 2;  // smallest split, so that small test shapes take this path
  }
  // Tiles of `narrow_lanes` across, the same block size: taken (l, a.tiles), and true, where
  // takes(their tile count) holds.
  const auto narrow_to = [&](int64_t narrow_lanes, const auto& takes) {
    const ColsLaunch narrow = cols_launch(a, vec, narrow_lanes, thread_rows);
    const int64_t narrow_tiles = ceil_div(thread_cols, narrow.bx);
    if (narrow.bx * narrow.by != l.bx * l.by || !takes(narrow_tiles)) return false;
    l = narrow;
    a.tiles = narrow_tiles;
    return true;
  };
  const bool narrows = splits == 2 ? vec > 1 || !wide_16bit_elements : splits == 4 && vec > 1;
  if (narrows && !force_split && forced_lanes == 0 && l.bx == kWarpSize &&
      narrow_to(l.bx / splits, [&](int64_t tiles) { return a.outer * tiles * 2 > resident; })) {
    splits = 1;
  }
  if (splits > 1) {
    ColsArgs split = a;
    // Segments of whole rounds for each row of threads (kColsChunkRows).
    split.chunk = std::min(ceil_div(ceil_div(a.reduced, splits), kColsChunkRows) * kColsChunkRows, a.reduced - 1);
    split.splits = ceil_div(a.reduced, split.chunk);
    const ColsLaunch split_l = cols_launch(split, vec, lanes, thread_rows);
    split.tiles = ceil_div(thread_cols, split_l.bx);
    set_fold_groups(split, split_l.by);
    if (cols_fold(split).counters <= kMaxCounters) return {split, split_l};
  }
  constexpr int kNarrowLanes = 16;
  if (forced_lanes == 0 && l.bx > kNarrowLanes && a.outer * a.tiles > wave) {
    narrow_to(kNarrowLanes, [&](int64_t tiles) {
      return wave_fill(a.outer * tiles, wave) >= wave_fill(a.outer * a.tiles, wave) + 0.1;
    });
  }
  return {a, l};
}

// Small column reductions in one block's reach (reduce_cols_few_kernel): launched, and true, where
// the reduced dim is at most 2048 rows, the input at most 8 MB and the blocks fit in one wave.
// One warp a block up to 256 rows (its lanes split between 32 / 2^k columns and 2^k rows, 8 rows
// a thread; 4 for up to 4 rows), then one column a block of 4 or 8 warps. H100, CUDA graph, us,
// among the shapes tried (h100_study/session43_small.txt): 64 x 4096 bfloat16 sum 1.82 with one
// warp of 4 columns x 8 rows, 2.05-2.20 with 2 or 8 warps; 1024 x 128 float32 2.32 with 128
// rows of threads, 2.56 with 256 of 4 rows each. Past 8 MB the wave and streaming plans' wider
// rows win: 2048 x 4096 bfloat16 (16 MB) 10.70 -> 11.30 us by this kernel, where 2048 x 1024
// float32 (8 MB) gained (8.47 -> 6.99).
constexpr int64_t kColsFewMaxReduced = 2048;
constexpr int64_t kColsFewMaxBytes = int64_t{8} << 20;
template <typename In, typename Out, typename R>
bool launch_cols_few(const In* x, Out* out, const ReduceGeometry& g, const R&, cudaStream_t stream) {
  constexpr int kVec = kMaxVec<In>;
  const int64_t col_packs = g.inner / kVec;
  if (g.reduced > kColsFewMaxReduced || g.outer > 65535 || col_packs > (int64_t{1} << 30) ||
      cols_input_bytes<In>(g) > kColsFewMaxBytes) {
    return false;
  }
  const ColsFewArgs a{g.outer_stride, g.reduced_stride, static_cast<int>(g.reduced), static_cast<int>(col_packs)};
  // Every row is loaded in one round and folded as one tree, so a compensated sum adds plain
  // (TreeReducer), as the row kernels' one-round rows. H200, CUDA graph, float32 sums over dim 0,
  // us, compensated -> plain (h200_study/session82.txt, section 4): 512 x 2048 4.73 -> 4.17, 2048
  // x 256 3.55 -> 3.25, 1024 x 128 2.76 -> 2.67 (torch.compile 3.60), 64 x 4096 2.30 -> 2.22.
  using Tree = typename TreeReducer<R>::type;
  auto launch = [&](auto bx_tag, auto by_tag, auto packs_tag) {
    constexpr int kBx = decltype(bx_tag)::value, kBy = decltype(by_tag)::value, kPacks = decltype(packs_tag)::value;
    const auto kernel = reduce_cols_few_kernel<In, Out, Tree, kBx, kBy, kPacks>;
    const int64_t tiles = ceil_div(col_packs, kBx);
    if (g.outer * tiles > sm_count() * resident_blocks(kernel, kBx * kBy, 0)) return false;
    kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(g.outer)), kBx * kBy, 0, stream>>>(x, out, a,
                                                                                                       Tree{});
    return true;
  };
  if (g.reduced <= 4) return launch(Int<32>{}, Int<1>{}, Int<4>{});
  if (g.reduced <= 8) return launch(Int<32>{}, Int<1>{}, Int<8>{});
  if (g.reduced <= 16) return launch(Int<16>{}, Int<2>{}, Int<8>{});
  if (g.reduced <= 32) return launch(Int<8>{}, Int<4>{}, Int<8>{});
  if (g.reduced <= 64) return launch(Int<4>{}, Int<8>{}, Int<8>{});
  if (g.reduced <= 128) return launch(Int<2>{}, Int<16>{}, Int<8>{});
  if (g.reduced <= 256) return launch(Int<1>{}, Int<32>{}, Int<8>{});
  if (g.reduced <= 1024) return launch(Int<1>{}, Int<128>{}, Int<8>{});
  return launch(Int<1>{}, Int<256>{}, Int<8>{});
}

template <typename In, typename Out, typename R>
void launch_cols(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                 cudaStream_t stream, const ForcedStrategy& forced);

// Columns that are not whole 16-byte packs (77, 197, 1002, 50257 of a 16-bit type) load an element a
// thread and row in reduce_cols_kernel<kVec = 1>. But `groups` = kVec / gcd(cols, kVec) dense
// rows together are whole packs: reduced as (reduced / groups, groups * cols) columns by the
// vectorized kernels, they leave `groups` partials a column (partial[j][c]: the rows j, j +
// groups, ...), which fold_row_groups_kernel folds in order (deterministic; the partials are R's
// finished values, so a compensated sum keeps one more rounding per partial, ~2^-24 of it).
// Automatic only, where x starts on 16 bytes, `groups` divides the reduced dim and the size is
// one where it was faster. H200, us, one element a thread and row -> row groups, sums and amaxes
// over dim 0 (h200_study/session50_rows.txt, section 4): 1.3-3.2 MB 1.01-1.29x in eager launches
// and 1.4-2.1x in CUDA graphs (float32 sum 8192 x 77 11.6 -> 9.1, in a graph 8.47 -> 4.87;
// bfloat16 amax 4096 x 197 11.3 -> 9.6); 206-412 MB 1.06-1.17x (bfloat16 sum 2048 x 50257 68.3 ->
// 58.5, float32 amax 116.7 -> 101.0); between them 0.83-1.31x, mostly slower, the second launch
// and the partials' round trip costing more than the packs save (bfloat16 amax 65536 x 77 12.1 ->
// 14.6, float32 sum 256 x 50257 19.2 -> 21.6, 1024 x 1002 at 4.1 MB 10.7 -> 11.4). From 52 to
// 205 MB not measured. Under 1 MB (session 51, h200_study/session51_cols.txt): 2048 x 197
// bfloat16 (0.8 MB) sum 9.7 -> 8.1 us, in a graph 6.11 -> 3.96, against the full-width blocks
// (launch_cols_full_width) that took it; 1024 x 77 float32 (0.3 MB) 8.1 -> 7.8, graph 4.81 ->
// 3.60, against the one-element kernel; at 0.16 MB (1024 x 77 bfloat16) a graph still gained
// (4.27 -> 3.36) but eager launches lost (7.4 -> 8.0), hence the 256 KB bound. Above it, at the
// bound (section 7): every graph faster, eager launches up to 0.9 us slower in 3 of 6 cases of
// 0.3-0.4 MB (float32 amax of 1024 x 77 7.30 -> 8.16; in a graph 4.21 -> 3.55).
// Session 53 (h200_study/session53_packed_columns.txt, sections 5-6): 16-bit rows whose row group
// is more than kPackedAutoPacks packs gain past a size too (66 MB measured; since sessions 109-110
// from 20.25-27 MiB, below), us: bfloat16 sum 32768 x 1002 (66 MB) 34.0 -> 27.3, 65536 x 1002 58.8
// -> 42.0, 32768 x 2052 58.2 -> 42.9 (torch.compile 24.8, 44.8, 44.1), amaxes 27.7 -> 26.4, 47.4 ->
// 40.9, 47.6 -> 42.2. Float32 rows of 1002 lost at 131 MB (37.7 -> 40.9). Where a group is at most
// 256 packs the packed kernel (launch_cols_packed) beat both and takes the large ones first.
// Session 109 (h200_study/session109.txt, calls 6-7), CUDA graphs, us, off -> on: the bound 48 ->
// 27 MiB, since from 28.7 MB both ops gained (bfloat16 sum 14336 x 1002 15.91 -> 12.73, amax 13.57
// -> 12.68; 7168 x 2052 15.93 -> 13.21, 13.70 -> 13.10; 16384 x 1002 17.60 -> 13.82, 14.92 ->
// 13.75; 4096 x 4100 20.38 -> 14.68, 19.60 -> 14.56; float16 alike); at 24.6 MB the sums gained and
// the amaxes lost (12288 x 1002 14.13 -> 11.69, 12.32 -> 13.37), at 16-21 MB the amaxes lost 9-14%
// and the sums moved by under 5% either way (8192 x 1002 amax 9.76 -> 10.96, sum 11.03 -> 11.14).
// Session 110 (h200_study/session110.txt, call 3), plain sums by bench.py's timer over 4 inputs in
// turn, us, off -> on: from 20.55 MiB the sums gain at every width (bfloat16 10752 x 1002 16.96 ->
// 15.42, 11776 x 1002 16.90 -> 15.84, 5376 x 2052 16.93 -> 15.78, 2816 x 4100 18.34 -> 17.18, 3328 x
// 4100 20.45 -> 17.70; float16 alike), at 19.6-20.0 MiB they lose (10240 x 1002 15.33 -> 16.19,
// 5120 x 2052 15.42 -> 16.99, 2560 x 4100 16.61 -> 17.66): plain sums from 20.25 MiB, the amaxes
// from 27 MiB. Since session 112 the one-element kernel issues a round's 16 loads together
// (reduce_cols_kernel's 16-bit fence; 15-40% faster on plain sums), and the row groups lost at 21
// MiB at every width timed (h200_study/session112.txt, call 7), us, one-element -> row groups:
// bfloat16 sums 10992 x 1002 15.10 -> 15.20, 5368 x 2050 14.91 -> 15.84, 2688 x 4098 14.37 ->
// 15.90, 1576 x 7002 15.39 -> 15.78: plain sums from 27 MiB, as the amaxes (at 32 MiB both are
// mixed by width: 1002 and 7002 columns 3-12% faster on row groups, 2050 and 4098 7-12% slower).
// Compensated sums (16-bit inputs into float32; NeumaierReducer) lost on them up to 64
// MiB at most widths and gained from 94 (h200_study/session111.txt, calls 1-4), bfloat16, us, off
// -> on: 14336 x 1002 (27.4 MiB) 15.87 -> 19.62, 32768 x 1002 (62.6) 27.17 -> 27.92, 49152 x 1002
// 36.70 -> 35.17, 131072 x 1002 87.39 -> 72.13; 8184 x 2050 17.74 -> 20.69, 16368 x 2050 27.04 ->
// 28.45, 24552 x 2050 36.54 -> 35.81; 10908 x 3076 28.16 -> 28.64, 16362 x 3076 37.41 -> 36.19;
// 4092 x 6150 23.36 -> 24.77, 5456 x 6150 29.54 -> 28.61; columns of 4098 lost up to 96 MiB once
// their one-element tiles kept 32 lanes (stream_plan; 12280 x 4098 36.29 -> 37.70), but 7002
// gained from 32 MiB (4792 x 7002 32.22 -> 28.00): from 80 MiB. REDUCE_OPS_COLS_ROW_GROUPS=on
// takes them at any size. Since session 114 the fold is a programmatic dependent of the first
// launch (h200_study/session114.txt, calls 3-6), bfloat16 over dim 0, row groups forced, us,
// plain launch -> dependent: sums 6144 x 2050 16.48 -> 14.43, 4096 x 4098 18.82 -> 17.02, 16384 x
// 1002 17.79 -> 16.67, 25116 x 1002 22.02 -> 21.12, 32768 x 1002 25.25 -> 24.48. Against the
// one-element kernel (its 4 rows of 64 lanes since session 113) they then gain from 40 MiB at every
// width, at 32 MiB on 1002 and 7002 columns (0.93-0.97x) but not on 2050 and 4098 (1.02-1.04x), and
// at 24 MiB lose up to 8% (amaxes, 3072 x 4098 14.21 -> 15.30); in CUDA graphs 0.86-0.99x from 32
// MiB: the 27 MiB bound stays. The compensated sums' 80 MiB bound, re-timed with the dependent fold
// (h200_study/session115.txt, call 1; bfloat16, us, one element -> row groups, bench.py's timer |
// CUDA graph): 7002 columns gain from 48 MiB (4792 x 7002 28.03 -> 27.09 | 26.00 -> 23.29), 1002
// from 72 (37672 x 1002 29.31 -> 28.70), 2050 tie at 64-72 (18416 x 2050 30.08 -> 30.02 | 27.30 ->
// 27.41), 4098 lose up to 72 (9212 x 4098 29.02 -> 29.76) and tie at 80 (31.39 -> 31.55 | 29.46 ->
// 28.95); at 80 MiB the others gain 3-4% (41860 x 1002 31.90 -> 30.69): it stays.
// Under kRowGroupsMinBytes they are taken where the reduced dim is more than
// kRowGroupsSmallMinReduced rows: there the one-element and full-width plans split it in
// segments of 128 rows and fold them in the launch (float32 128 x 197: 25 blocks of 8 x 32
// threads, 256 x 197: 50; 128 x 77: one block of 77 x 8, 136 x 77: 2), and the row groups' two
// launches (the fold a programmatic dependent) won in both timers; up to 128 rows those plans are
// one segment and won. H200, us, one element -> row groups, bench.py's timer over 4 inputs | CUDA
// graph (h200_study/session114.txt, calls 7-9): float32 256 x 77 (77 KB) sum 7.36 -> 6.27 | 4.46
// -> 3.99, 136 x 239 8.00 -> 6.30 | 4.95 -> 4.02; bfloat16 256 x 197 7.20 -> 5.92 | 4.44 -> 3.91;
// float64 192 x 77 amax 8.29 -> 5.82 | 5.07 -> 3.93; 36 cases of 136-256 rows, every dtype,
// 0.70-0.94x | 0.76-0.97x. But float32 128 x 77 5.50 -> 6.43 | 2.76 -> 3.87, bfloat16 128 x 1002
// 5.66 -> 6.30 | 2.94 -> 3.95.
constexpr int64_t kRowGroupsMinBytes = int64_t{1} << 18;
constexpr int64_t kRowGroupsSmallMinReduced = 128;
constexpr int64_t kRowGroupsSmallMaxBytes = int64_t{7} << 19;  // 3.5 MB
constexpr int64_t kRowGroupsLargeBytes = int64_t{192} << 20;
constexpr int64_t kRowGroupsWide16BitBytes = int64_t{27} << 20;
constexpr int64_t kRowGroupsWide16BitCompensatedBytes = int64_t{80} << 20;
// float32 columns whose row group is 257-1024 packs (past kPackedAutoPacks the packed kernel does
// not take them) take row groups past kRowGroupsSmallMaxBytes too: sums up to 5.75 MiB, amaxes up
// to 8 MiB, where the row groups' first launch is reduce_cols_few_kernel (at most 2048 rows of the
// wide view and 8 MB) and, since session 115, lets the fold start early (allow_dependents). H200,
// us, one element -> row groups, bench.py's timer | CUDA graph (h200_study/session115.txt, calls
// 3-4): float32 sums 998 x 1002 (3.8 MiB) 10.34 -> 8.90 | 7.39 -> 5.32, 1248 x 1001 11.55 -> 8.77 |
// 8.53 -> 5.88, 1498 x 1002 (5.7 MiB) 9.38 -> 8.74 | 6.47 -> 6.33, 2918 x 514 10.27 -> 9.71 | 6.51
// -> 6.22, but 1536 x 1002 (5.9 MiB) 9.15 -> 9.60 | 6.35 -> 6.21, 1746 x 1002 9.47 -> 9.95 | 6.59
// -> 6.86 and 1996 x 1002 9.31 -> 9.92 | 6.27 -> 7.34; amaxes 0.64-0.89x | 0.54-0.78x at every size
// to 7.6 MiB (1996 x 1002 12.67 -> 10.53 | 9.65 -> 7.36; the one-element tiles of float32 amaxes
// keep 8 rows of threads, above). 16-bit ones were mixed there (bfloat16 sums 1464 x 2050 9.28 ->
// 10.59, 5836 x 514 10.53 -> 9.86) and keep the 3.5 MB bound. Calls 5-6 (the rule built, CUDA
// graphs): row groups take 4.8-8.0 us at 4.5-7.6 MiB whatever the width, where the one-element plan
// jumps between about 6 and 9.8 us with the row count: 1538 columns (769 packs) of 1278 rows 9.58
// -> 7.22 but of 1296 rows 7.00 -> 7.22, the one amax in the rule of 37 timed (calls 4-6) that
// lost. Wider groups, left out, gained on amaxes (316 x 4001 9.67 -> 4.89, 614 x 2050 8.06 -> 5.76)
// but not everywhere (524 x 3002 6.07 -> 7.73).
constexpr int64_t kRowGroupsSmallFloatSumMaxBytes = int64_t{23} << 18;  // 5.75 MiB
constexpr int64_t kRowGroupsSmallFloatMaxMaxBytes = int64_t{8} << 20;
constexpr int64_t kRowGroupsSmallFloatMaxPacks = 1024;
// Packed row groups are taken automatically up to this many packs a group (launch_cols_packed).
constexpr int64_t kPackedAutoPacks = 256;
// Row groups take two launches where their wide view (reduced / groups rows) is in
// reduce_cols_few_kernel's reach (launch_cols_few), and three past it: the wide view's split
// column kernel, its partials' fold (fold_partial_words_kernel), then fold_row_groups_kernel.
// Groups of 2- and 4-byte types of at most kPackedAutoPacks packs (those the packed kernel takes
// automatically) then follow the launches: in the few kernel's reach they stay on row groups up
// to kRowGroupsFewMaxBytes, amaxes and 16-bit sums kRowGroupsFewSmallMaxBytes
// (row_groups_keep_two_launches, kRowGroupsFewSmallMax), and past the reach they take the
// packed kernel at any size, under kPackedSmallMaxBytes (3 MiB until session 121) on rounds of
// kColsRound rows of packs a thread (launch_cols_packed: more segments) rather than kPackedRound.
// H200, CUDA graph, us, the rule before -> after (torch.compile; h200_study/session118.txt, call
// 3): three launches -> packed on rounds of 4, float32 sums over dim 0 16384 x 13 (0.85 MB) 6.06 -> 4.88 (3.71), 32768 x 13 6.31
// -> 5.15 (4.02), amax 16384 x 13 5.34 -> 4.34 (3.80); bfloat16 16384 x 50 sum 6.01 -> 4.82
// (4.25), amax 5.84 -> 4.74 (4.35); packed -> two launches of row groups, float32 4096 x 197 (3.2
// MB) sum 5.40 -> 4.90 (4.41), amax 6.09 -> 4.64 (4.53), bfloat16 8192 x 197 sum 5.46 -> 4.82
// (4.89), amax 6.18 -> 4.74 (5.02). Past 4 MiB the row groups lost the sums (float32 6144 x 197,
// 4.7 MB: 5.75 -> 5.88, 8192 x 197 6.17 -> 6.77; bfloat16 12288 x 197 5.88 -> 5.95) and won the
// amaxes (float32 6144 x 197 6.36 -> 5.66, bfloat16 12288 x 197 6.43 -> 5.83), which in sessions
// 119-121 kept row groups to 6 MiB (h200_study/session119.txt, call 1), packed ->
// row groups: float32 5500 x 197 (4.3 MB) 6.18 -> 5.21, 7000 x 197 6.41 -> 5.95, 8192 x 151 6.31
// -> 5.99, 5000 x 255 6.37 -> 5.61; bfloat16 14000 x 197 6.49 -> 6.17, 16384 x 151 6.38 -> 6.19;
// past 6.3 MB even or slower (float32 8192 x 233 6.76 -> 6.93, bfloat16 16384 x 233 6.85 -> 7.13).
// Out of sample (call 4, the rule built): 13 amaxes under 6 MiB all faster, float32 6000 x 171
// 6.15 -> 5.16, 8000 x 187 6.48 -> 6.16, 7984 x 197 6.54 -> 6.37; bfloat16 13000 x 181 6.30 ->
// 5.85, 15968 x 197 6.62 -> 6.54 (torch.compile still 0.82-0.95x of ours there). Sums keep 4 MiB:
// in call 1 float32 went 0.86-1.08x at 4.3-5.5 MB (8192 x 151 5.80 -> 6.27), 16-bit all slower.
// Under 3 MiB the few kernel's two launches beat the packed kernel on either round
// (float32 8192 x 13 sum 4.20, 4.88 on 16 rows of packs, 4.73 on 4; 3000 x 197 4.49, 5.82, 5.32;
// bfloat16 8192 x 50 4.12, 5.23, 4.52). From 3 MiB reduce_cols_kernel's round of 4 was mixed
// (bfloat16 22528 x 77 5.59 -> 5.41, float32 65536 x 13 5.55 -> 5.74); the small kernel's is not
// (kPackedSmallMaxBytes).
constexpr int64_t kRowGroupsFewMaxBytes = int64_t{4} << 20;
constexpr int64_t kRowGroupsFewSmallMaxBytes = int64_t{7} << 19;  // 3.5 MiB

// Whether R is an amax: the column rules below set some bounds apart for amaxes and sums.
template <typename R>
constexpr bool kIsMax = std::is_same_v<R, PlainReducer<MaxOp<typename R::Value>>>;

// Whether row groups in reduce_cols_few_kernel's reach keep their two launches only to
// kRowGroupsFewSmallMaxBytes (amaxes and 16-bit sums), not kRowGroupsFewMaxBytes (float32 sums),
// before the small packed kernel takes them (launch_cols_packed; 6 MiB for amaxes and 4 MiB for
// sums before session 122, and the kPackedRound kernel past them). Session 122 moved amaxes and
// 16-bit sums in the reach to the small kernel; float32 sums followed in session 123, once its
// compensated sums folded finished floats (reduce_cols_packed_small_kernel). H200, CUDA graph, us,
// over dim 0 (h200_study/session122.txt): kPackedRound -> the small kernel (torch.compile), call 1:
// float32 amaxes 8192 x 197 (6.5 MB) 6.63 -> 5.73 (5.47), 8192 x 233 6.80 -> 6.02 (5.77); bfloat16
// sums 12288 x 197 5.83 -> 5.48 (5.50), 16384 x 151 5.92 -> 5.54 (5.57), 13000 x 181 5.83 -> 5.45
// (5.54), amax 16384 x 233 6.90 -> 6.18 (6.69); but float32 sums 0.97-1.05x (8192 x 197 6.11 ->
// 6.36, 8192 x 233 6.39 -> 6.69), whose compensated partials are twice as wide. Out of sample (call
// 2, the rule built): float32 amaxes 8000 x 211 6.57 -> 5.68 (5.52), 7500 x 255 6.84 -> 5.95
// (5.70); bfloat16 sums 16000 x 171 6.03 -> 5.64 (5.67), 16384 x 255 6.74 -> 6.53 (6.72), amax
// 15000 x 241 6.75 -> 5.91 (6.51); float16 sum 14000 x 181 5.81 -> 5.55 (5.65), amax 16384 x 233
// 6.84 -> 6.10 (6.61): all 15 changed cases 0.86-0.97x. Two launches of row groups -> the small
// kernel (call 3): float32 amaxes 5000 x 211 (4.2 MB) 5.23 -> 4.89 (4.76), 7984 x 197 6.35 -> 5.60
// (5.36), 8192 x 151 5.88 -> 5.17 (5.03); bfloat16 amaxes 12288 x 197 (4.8 MB) 5.77 -> 5.36 (5.58),
// 16384 x 151 6.24 -> 5.39 (5.63), sums 10000 x 199 (4.0 MB) 5.48 -> 5.15 (5.20), 12000 x 163 5.63
// -> 5.11 (5.12); float16 amax 14000 x 181 6.01 -> 5.44 (5.69): 0.86-0.96x from 3.7 MiB, but at
// 3.05 MiB and under the row groups won (float32 amax 4096 x 197 4.55 -> 4.58; bfloat16 8192 x 197
// amax 4.62 -> 4.74, sum 4.74 -> 4.80). Call 4 (this rule built): at 3.3-3.5 MiB, under the bound,
// the small kernel forced was 0.97-1.00x (float32 amax 3600 x 241 4.78 -> 4.66, bfloat16 sum 8960 x
// 197 5.16 -> 5.06), so the bound is right to about 3% anywhere from 3.05 to 3.5 MiB. Float32 sums
// (h200_study/session123.txt, call 2), kPackedRound -> the small kernel folding floats: 8192 x 197
// 6.08 -> 5.98 (5.23), 6144 x 197 5.71 -> 5.43 (4.84), 8192 x 233 6.37 -> 6.21 (5.55), 7000 x 171
// 6.04 -> 5.46 (4.84), 5000 x 255 5.93 -> 5.52 (4.91); with its compensated fold they had been
// 0.97-1.05x (session 122). Their row groups keep 4 MiB: at 3.5-4 MiB the small kernel was
// 1.01-1.04x of their time (call 1, before the partials' plain butterfly: 4656 x 197 4.99 -> 5.19,
// 5320 x 197 5.29 -> 5.35; 8192 x 121 5.02 -> 4.94, 4400 x 211 even).
template <typename In, typename R>
constexpr bool kRowGroupsFewSmallMax = sizeof(In) == 2 || kIsMax<R>;

// Whether the (reduced / groups, groups * cols) view of row groups is in reduce_cols_few_kernel's
// reach by its rows and bytes. launch_cols_few also needs an outer count up to 65535 and its
// blocks in one wave, not checked here: past them the row groups keep their three launches
// (the rule before session 118).
template <typename In>
bool row_groups_in_few_reach(const ReduceGeometry& g, int64_t groups) {
  return g.reduced / groups <= kColsFewMaxReduced && cols_input_bytes<In>(g) <= kColsFewMaxBytes;
}

// Whether row groups of `packs` packs a group keep their two launches where the packed kernel
// would otherwise take them (the rule above, in one place for launch_cols_packed and
// launch_cols_row_groups): 2- and 4-byte types within kPackedAutoPacks packs, the wide view in the
// few kernel's reach, up to kRowGroupsFewMaxBytes (float32 sums) or kRowGroupsFewSmallMaxBytes
// (amaxes and 16-bit sums: kRowGroupsFewSmallMax).
template <typename In, typename R>
bool row_groups_keep_two_launches(const ReduceGeometry& g, int64_t groups, int64_t packs) {
  const int64_t most = kRowGroupsFewSmallMax<In, R> ? kRowGroupsFewSmallMaxBytes : kRowGroupsFewMaxBytes;
  return sizeof(In) <= 4 && packs <= kPackedAutoPacks && row_groups_in_few_reach<In>(g, groups) &&
         cols_input_bytes<In>(g) <= most;
}

// Columns that are not whole packs, where row groups are not taken: reduce_cols_kernel<kVec = 1>
// with one column tile, blockDim.x = the columns and up to kFullWidthRows rows of threads (within
// 1024 threads), so that a block's rows of threads read consecutive rows, one contiguous span of
// memory; the streaming shape's 32-lane tiles cut each row of 77 float32 columns into three
// blocks' 128-byte pieces, the last of 13 lanes. The reduced dim is split in segments of whole
// rounds (16 rows for each row of threads) over up to kFullWidthBlocksPerSM blocks an SM.
// Automatic up to kFullWidthAutoCols columns and kFullWidthAutoBytes; REDUCE_OPS_COLS_FULL_WIDTH=on
// takes it at any size up to kFullWidthCols columns, =off never. H200, us, eager launches, one
// element a thread and row as before -> full width (h200_study/session51_cols.txt): float32 sum
// 16384 x 77 (5 MB) 11.7 -> 10.2 (CUDA graph 8.65 -> 6.36), 8193 x 77 (no row group fits) 12.0 ->
// 9.7, bfloat16 sum 65536 x 77 13.1 -> 12.3. 197 columns (4 rows of 197 threads) gained nowhere:
// 3-10% slower at 6.5-13 MB (section 8: float32 sum 16384 x 197 12.0 -> 13.3, bfloat16 11.4 ->
// 12.2), within 3% at 26 MB; 103 MB slower (131072 x 197 float32 sum 34.5 -> 38.4), as 1002
// columns (one row of 1002 threads: 4096 x 1002 float32 sum 11.1 -> 16.8). 4 or 16 rows of
// threads moved no case by more than 0.5 us but 65536 x 77 float32 (4 rows: 14.9); 1, 2, 3, 8
// and 16 blocks an SM were no faster than 4 anywhere but 1002 columns.
constexpr int64_t kFullWidthCols = 1024;
constexpr int64_t kFullWidthAutoCols = 128;
constexpr int64_t kFullWidthAutoBytes = int64_t{16} << 20;
constexpr int64_t kFullWidthBlocksPerSM = 4;
constexpr int kFullWidthRows = 8;

template <typename In, typename Out, typename R>
bool launch_cols_full_width(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                            cudaStream_t stream) {
  if (g.inner_stride != 1 || g.inner > kFullWidthCols) return false;
  const int64_t bytes = cols_input_bytes<In>(g);
  const bool faster = g.inner <= kFullWidthAutoCols && bytes <= kFullWidthAutoBytes;
  // One getenv, as launch_cols_row_groups.
  if (faster ? env_equals("REDUCE_OPS_COLS_FULL_WIDTH", "off") : !env_equals("REDUCE_OPS_COLS_FULL_WIDTH", "on")) {
    return false;
  }
  ColsLaunch l{static_cast<int>(g.inner), 1};
  while (l.by < kFullWidthRows && l.bx * l.by * 2 <= 1024) l.by *= 2;
  ColsArgs a{g.outer, g.reduced, g.inner, g.outer_stride, g.reduced_stride, 1, 1, g.reduced, 1, 1, 1};
  const auto kernel = reduce_cols_kernel<In, Out, R, 1>;
  split_one_tile(kernel, a, l, static_cast<size_t>(l.bx) * l.by * sizeof(typename R::Acc),
                 static_cast<int64_t>(l.by) * 4 * kColsRound, kFullWidthBlocksPerSM);
  set_fold_groups(a, l.by);
  if (cols_fold(a).counters > kMaxCounters) return false;
  launch_cols_plan<In, Out>(kernel, xt, out_t, ColsPlan{a, l}, 1, r, stream);
  return true;
}

// The rows a row group of columns that are not whole 16-byte packs takes (kVec / gcd(cols, kVec)
// dense rows make whole packs), where x's layout lets the (reduced / groups, groups * cols) view
// be read by packs: dense rows, x and its outer slabs on 16 bytes, `groups` dividing the
// reduced dim. 1 where there is no such view (whole packs already, or another layout).
template <typename In>
int64_t row_groups_of(const In* x, const ReduceGeometry& g) {
  constexpr int64_t kVec = kMaxVec<In>;
  const int64_t groups = kVec / std::gcd(g.inner, kVec);
  if (groups == 1 || g.inner_stride != 1 || g.reduced_stride != g.inner || g.reduced % groups != 0 ||
      g.outer_stride % kVec != 0 || !is_aligned(x, 16)) {
    return 1;
  }
  return groups;
}

template <typename In, typename Out, typename R>
bool launch_cols_row_groups(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                            cudaStream_t stream, const ForcedStrategy& forced) {
  using V = typename R::Value;
  constexpr int64_t kVec = kMaxVec<In>;
  const int64_t groups = row_groups_of(xt.const_data_ptr<In>(), g);
  if (groups == 1) return false;
  const int64_t bytes = cols_input_bytes<In>(g);
  const int64_t group_packs = g.inner * groups / kVec;
  const bool wide_16bit = sizeof(In) == 2 && group_packs > kPackedAutoPacks;
  const int64_t wide_16bit_from =
      std::is_same_v<R, NeumaierReducer<V>> ? kRowGroupsWide16BitCompensatedBytes : kRowGroupsWide16BitBytes;
  const bool wide_float = std::is_same_v<In, float> && group_packs > kPackedAutoPacks &&
                          group_packs <= kRowGroupsSmallFloatMaxPacks;
  const int64_t small_max = !wide_float                                 ? kRowGroupsSmallMaxBytes
                            : kIsMax<R> ? kRowGroupsSmallFloatMaxMaxBytes
                                        : kRowGroupsSmallFloatSumMaxBytes;
  const bool small = bytes >= kRowGroupsMinBytes || g.reduced > kRowGroupsSmallMinReduced;
  const bool faster = (small && (bytes <= small_max || row_groups_keep_two_launches<In, R>(g, groups, group_packs))) ||
                      bytes >= kRowGroupsLargeBytes ||
                      (wide_16bit && bytes >= wide_16bit_from);
  // One getenv: where it was faster only "off" skips it, elsewhere only "on" takes it.
  if (faster ? env_equals("REDUCE_OPS_COLS_ROW_GROUPS", "off") : !env_equals("REDUCE_OPS_COLS_ROW_GROUPS", "on")) {
    return false;
  }
  ReduceGeometry wide = g;
  wide.reduced = g.reduced / groups;
  wide.inner = g.inner * groups;
  wide.reduced_stride = wide.inner;
  const at::Tensor partial =
      at::empty({g.outer * wide.inner}, xt.options().dtype(c10::CppTypeToScalarType<V>::value));
  launch_cols<In, V>(xt, wide, partial, r, stream, forced);
  const int64_t columns = g.outer * g.inner;
  launch_dependent(fold_row_groups_kernel<Out, R>, grid_for(ceil_div(columns, kBlock)), dim3(kBlock), 0, stream,
                   partial.const_data_ptr<V>(), out_t.mutable_data_ptr<Out>(), columns, g.inner, static_cast<int>(groups),
                   r);
  return true;
}

// Columns that are not whole 16-byte packs, read as packs ("packed"): `groups` = kVec / gcd(cols,
// kVec) dense rows are whole packs, so reduce_cols_kernel<kVec, kPackedRound> reduces the
// (reduced / groups, groups * cols) view as launch_cols_row_groups' first launch does, but in one
// column tile: a block as wide as a row group's packs (up to 1024 threads, fewer where the
// kernel's registers say so: 544 for a compensated bfloat16 sum into float32), the fewest rows of
// threads (a power of two) that make at least kPackedMinThreads threads, each loading
// a round of kPackedRound rows of packs, the reduced dim split in segments of such rounds over up to
// kPackedBlocksPerSM blocks an SM (fewer where fewer fit). Each block folds its columns' `groups`
// values in shared memory before its partial goes out, and a second launch folds the segments'
// partials, a block or a warp a 16-byte word of columns (launch_fold_partial_words, a
// programmatic dependent of the first): no finished partials, so a compensated sum stays
// compensated to the end. Needs x on 16 bytes, dense rows,
// outer slabs on whole packs and `groups` dividing the reduced dim. Automatic for 2- and 4-byte
// types from 3 MB (since session 77; past 3.5 MB, 6 MB and 192 MB before; since
// session 118 at any size where row groups would take three launches, and past
// kRowGroupsFewMaxBytes, amaxes and 16-bit sums kRowGroupsFewSmallMaxBytes, where they take
// two: kRowGroupsFewMaxBytes' comment) and
// float64 from kRowGroupsLargeBytes, within kPackedAutoPacks packs a row group (257-1024 packs
// leave one block an SM: few rows in flight). H200, us, the rule before -> packed, eager
// launches (h200_study/session53_packed_columns.txt, sections 2-3): bfloat16 sums 131072 x 77
// (20 MB) 17.9 -> 15.0, 262144 x 77 26.8 -> 19.4, 65536 x 197 19.7 -> 17.2, 131072 x 197 30.7
// -> 22.8, 2097152 x 77 (323 MB, row groups before) 86.1 -> 82.4; float32 sum 2097152 x 77
// 164.0 -> 152.5, 524288 x 197 108.0 -> 103.8; 501 and 513 packs lost at 33-66 MB (bfloat16 8192
// x 2052 20.3 -> 25.8; float32 16384 x 1002 22.7 -> 30.1). 4 rows of packs a round instead of 8
// were 0-7% slower; fewer rows of threads slower still. With the last block of the one launch
// folding the partials (until session 55) float32 was even or slower from 10 to 103 MB. With the
// second launch (h200_study/session55_columns.txt, section 3), time of the call's kernels, us, the
// rule before -> packed: float32 sums 16384 x 77 (5 MB) 6.86 -> 6.05, 8192 x 197 6.67 -> 6.53,
// 32768 x 77 8.38 -> 7.47, 16384 x 197 8.72 -> 8.32, 65536 x 77 10.59 -> 10.78 (the one loss;
// back to back in a CUDA graph 8.70 -> 8.39), 32768 x 197 13.39 -> 11.17, 131072 x 77 15.63 ->
// 15.09, 262144 x 77 26.45 -> 23.62, 131072 x 197 30.46 -> 28.40; float32 amaxes 0.6-2.3 us
// faster in all 9; bfloat16 sums 24576 x 77 (3.8 MB) 7.18 -> 5.63, 32768 x 77 7.30 -> 5.90,
// 12288 x 197 7.49 -> 5.98. Under 3.5 MB the row groups' two launches stayed ahead in CUDA graphs
// (bfloat16 16384 x 77, 2.5 MB: 4.05 against 4.79 us a call). REDUCE_OPS_COLS_PACKED=on takes it
// wherever it applies, =off never.
// The block's shape (h200_study/session77.txt, calls 2-4): until session 77 up to 8 rows of
// threads loading 8 rows of packs each (616 threads at 77 float32 columns, 788 at 197, 24 at 3);
// now the fewest rows of threads that make 128 threads (2 rows at 77 columns, 1 at 197, 64 at 3),
// each loading a round of 16 rows of packs (40-120 registers, no spills): half the threads for
// the same bytes a round, and fewer rows of threads to fold. ptxas does not put all 16 loads in
// flight together everywhere (float32 amax: 4 at a time; session77.txt section 10). H200, 20 calls back to
// back in a CUDA graph, us a call, before -> after (torch.compile): float32 sums 65536 x 77 10.00
// -> 9.66 (9.05), 32768 x 197 11.26 -> 10.49 (10.26), 16384 x 77 6.29 -> 5.91 (5.04), 8192 x 197
// 6.79 -> 6.10 (5.28), 131072 x 197 28.99 -> 28.13, 1048576 x 3 12.29 -> 7.91 (12.12), 16384 x
// 255 9.25 -> 8.56 (7.89); bfloat16 sums 65536 x 77 7.52 -> 6.95 (7.27), 32768 x 197 8.36 -> 7.50
// (7.73), 2097152 x 77 77.13 -> 75.99; bfloat16 amax 1048576 x 6 12.33 -> 7.99; all 24 cases
// faster. 64 or 256 threads, and 2 rows of threads at any width, lost some; 8 rows of packs with
// 128 threads was within 2% either way but for the largest (131072 x 197 28.83, 2097152 x 77
// 77.47). Eager single calls after an L2 flush (bench.py's timer) move less and both ways: 15 of
// 24 faster, by up to 5.1 us (1048576 x 6), 8 slower by 0.2-1.0 us (bfloat16 amax 32768 x 197
// 11.01 -> 11.97, 131072 x 50 10.72 -> 11.33), their rounds moving by up to 1.1 us between runs.
// With that block the packed kernel beats the row groups' two launches (and their full-width and
// one-element kernels) from 3 MB (session77.txt, calls 6-7), us, CUDA graph (eager), row groups ->
// packed: float32 sums 11264 x 77 (3.5 MB) 7.35 -> 5.32 (12.16 -> 8.10), 4096 x 197 (3.2 MB) 5.73
// -> 5.34 (9.70 -> 9.15), 65536 x 13 7.52 -> 5.51; bfloat16 sums 22528 x 77 6.93 -> 5.52 (11.62 ->
// 8.48), 8192 x 197 5.56 -> 5.37; float16 amax 8192 x 197 5.56 -> 5.18; the float32 amax of 4096 x
// 197 lost in the graph (5.34 -> 6.00; eager 9.86 -> 8.93). From 2 to 3 MB it won eager launches
// but lost in graphs more often than not (bfloat16 sums 13624 x 77 and 16384 x 77 4.83 -> 5.20 and
// 5.06 -> 5.28, float32 2800 x 197 5.33 -> 5.69, amax 8192 x 77 4.91 -> 5.95), and under 2 MB
// (call 6) mostly both, but on narrow groups (float32 16384 x 13, 0.9 MB: 6.62 -> 5.02).
constexpr int kPackedRound = 4 * kColsRound;
constexpr int kPackedMinThreads = 128;
constexpr int64_t kPackedBlocksPerSM = 4;

// A packed launch's block (launch_cols_packed and its short rounds): a thread a pack across, rows
// of threads down to kPackedMinThreads threads, within the kernel's registers and 48 KB of the
// folds' shared memory (a kVec-wide accumulator a thread), with that shared memory. Nothing
// where a row group has more packs than that.
struct PackedBlock {
  ColsLaunch l;
  size_t smem;
};

template <typename Acc, int64_t kVec, typename Kernel>
std::optional<PackedBlock> packed_block(Kernel kernel, int64_t packs) {
  const int max_threads = std::min<int>(max_block_threads(kernel), (48 << 10) / (kVec * sizeof(Acc)));
  if (packs > max_threads) return std::nullopt;
  ColsLaunch l{static_cast<int>(packs), 1};
  while (l.bx * l.by < kPackedMinThreads && l.bx * l.by * 2 <= max_threads) l.by *= 2;
  return PackedBlock{l, static_cast<size_t>(l.bx) * l.by * kVec * sizeof(Acc)};
}

// launch_cols_packed's short rounds on reduce_cols_packed_small_kernel: the same block shape and
// segments (a block and a round of kColsRound rows of packs a segment where the blocks fit; more
// rounds a segment past kPackedBlocksPerSM blocks an SM), 32-bit indices, one work item a block,
// one barrier to fold. The lanes that fold a column: the most (up to 32, a power of two) that leave
// a group of lanes for each column, at most the column's values. False where it does not apply
// (indices past 32 bits, more than 65535 outer indices: the grid's y; one segment), which
// launch_cols_packed then reduces on kPackedRound's rounds. Until session 120 these rounds ran on
// reduce_cols_kernel<..., kColsRound>, whose blocks spent a third of their time in a 64-bit
// prologue (~230 instructions before the first load) and most of the rest in the fold tree of their
// rows of threads and its barriers, not in memory (Nsight Compute, float32 16384 x 3: 3989 cycles a
// block against Inductor's 848; h200_study/session120.txt, call 1). H200, CUDA graph, us, before ->
// this kernel (torch.compile), out of sample (call 4): float32 sums 16384 x 3 4.82 -> 3.97 (3.21),
// 20000 x 7 4.78 -> 4.21 (3.61), 50000 x 11 5.34 -> 4.78 (4.17), 12000 x 29 5.08 -> 4.56 (3.91);
// amaxes 16384 x 3 4.17 -> 3.59 (3.30), 65536 x 5 4.42 -> 4.03 (3.99); bfloat16 131072 x 6 sum 4.80
// -> 4.11 (4.10), 40000 x 18 4.75 -> 4.23 (3.98); float16 60000 x 10 sum 4.66 -> 4.07 (3.95): all
// 28 cases 0.82-0.97x of the old time. Blocks of at least 64 or 32 threads (more, smaller blocks)
// were within 5% either way (call 2).
//
// It takes the packed launches under kPackedSmallMaxBytes (3 MiB and past the few kernel's reach
// until session 121; in the reach amaxes and 16-bit sums since session 122, float32 sums since
// session 123: kRowGroupsFewSmallMax), where the kPackedRound kernel's longer rounds no longer pay
// for its prologue and fold. H200, CUDA graph, us, kPackedRound -> this kernel (torch.compile),
// unaligned columns over dim 0 (h200_study/session121.txt, calls 1-2): float32 sums 65536 x 13 (3.4
// MB) 5.47 -> 5.03 (4.51), 100000 x 11 6.17 -> 5.50 (4.91), 20000 x 77 6.43 -> 5.84 (5.40), 65536 x
// 77 (20 MB) 9.77 -> 8.98 (9.03), amaxes 65536 x 13 6.18 -> 4.77 (4.70), 16384 x 197 7.80 -> 7.17
// (7.24); bfloat16 sums 262144 x 6 5.66 -> 4.67 (5.26), 131072 x 14 5.71 -> 4.87 (4.86), 65536 x 77
// 6.95 -> 6.49 (7.25), amaxes 262144 x 6 6.45 -> 4.86 (5.35), 65536 x 50 6.84 -> 6.06 (6.45);
// float16 amax 131072 x 14 6.46 -> 5.06 (5.15): 3-26 MB, 0.75-1.01x of the time but for bfloat16
// sums of 197 columns (32768 x 197 7.52 -> 7.78, 65536 x 197 10.39 -> 10.76; float16 32768 x 197
// 7.99 -> 7.77). Past 32 MiB within 4% either way (float32 1048576 x 13 sum 17.18 -> 16.83, 4194304
// x 11 45.79 -> 46.27; bfloat16 4194304 x 6 16.21 -> 15.52, 1048576 x 50 28.33 -> 29.13, 262144 x
// 197 28.37 -> 28.93), where the kPackedRound kernel stays. Compensated sums fold their block's
// finished floats plain since session 123 (TreeReducer; reduce.cuh's PackedSmallArgs), float
// partials folded compensated (fold_partial_words_kernel): H200, CUDA graph, us, float32 sums, the
// compensated fold -> floats (torch.compile; h200_study/session123.txt, call 2): 16384 x 3 3.90 ->
// 3.77 (3.43), 20000 x 7 4.20 -> 3.81 (3.61), 50000 x 11 4.78 -> 4.55 (4.17), 65536 x 13 5.08 ->
// 4.86 (4.51), 12000 x 29 4.59 -> 4.35 (3.92), 40000 x 21 5.32 -> 5.03 (4.55), 20000 x 77 5.82 ->
// 5.54 (5.36); REDUCE_OPS_SUM=plain 3.52-5.38 there. Compensated throughout, the errors of hard
// inputs (test_compensated_cuda_sum_error_is_a_few_ulps_of_abs_sum's) were at most 0.9 u sum|x|,
// folding floats 1.8 u, torch.sum 2.5 u (call 2).
constexpr int64_t kPackedSmallMaxBytes = int64_t{32} << 20;

template <typename In, typename Out, typename R>
bool launch_cols_packed_small(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, int64_t groups,
                              int64_t packs, const R& r, cudaStream_t stream) {
  using Acc = typename TreeReducer<R>::type::Acc;  // the block's values and partials (finished floats)
  constexpr int64_t kVec = kMaxVec<In>;
  const int64_t rows = g.reduced / groups, wide = g.inner * groups;
  if (g.outer > 65535 || (g.outer - 1) * g.outer_stride + rows * wide > INT32_MAX) return false;
  const auto kernel = reduce_cols_packed_small_kernel<In, R, kVec>;
  const std::optional<PackedBlock> block = packed_block<Acc, kVec>(kernel, packs);
  if (!block) return false;
  const ColsLaunch l = block->l;
  const size_t smem = block->smem;
  ColsArgs a{g.outer, rows, wide, g.outer_stride, wide, 1, 1, rows, 1, 1, 1};
  split_one_tile(kernel, a, l, smem, static_cast<int64_t>(l.by) * kColsRound, kPackedBlocksPerSM);
  if (a.splits == 1) return false;  // one segment: the kPackedRound kernel, which needs no partials
  constexpr int64_t kW = kPartialsPerWord<Acc>;
  const int64_t padded = ceil_div(g.inner, kW) * kW;
  const int64_t threads = static_cast<int64_t>(l.bx) * l.by, values = l.by * groups;
  int lanes_log2 = 0, groups_log2 = 0;
  while (lanes_log2 < 5 && (int64_t{2} << lanes_log2) * padded <= threads && (int64_t{2} << lanes_log2) <= values) {
    ++lanes_log2;
  }
  while ((int64_t{1} << groups_log2) < groups) ++groups_log2;  // groups: a power of two (kVec / gcd)
  const PackedSmallArgs args{static_cast<int>(rows),    static_cast<int>(a.chunk), static_cast<int>(g.outer_stride),
                             static_cast<int>(g.inner), static_cast<int>(padded), groups_log2, lanes_log2};
  at::Tensor partial;
  Acc* partials = partials_scratch<Acc>(a.splits * g.outer * padded, xt.options(), partial);
  kernel<<<dim3(static_cast<unsigned>(a.splits), static_cast<unsigned>(g.outer)), dim3(l.bx, l.by), smem, stream>>>(
      xt.const_data_ptr<In>(), partials, args, r);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_fold_partial_words<Out>(static_cast<const Acc*>(partials), out_t.mutable_data_ptr<Out>(), a.splits,
                                 g.outer * padded, static_cast<int>(g.inner), static_cast<int>(padded),
                                 g.outer * (padded / kW), r, stream, /*few_words_a_warp=*/true);
  return true;
}

template <typename In, typename Out, typename R>
bool launch_cols_packed(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                        cudaStream_t stream) {
  using Acc = typename R::Acc;
  constexpr int64_t kVec = kMaxVec<In>;
  const int64_t groups = row_groups_of(xt.const_data_ptr<In>(), g);
  const int64_t packs = g.inner * groups / kVec;  // a row group's packs: one thread each
  if (groups == 1 || packs > 1024) return false;
  const int64_t bytes = cols_input_bytes<In>(g);
  // Past the few kernel's reach (three launches of row groups) at any size, and in it past
  // kRowGroupsFewMaxBytes, amaxes and 16-bit sums kRowGroupsFewSmallMaxBytes
  // (row_groups_keep_two_launches).
  const bool faster = packs <= kPackedAutoPacks && (sizeof(In) <= 4
                                                        ? !row_groups_keep_two_launches<In, R>(g, groups, packs)
                                                        : bytes >= kRowGroupsLargeBytes);
  // One getenv, as launch_cols_row_groups.
  if (faster ? env_equals("REDUCE_OPS_COLS_PACKED", "off") : !env_equals("REDUCE_OPS_COLS_PACKED", "on")) {
    return false;
  }
  // The small kernel under kPackedSmallMaxBytes.
  if (bytes < kPackedSmallMaxBytes && launch_cols_packed_small<In, Out>(xt, g, out_t, groups, packs, r, stream)) {
    return true;
  }
  const auto kernel = reduce_cols_kernel<In, Out, R, kVec, kPackedRound>;
  const std::optional<PackedBlock> block = packed_block<Acc, kVec>(kernel, packs);
  if (!block) return false;
  const ColsLaunch l = block->l;
  const size_t smem = block->smem;
  const int64_t rows = g.reduced / groups, cols = g.inner * groups;
  ColsArgs a{g.outer, rows, cols, g.outer_stride, cols, 1, 1, rows, 1, 1, 1};
  a.group_cols = g.inner;
  a.row_gap = l.by * a.reduced_stride;
  split_one_tile(kernel, a, l, smem, static_cast<int64_t>(l.by) * kPackedRound, kPackedBlocksPerSM);
  // With splits > 1, rows of partials (one a segment) of outer x padded values, folded by the
  // second launch.
  constexpr int64_t kW = kPartialsPerWord<Acc>;
  const int64_t padded = ceil_div(g.inner, kW) * kW, width = a.outer * padded;
  at::Tensor partial;
  ColsScratch<Acc> scratch{nullptr, nullptr};
  if (a.splits > 1) {
    scratch.partial = partials_scratch<Acc>(a.splits * width, xt.options(), partial);
  }
  Out* out = out_t.mutable_data_ptr<Out>();
  kernel<<<grid_for(a.splits * a.outer), dim3(l.bx, l.by), smem, stream>>>(xt.const_data_ptr<In>(), out, a, scratch, r);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (a.splits == 1) return true;
  launch_fold_partial_words<Out>(static_cast<const Acc*>(scratch.partial), out, a.splits, width,
                                 static_cast<int>(g.inner), static_cast<int>(padded), a.outer * (padded / kW), r, stream);
  return true;
}

// Columns: a block reading the whole reduced dim at once where one can and the blocks fit in one
// wave (reduce_cols_few_kernel; automatic only: any forced strategy skips it), else the
// latency-first plan while its blocks fit in one wave, else the streaming one
// (REDUCE_OPS_STRATEGY=stream forces it, =split forces its split).
template <typename In, typename Out, typename R>
void launch_cols(const at::Tensor& xt, const ReduceGeometry& g, const at::Tensor& out_t, const R& r,
                 cudaStream_t stream, const ForcedStrategy& forced) {
  using Acc = typename R::Acc;
  const In* x = xt.const_data_ptr<In>();
  Out* out = out_t.mutable_data_ptr<Out>();
  constexpr int kVec = kMaxVec<In>;
  const ColsArgs base{g.outer, g.reduced, g.inner, g.outer_stride, g.reduced_stride, g.inner_stride, 1, g.reduced, 1, 1, 1};
  const bool vectorize = base.inner_stride == 1 && base.inner % kVec == 0 && base.outer_stride % kVec == 0 &&
                         base.reduced_stride % kVec == 0 && is_aligned(x, 16) && is_aligned(out, sizeof(Out) * kVec);
  if (vectorize && !forced.any() && launch_cols_few(x, out, g, r, stream)) {
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  if (!vectorize && !forced.any() && launch_cols_packed<In, Out>(xt, g, out_t, r, stream)) return;
  if (!vectorize && !forced.any() && launch_cols_row_groups<In, Out>(xt, g, out_t, r, stream, forced)) return;
  if (!vectorize && !forced.any() && launch_cols_full_width<In, Out>(xt, g, out_t, r, stream)) return;
  const int vec = vectorize ? kVec : 1;
  const auto kernel = vectorize ? reduce_cols_kernel<In, Out, R, kVec> : reduce_cols_kernel<In, Out, R, 1>;
  const size_t smem_per_thread = sizeof(Acc) * vec;
  // The wave plan: one wave of the blocks the SMs hold at once (the kernel needs 34-56 registers,
  // 4-7 blocks of 256 threads per SM). H200, tune_cols.py: 8 blocks per SM (1.6 waves) made
  // bfloat16 sums over dim 0 12-24% slower, 4 per SM 5-24% slower (sessions 8-16). The streaming
  // plan splits for at most 4 an SM: fewer, longer segments, and fewer partials to fold. H200,
  // us, the SMs' occupancy -> 4 (h100_study/session45_cols.txt): float32 sum 65536 x 1024
  // 69.1 -> 67.1, 16384 x 4096 67.6 -> 65.8, 4096 x 32768 124.9 -> 123.2; bfloat16 sum
  // 65536 x 1024 38.7 -> 37.9; float32 amax 16384 x 4096 66.7 -> 65.2; no case slower; 3 an SM
  // lost at 4096 x 32768 (126.1). H100: float32 sum 65536 x 1024 97.2 -> 95.6, 16384 x 4096
  // 94.8 -> 93.5, bfloat16 amax 16384 x 4096 51.8 -> 51.0; 8192 x 2048 0.5-0.8% slower.
  const int64_t forced_blocks = env_positive("REDUCE_OPS_COLS_BLOCKS_PER_SM", 0);
  const int64_t occupancy = resident_blocks(kernel, kBlock, kBlock * smem_per_thread);
  const int64_t resident = sm_count() * (forced_blocks > 0 ? forced_blocks : occupancy);
  const int64_t stream_resident =
      sm_count() * (forced_blocks > 0 ? forced_blocks : std::min<int64_t>(occupancy, kColsStreamBlocksPerSM));
  std::optional<ColsPlan> plan;
  if (!forced.is("stream") && !forced.is("split")) {
    plan = wave_plan(base, vec, resident);
  }
  if (!plan) {
    const bool wide_16bit_elements = sizeof(In) == 2 && cols_input_bytes<In>(g) >= kWideElementTiles16BitBytes;
    const bool element_tiles_4rows = vec == 1 && (sizeof(In) == 2 || std::is_same_v<R, NeumaierReducer<float>>);
    plan = stream_plan(base, vec, stream_resident, sm_count() * occupancy, forced.is("split"), wide_16bit_elements,
                       element_tiles_4rows);
  }
  launch_cols_plan<In, Out>(kernel, xt, out_t, *plan, vec, r, stream);
}

}  // namespace
}  // namespace cuda

namespace cuda {
namespace {

// fn(reducer) with the reducer of `kind` for In -> Out.
template <typename In, typename Out, typename Fn>
void with_reducer(ReduceKind kind, const Fn& run) {
  using V = at::opmath_type<In>;
  if constexpr (sizeof(Out) < sizeof(In)) {
    // A staged sum's float32 partials into a float16 / bfloat16 result (ops.cpp): plain, as
    // every sum into such a result (below).
    TORCH_INTERNAL_ASSERT(kind == ReduceKind::kSum, "reduce_cuda: a narrowed result is a staged sum's");
    run(PlainReducer<SumOp<V>>{});
  } else if (kind == ReduceKind::kMax) {
    run(PlainReducer<MaxOp<V>>{});
  } else if constexpr (std::is_same_v<V, float>) {
    // Sums into a float32 result are compensated (float32 inputs, or 16-bit ones with
    // dtype=torch.float32). Sums into a float16 / bfloat16 result add plain floats, as torch's:
    // its final rounding (2^-9 or 2^-12 of the result) hides a float32 sum's error (~1e-6 of
    // sum |x| in scripts/accuracy_report.py) unless the sum cancels to ~1e-3 of sum |x|, and
    // there compensation cost more than the 2% issue 3 allows: H200, bfloat16 columns 442368 x
    // 128 39.5 vs 34.2 us, 65536 x 1024 43.2 vs 38.5 (h200_study/tune_reductions_session16.txt).
    // float64 sums are plain, as torch's. REDUCE_OPS_SUM=plain|compensated forces either.
    const bool compensated = env_equals("REDUCE_OPS_SUM", "compensated") ||
                             (!is_reduced_float_v<Out> && !env_equals("REDUCE_OPS_SUM", "plain"));
    if (compensated) run(NeumaierReducer<V>{});
    else run(PlainReducer<SumOp<V>>{});
  } else {
    run(PlainReducer<SumOp<V>>{});
  }
}

// The most elements a reduction over two groups of dims takes in one launch
// (REDUCE_OPS_TWO_GROUPS_MAX; 0: none, the binding stages them all), and the most values each
// output folds there (a block of 32 warps, 8 values a thread). H200, us a call in CUDA graphs,
// stages -> one launch (torch.compile; h200_study/session89.txt, section 8): float32 sums over
// (0, 2) of 8 x 16 x 32 3.27 -> 2.05 (1.87), of 16 x 256 x 256 (2^20) 4.86 -> 3.81 (2.98), over
// (0, 2, 3) of 32 x 64 x 7 x 7 3.94 -> 2.46 (2.32); bfloat16 16 x 256 x 256 4.00 -> 3.83; past
// 2^20 the block an output falls behind: 128 x 256 x 7 x 7 bfloat16 4.67 -> 5.48, 128 x 512 x 7 x
// 7 float32 7.16 -> 8.89.
// Those inputs take the short kernel or the runs kernel's one round first where those apply
// (launch_two_groups_runs, small; REDUCE_OPS_TWO_GROUPS_SMALL_RUNS=0 leaves them to the block an
// output): H200, us, CUDA graphs over copies past 256 MB, block -> short or one round (torch.compile;
// h200_study/session100.txt section 5b): float32 over (0, 2, 3) 32 x 2048 x 4 x 4 sum 5.30 -> 3.79
// (3.30), 4 x 1024 x 14 x 14 4.00 -> 3.33 (2.94), 7 x 4100 x 9 x 3 4.95 -> 3.45 (3.16), 64 x 256 x 8 x 8
// (one round) 4.38 -> 4.06 (3.29), over (0, 2) 8 x 2048 x 49 5.48 -> 3.34 (3.06), 60 x 700 x 6 3.43 ->
// 2.74 (2.59); bfloat16 32 x 2048 x 4 x 4 5.51 -> 3.33 (2.90), 8 x 512 x 14 x 14 4.17 -> 3.46 (2.51), 30 x
// 500 x 69 (one round) 5.45 -> 4.11 (3.11); 1.05-1.72x, but 64 x 256 x 7 x 7 bfloat16's sum 4.01 -> 4.31
// (amax even) and 2 x 512 x 32 x 32 float32's amax 4.34 -> 4.48 (by elements then; 16-byte packs now).
constexpr int64_t kTwoGroupsMaxElements = int64_t{1} << 20;
constexpr int64_t kTwoGroupsMaxPerOutput = 32 * kWarpSize * 8;

// reduce_two_groups_kernel, a block an output of the warps that give each thread 8 values.
template <typename In, typename Out, typename R>
void launch_two_groups(const at::Tensor& xt, const TwoGroupsGeometry& g, const at::Tensor& out_t, const R&,
                       cudaStream_t stream) {
  using Tree = typename TreeReducer<R>::type;  // at most 8192 values an output: a tree of depth <= 13
  constexpr int kPer = 8;
  TwoGroupsArgs a{g.inner, g.outer_stride, g.inner_stride, g.q_stride, g.m_stride, static_cast<int>(g.qs),
                  static_cast<int>(g.ms), 0, 0};
  const auto launch = [&](auto warps_tag) {
    constexpr int kThreads = decltype(warps_tag)::value * kWarpSize;
    a.q_step = kThreads / a.ms;
    a.m_step = kThreads % a.ms;
    reduce_two_groups_kernel<In, Out, Tree, decltype(warps_tag)::value, kPer>
        <<<g.outer * g.inner, kThreads, 0, stream>>>(xt.const_data_ptr<In>(), out_t.mutable_data_ptr<Out>(), a, Tree{});
  };
  const int64_t n = g.qs * g.ms;
  if (n <= kPer * kWarpSize) return launch(Int<1>{});
  if (n <= kPer * 4 * kWarpSize) return launch(Int<4>{});
  if (n <= kPer * 8 * kWarpSize) return launch(Int<8>{});
  if (n <= kPer * 16 * kWarpSize) return launch(Int<16>{});
  launch(Int<32>{});
}

// The shortest runs the runs kernel reads (REDUCE_OPS_TWO_GROUPS_RUN_BYTES; 0: none, the binding
// stages them; shorter ones are staged): a run of a few sectors wastes the parts of its first and
// last sectors it does not use. At 128 bytes the runs still won (H200, events, us, stages -> runs:
// 512 x 64 x 32 float32 over (0, 2) sum 8.80 -> 7.97, amax 8.19 -> 7.74; session90.txt, section
// 3). Shorter runs of at least 4 elements in rows of at most 256 x 32 elements take the short kernel or
// the one round by elements (reduce_two_groups_cuda; REDUCE_OPS_TWO_GROUPS_SHORT_RUNS=0 leaves them to
// the stages). H200, us, CUDA graphs over copies past 256 MB, stages -> now (torch.compile;
// h200_study/session100.txt sections 1-2): float32 over (0, 2, 3) 64 x 1024 x 5 x 5 6.09 -> 4.43 (4.01), 128 x
// 1024 x 3 x 3 6.34 -> 4.69 (4.00), 256 x 1024 x 5 x 5 13.49 -> 10.09 (9.65), 512 x 256 x 3 x 3 7.09 -> 4.73
// (4.19), over (0, 2) 256 x 512 x 20 10.16 -> 6.01 (5.05); amaxes alike: 1.29-1.79x.
constexpr int64_t kTwoGroupsMinRunBytes = 128;

// reduce_two_groups_runs_kernel, or false (launching nothing) where the stages read faster: runs of
// 16-bit elements that hold no whole 4-byte pack (odd lengths or starts: element by element, 2 bytes
// a load; 64 x 256 x 14 x 14 bfloat16 sum, before the narrow packs below, 8.61 -> 9.79 us, events)
// in rows past one round of 256 x 32 of them or on more outputs than the SMs hold 4 at a time (below),
// rows of less than one round of loads a thread (a block then holds too few loads for the SM's 4
// blocks: 64 x 1024 x 64 bfloat16, 512 packs a row, 5.67 -> 8.03 us in a CUDA graph;
// h200_study/session90.txt, section 3; those take launch_two_groups_short's kernel where it reads
// them faster, or narrower packs, or the one round by elements), and runs of 2^31 packs or more (the
// kernel keeps a pack's place in its run as an int). `small`: an input the block an output would
// take (launch_two_groups), launched here only by the short kernel or the one round (else false).
// The runs by the widest packs (16, 8 or 4 bytes) every run and output starts on and holds whole, 8 in
// flight a thread (64 registers and 4 blocks an SM for 16- and 8-byte packs, 32 and 8 for 4-byte ones),
// else element by element, 8 in flight (float64 4; 32 registers, 8 blocks); rows split as launch_rows
// splits few long rows (split_rows, segments of at least one round of loads and 16 KB, at most about
// kReduceSplitBlocks of them in all). H200, events, us, packs 4 -> 8 in flight (session90.txt,
// section 2): float32 sums over (0, 2) of 16 x 4096 x 1024 68.93 -> 62.91 (torch.compile 61.95), 64 x
// 512 x 2048 65.09 -> 63.97 (62.69), bfloat16 37.28 -> 34.03 (33.20) and 35.71 -> 34.46 (33.71); amaxes
// within 0.6%. A sum's fold after each round of loads is in the time a warp waits for the next round:
// with 4 packs it cost float32 sums up to 9% against amaxes, with 8 it does not (plain adds,
// REDUCE_OPS_SUM=plain, gained as much). 16 elements in flight lost (256 x 512 x 7 x 7 float32 sum 12.58
// -> 21.97).
// Narrow packs where 16-byte ones do not fit, against the stages (16-bit) or elements (float32)
// (section 7): bfloat16 sums over (0, 2, 3) of 64 x 256 x 14 x 14 8.86 -> 7.52 (torch.compile 8.35),
// 256 x 512 x 14 x 14 20.61 -> 18.72 (19.55), over (0, 2) of 128 x 256 x 98 9.06 -> 8.22; float32
// 128 x 256 x 98 11.14 -> 10.24, 1024 x 64 x 50 10.82 -> 9.86; amaxes alike but 256 x 1024 x 98
// (1.4% slower in both dtypes). Float32 runs by elements load 4 adjacent elements a thread, 2 such
// groups in flight (thread_reduce_runs_adjacent; below for where). H200, us, strided
// -> adjacent (torch.compile), session92.txt sections 2-5: sums by events, over (0, 2, 3) 256 x 512
// x 7 x 7 12.93 -> 12.38 (12.38), 512 x 512 x 7 x 7 19.14 -> 18.75 (18.50), over (0, 2) 256 x 1024
// x 49 (1024 items: 8 blocks an SM) 20.27 -> 19.39 (20.32), 1024 x 64 x 49 10.69 -> 10.40 (9.57);
// in CUDA graphs 128 x 512 x 7 x 7 7.04 -> 6.73 (5.38). Amaxes 3-4% faster alike (256 x 512 x 7 x
// 7 12.70 -> 12.16; graph 128 x 256 x 7 x 7 5.36 -> 5.19), 256 x 1024 x 49 19.87 -> 18.88, but
// only on 48 registers where the items allow: at 32 the compiler folded the first 4 loads before
// issuing the last 4 (5.36 -> 5.80). 2 adjacent x 4 groups, and the tail by the strided loads, lost.
// Both ops lost 1-5% where a segment's last round of 2048 elements is 45% to 7/8 full, and only there
// (session92.txt section 7: sums and amaxes of 19 shapes (N, 512, 7, 7) and (N, 256, 15, 15), last
// round 6-41% or 91% full 1.01-1.05x, 49-83% 0.95-1.00x): 64 x 512 x 7 x 7 sum 7.74 -> 8.16, 104 x
// 512 x 7 x 7 8.96 -> 9.12, 64 x 256 x 15 x 15 11.42 -> 11.65; those keep the strided loads.
// On the 4-block kernel the whole rounds are warp-uniform (thread_reduce_runs_adjacent): past half
// full, a warp's first threads took one more whole round and the rest the guarded one, and that
// warp ran both. H200, events, us, adjacency forced (REDUCE_OPS_RUNS_ADJACENT=1), per thread ->
// warp-uniform (session93.txt section 8): 80 x 512 x 7 x 7 sum 8.16 -> 7.84 (strided 8.19), amax
// 7.94 -> 7.65; 64 x 512 x 7 x 7 sum 8.06 -> 7.74 (7.62), amax 7.87 -> 7.42 (7.42); 48 x 256 x 15 x
// 15 amax 10.30 -> 9.89 (10.05); in CUDA graphs 64 x 512 x 7 x 7 amax 5.16 -> 4.73 (4.77). Inside the
// rule's band they are now within 0.98-1.02x of the strided loads; the rule stays (session94.txt
// section 2, 13 shapes: without it sums 0.979-1.019x, amaxes 0.996-1.032x). On the 8-block
// kernel amaxes lost 4% (256 x 1024 x 49 18.91 -> 19.65, 60 x 600 x 37 7.62 -> 7.97): per thread.
// Float32 runs by elements in one round (thread_reduce_runs_once, 16 loads a thread; 512 threads at first,
// session 94): torch.compile's kernel for these (Triton, its row length a constant, its loop unrolled)
// issues every load of a thread before the first add, one trip to memory, where rounds of 8 took 3-4; a
// CUDA copy of it with the loop left rolled was as slow as ours (session94.txt sections 6-8). H200, us,
// CUDA graphs, session 93's kernels -> one round (torch.compile): sums over (0, 2, 3) of 128 x 256 x 7 x 7
// 5.40 -> 4.82 (3.84), 160 x 256 x 7 x 7 5.69 -> 4.95 (4.91), 32 x 256 x 15 x 15 5.62 -> 4.89 (3.90), over
// (0, 2) of 300 x 7 x 49 (split in 4) 4.85 -> 4.60 (4.03); amaxes alike, 1.05-1.15x; by events 1.03-1.10x;
// 96 x 256 x 7 x 7 even. Past 2 items an SM (or forced there, REDUCE_OPS_RUNS_ONCE=1) it lost 7-30%: 64 x
// 512 x 7 x 7 4.99 -> 7.16, the 512-thread blocks taking a second wave. These small kernels wait on issue:
// a thread's place kept in 32 bits and its loads counted once (thread_reduce_runs_once) cut the
// instructions to the block's fold by a quarter (437 -> 327 in the amax's SASS) and gained 1.03-1.15x in
// graphs (128 x 256 x 7 x 7 sum 4.81 -> 4.44, 96 x 256 x 7 x 7 4.75 -> 4.16; session95.txt section 3), and
// so made 256 threads x 16 (4 blocks an SM) win where the segments hold at most 4096 elements, on every
// count of items measured, 2-124 an SM (sections 4-5, against the adjacent or strided kernels, graphs: 64
// x 512 x 7 x 7 sum 4.98 -> 4.37 (torch.compile 3.92), 48 x 512 x 7 x 7 4.66 -> 4.13, 60 x 600 x 37 amax
// 4.94 -> 4.19, 80 x 1536 x 7 x 7 amax 11.16 -> 8.48, 64 x 8192 x 7 x 7 sum 42.07 -> 34.55 (30.82), 48 x
// 16384 x 7 x 7 69.39 -> 64.88, 60 x 4800 x 37 21.08 -> 20.73; by events 1.04-1.11x, section 3), and over
// 512 x 16 at few items (300 x 7 x 49 4.39 -> 4.13).
// An unsplit one round's compensated sum folds plain (TreeReducer), a tree of at most 8192 values:
// the block's fold of Neumaier pairs cost 0.1-1.9 us. H200, float32 sums, us, CUDA graphs, compensated
// -> plain (torch.compile; session96.txt section 1): 128 x 256 x 7 x 7 4.45 -> 4.28 (3.80), 64 x 512 x 7
// x 7 4.36 -> 4.22 (3.94), 60 x 600 x 37 4.58 -> 4.21 (4.10), 64 x 2048 x 7 x 7 10.60 -> 9.65 (9.90), 64
// x 4096 x 7 x 7 18.74 -> 16.88 (17.02); 1.03-1.11x, by events 1.02-1.09x.
// Segments of 4097-8192 elements: one round of 256 threads x 32 loads (56 registers, 4 blocks an SM)
// where the items fit the SMs 4 at a time, in place of 512 x 16 (on up to 2 items an SM) and of the
// rounds of 16 below. H200, float32, us, CUDA graphs, before -> 256 x 32 (torch.compile; session96.txt
// section 7): over (0, 2, 3) 96 x 256 x 7 x 7 sum 3.99 -> 3.79 (3.45), 128 x 256 x 7 x 7 4.28 -> 4.14
// (3.81), 160 x 256 x 7 x 7 amax 4.69 -> 4.52 (5.33) (512 x 16 before, 1.03-1.05x); over (0, 2) 96 x 512
// x 49 sum 5.92 -> 5.05 (4.71), 128 x 320 x 49 5.12 -> 4.54 (4.20), 128 x 512 x 49 6.23 -> 5.73 (5.40)
// (rounds before, 1.01-1.17x); split segments (256 x 256 x 7 x 7, 1024 x 64 x 49, 2048 x 32 x 49)
// 1.00-1.02x, but 64 x 256 x 15 x 15's amax 0.88x (7.55 -> 8.61; 1.00x by events); by events
// 1.00-1.10x. Past 4 items an SM (two waves) the rounds' 5 blocks an SM won on split rows (300 x 200
// x 49, 600 items of 4928: 0.92-0.97x, sessions 96-97), and on segments of up to 4096 the 16-load
// round (60 x 600 x 37: 0.76-0.86x). On whole rows past 4 items an SM it won everywhere measured,
// 4.2-62 items an SM, against the rounds (4-5 an SM) and the adjacent or strided kernels (past 5).
// H200, float32, us, CUDA graphs, before -> 256 x 32 (torch.compile; session97.txt sections 1-2):
// over (0, 2) 100 x 560 x 49 sum 6.40 -> 5.72 (5.06), 128 x 600 x 49 7.04 -> 6.26 (5.94), 120 x 700
// x 37 7.05 -> 6.48 (5.47), 128 x 768 x 49 8.41 -> 7.24 (6.95), 160 x 1024 x 49 amax 11.44 -> 10.60
// (13.59), 160 x 2048 x 49 sum 21.10 -> 18.51 (21.92), 96 x 4096 x 49 27.30 -> 25.37 (21.56), 128 x
// 8192 x 49 amax 63.30 -> 54.58 (55.53); 1.03-1.16x, by events 1.02-1.17x.
// Segments of 4097-6144 take a round of 24 loads, not 32: on 4704-element rows 13 of the 32 slots
// were predicated off, each still issued with its place's update, and Nsight Compute found the
// kernel issuing 1.6x torch.compile's loads on half its warps an SM (56 registers against its 29;
// session97.txt section 8). 24 loads take 48 registers, 5 blocks an SM. H200, float32 over (0, 2),
// us, CUDA graphs, 32 -> 24 loads (torch.compile; session97.txt section 9): 96 x 4096 x 49 sum
// 24.92 -> 21.92 (21.41), amax 26.41 -> 22.37 (24.65); 120 x 700 x 37 sum 6.45 -> 5.75 (5.44); 100 x
// 560 x 49 amax 5.91 -> 5.31 (5.91); 96 x 2048 x 49 sum 13.91 -> 12.32 (12.36); 96 x 512 x 49 sum
// 5.06 -> 5.01 (4.73); 1.01-1.18x, by events 1.01-1.17x (whole rows; split segments of this size
// were not measured).
// Past 4096 elements the round is the fewest multiple of 4 loads that covers the segment (20, 24,
// 28 or 32; once_loads_for), where it was a multiple of 8 (24 or 32): a round of 20 holds 48
// registers as 24 does, 28 holds 52. H200, float32 over (0, 2), 24 -> 20 and 32 -> 28 loads
// (torch.compile; session98.txt section 5): CUDA graphs, 96 x 4096 x 49 sum 21.87 -> 21.25 (21.37),
// amax 22.30 -> 21.76 (24.63), 96 x 2048 x 49 amax 12.49 -> 12.32, 1024 x 64 x 49 sum 7.43 -> 7.33,
// 256 x 256 x 7 x 7 over (0, 2, 3) amax 7.21 -> 7.11; on the 22 cases that took 20 or 28, 0.99-1.03x
// in graphs and by events (no loss past 0.6%).
// Up to 4096 elements likewise 8 or 12 where they cover the segment, not 16 (12 holds 40 registers,
// as 16; 8 holds 36-40). H200, float32, us, 16 -> 12 loads (torch.compile; session98.txt section
// 7): CUDA graphs, 60 x 600 x 37 over (0, 2) sum 4.22 -> 4.09 (4.11), amax 4.20 -> 4.10 (4.50), 44 x
// 1024 x 49 amax 5.72 -> 5.62 (5.59), 48 x 512 x 7 x 7 over (0, 2, 3) even; 1.00-1.03x, by events
// too. Segments of at most 2048 take 8 only where forced (REDUCE_OPS_REDUCE_CHUNK): the runs kernel
// takes none shorter than a round of 2048 (launch_two_groups_runs; float32 rows shorter than that take
// launch_two_groups_short), nor splits into them.
constexpr int kOnceLoads = 16, kOnceFewestLoads = 8, kOnceWideLoads = 32, kOnceLoadsStep = 4;
// Threads an output of the 16-bit rows' one round where the outputs are at most kOnceWideItemsPerSM an
// SM (launch_two_groups_runs), as torch.compile's kernel for them: half the loads a thread. H200, us,
// CUDA graphs over copies past 256 MB, 256 -> 512 threads, the lesser of two rounds
// (h200_study/session102.txt, section 5): on 256 outputs (1.9 an SM), bfloat16 over (0, 2, 3) 160 x
// 256 x 7 x 7 sum 5.28 -> 4.67, amax 5.25 -> 4.58, 64 x 256 x 7 x 7 3.98 -> 3.80, 256 x 256 x 5 x 5
// 4.87 -> 4.57, 512 x 256 x 3 x 3 4.46 -> 4.19, float16 128 x 256 x 7 x 7 4.80 -> 4.54, over (0, 2)
// 48 x 256 x 65 3.98 -> 3.77; 1.03-1.15x but the bfloat16 128 x 256 x 7 x 7 sum, 4.44 -> 4.53. On
// more outputs it lost or came even: 300 (2.3 an SM) 80 x 300 x 49 4.14 -> 4.18 (120 x 300 x 67
// gained, 5.77 -> 5.33), 384 100 x 384 x 7 x 7 4.52 -> 4.75, 512 (section 4) 64 x 512 x 65 4.88 ->
// 5.61. Float32 rows lost everywhere (0.74-0.97x, section 4) and keep 256.
constexpr int kOnceWideBlockThreads = 512, kOnceWideItemsPerSM = 2;
int once_loads_for(int64_t chunk, int64_t threads = kRowsBlockThreads) {
  const int64_t loads = ceil_div(ceil_div(chunk, threads), int64_t{kOnceLoadsStep}) * kOnceLoadsStep;
  return static_cast<int>(std::clamp<int64_t>(loads, kOnceFewestLoads, kOnceWideLoads));
}
// Past the one round, rounds of 256 threads x 16 (kAdjacent -1: each round's 16 loads issued before
// its fold, a place in 32 bits) where a thread makes at most kRoundsMax of them (segments of up to
// 12288 elements) and the items fit the SMs 5 at a time (at 48 registers 5 blocks of 256 share an
// SM: one wave). H200, float32, us, CUDA graphs, the adjacent or strided kernels -> rounds
// (session96.txt sections 2-3): sums over (0, 2) of 128 x 512 x 49 6.78 -> 6.22, 160 x 512 x 49 7.46
// -> 6.70 (strided), 224 x 512 x 49 (3 rounds) 9.27 -> 8.48, 128 x 320 x 49 5.67 -> 5.10, 96 x 256 x
// 225 11.47 -> 10.64, 2048 x 32 x 49 9.08 -> 8.58, over (0, 2, 3) of 64 x 256 x 15 x 15 9.79 -> 8.81;
// amax 300 x 200 x 49 (4.5 items an SM) 9.43 -> 8.69; 1.01-1.11x (384 x 256 x 49's amax 0.98, by
// events 1.04), by events 1.01-1.09x; the 32-load round (above) took over their segments of up to
// 8192 on up to 4 items an SM (128 x 512 x 49 6.23 -> 5.73, 128 x 320 x 49 5.12 -> 4.54), and on
// whole rows at any count (128 x 600 x 49 7.04 -> 6.26): of those segments they keep split rows
// past 4 items an SM. At 4 rounds they lost 1-3% (256 x 512 x 7 x 7, 12544 values: sum 9.94 ->
// 10.05, amax 9.72 -> 10.00), at 7-10 were even (512 x 512 x 7 x 7, 1024 x 512 x 37: 0.99-1.01x); at
// 7.8 items an SM, two waves, lost 4-9% (256 x 1024 x 49 17.10 -> 18.61, 64 x 1024 x 225 18.07 ->
// 18.74).
// The runs of g in packs of vec elements, each row one segment (splits 1), a thread's step unset.
TwoGroupsRunsArgs runs_args(const TwoGroupsGeometry& g, int vec) {
  TwoGroupsRunsArgs a{};
  a.rows = g.outer * g.inner;
  a.inner = g.inner;
  a.outer_stride = g.outer_stride / vec;
  a.inner_stride = g.inner_stride / vec;
  a.q_stride = g.q_stride / vec;
  a.run_packs = static_cast<int>(g.ms / vec);
  a.row_packs = g.qs * a.run_packs;
  a.wrap_ptr = a.q_stride - a.run_packs;
  a.splits = 1;
  a.chunk = a.row_packs;
  return a;
}

// A thread's step of `stride` packs through a's runs: within a run, and in memory.
void set_runs_step(TwoGroupsRunsArgs& a, int64_t stride) {
  a.step_packs = static_cast<int>(stride % a.run_packs);
  a.step_ptr = (stride / a.run_packs) * a.q_stride + a.step_packs;
}

// Rows shorter than the short kernel's round of loads (2048 of them), past the block an output's 2^20
// elements (and below them, where launch_two_groups_runs takes them first): reduce_two_groups_short_kernel,
// one round of 8 loads a thread, by elements or by packs of vec elements (up to 16 bytes;
// launch_two_groups_runs says which), 32, 64, 128 or 256 threads an output (the fewest that cover the row),
// 8 blocks an SM (4 for packs past 8 bytes); where the row fills at least half its threads' round and the
// blocks fit the SMs kShortMaxBlocksPerSM at a time, else false (the caller's other paths, or the stages: a
// rows launch, then a columns one). Before,
// the stages took every such row at 0.68-0.74x torch.compile: the runs kernel's 8-load round in its place (a
// grid-stride loop, 36 registers: 6 blocks an SM) gained 1.03-1.13x where it lost nothing (1024 outputs), on 32
// registers 1.12-1.31x, still 0.77-0.93x torch.compile. H200, float32, us, CUDA graphs, stages -> short
// (torch.compile; h200_study/session99.txt sections 1-4): sums over (0, 2) of 32 x 1024 x 49 5.57 -> 4.04 (4.02),
// 20 x 2049 x 37 (128 threads) 6.41 -> 3.95 (3.81), 4 x 8192 x 49 (32) 5.48 -> 3.88 (3.65), 8 x 4096 x 40 (64)
// 4.90 -> 3.86 (3.28), 48 x 2048 x 33 7.71 -> 6.15 (6.08), over (0, 2, 3) of 8 x 1024 x 14 x 14 5.39 -> 4.00
// (3.70), 16 x 2048 x 7 x 7 (128) 5.56 -> 4.01 (3.80), 32 x 2048 x 7 x 7 (2048 blocks) 7.08 -> 6.12 (6.21); amaxes
// alike: 1.09-1.62x on 768-2048 blocks (up to 15.5 an SM), by events 1.08-1.50x. At 31 blocks an SM 0.90-1.02x (by
// events 0.98-1.13), at 62 0.88-0.98x (16 x 16384 x 7 x 7, 32 x 8192 x 7 x 7); rows of 98 on 32 threads (38% full)
// 0.98-1.00x, 2 x 65536 x 60 (120 on 32, 62 an SM) 0.68x. REDUCE_OPS_RUNS_SHORT: 0 never, 1 wherever the rows are
// shorter than the round (the rows' runs within 2^31 elements), 2 (default) by the rule.
// Pairs, and 16-bit rows (the stages before): H200, us, CUDA graphs over copies of the input past 256 MB,
// before -> now (torch.compile; h200_study/session100.txt sections 2, 4, 5a): bfloat16 over (0, 2, 3) 8 x 1024 x 14
// x 14 sum 5.25 -> 3.70 (3.28) (by elements 4.39), amax 5.64 -> 3.97 (3.86), 16 x 1024 x 14 x 14 6.26 -> 4.73
// (4.70), over (0, 2) 4 x 2048 x 200 5.02 -> 3.62 (3.22) (elements 4.47), 64 x 1024 x 32 5.07 -> 4.15 (3.62);
// float16 8 x 1024 x 14 x 14 5.29 -> 3.68 (3.29); 1.18-1.46x; by elements, runs of odd length or under 128
// bytes: bfloat16 16 x 1024 x 65 5.05 -> 4.29 (3.16), 32 x 1024 x 7 x 7 4.61 -> 4.38 (3.62), 16 x 2048 x 7 x 7
// 4.54 -> 4.29 (3.66). Float32, elements -> pairs: 8 x 4096 x 40 4.41 -> 4.11 (3.59), 64 x 1024 x 32 (the one
// round by elements before) 5.84 -> 4.96 (4.50), 32 x 1024 x 8 x 8 5.45 -> 4.67 (4.58), 12 x 1024 x 14 x 14
// 6.47 -> 5.61 (5.16), 16 x 1024 x 14 x 14 6.42 -> 5.99 (5.73); 1.06-1.19x, but 8 x 1024 x 14 x 14's sum 4.22 ->
// 4.53 (amax even; elements measured 4.59-4.69 in two other runs).
// Packs of up to 16 bytes, the widest of which an output holds at least 128 (REDUCE_OPS_RUNS_SHORT_PACK: the
// most elements a load; 2 kept pairs): pairs -> widest (torch.compile; session100.txt section 8): bfloat16
// over (0, 2, 3) 32 x 512 x 14 x 14 (8-byte, the runs kernel's 4-byte packs before) 6.02 -> 4.66 (4.14), 24 x
// 1024 x 14 x 14 (the stages before) 7.87 -> 5.68 (5.75), 12 x 512 x 28 x 28 (16-byte; 8-byte packs before)
// 6.50 -> 5.10 (5.09), 16 x 512 x 28 x 28 6.93 -> 6.14 (6.74), 16 x 1024 x 14 x 14 4.83 -> 4.40 (4.92), over
// (0, 2) 64 x 1024 x 32 4.15 -> 3.86 (3.63); float32 12 x 1024 x 14 x 14 5.52 -> 4.93 (5.20), 32 x 1024 x 8 x
// 8 4.93 -> 4.59 (4.25), 400 x 512 x 20 (the one round by elements before) 7.88 -> 7.43 (6.92); geomean
// 1.07x on 23 shapes' sums and amaxes, 0.94-1.39x (24 x 1024 x 14 x 14 float32's sum 0.94x, its amax 1.01x;
// 32 x 1024 x 8 x 8's amax 0.95x, its sum 1.07x). Packs past 8 bytes take 4 blocks an SM (up to 44
// registers), the rest 8.
constexpr int kShortMaxBlocksPerSM = 16;
template <typename In, typename Out, typename R>
bool launch_two_groups_short(const at::Tensor& xt, const TwoGroupsGeometry& g, const at::Tensor& out_t, const R& r,
                             cudaStream_t stream, int vec = 1) {
  const int64_t row = g.qs * g.ms / vec, rows = g.outer * g.inner;
  const int threads = row > 1024 ? 256 : row > 512 ? 128 : row > 256 ? 64 : 32;
  const int64_t blocks = ceil_div(rows * threads, int64_t{kRowsBlockThreads});
  if (g.ms < 4 || (g.qs - 1) * g.q_stride + g.ms > INT32_MAX || blocks > INT32_MAX) return false;
  const int64_t knob = env_nonnegative("REDUCE_OPS_RUNS_SHORT", 2);
  const bool rule = 2 * row >= threads * kShortLoads && blocks <= kShortMaxBlocksPerSM * sm_count();
  if (knob == 0 || (knob == 2 && !rule)) return false;
  TwoGroupsRunsArgs a = runs_args(g, vec);
  set_runs_step(a, threads);
  using Tree = typename TreeReducer<R>::type;  // at most 2048 values an output: a plain tree
  Tree tree{};
  if constexpr (std::is_same_v<Tree, R>) tree = r;
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kRowsBlockThreads, 0, stream>>>(xt.const_data_ptr<In>(),
                                                                             out_t.mutable_data_ptr<Out>(), a, tree);
  };
  const auto by_threads = [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    switch (threads) {
      case 32: launch(reduce_two_groups_short_kernel<In, Out, Tree, 32, kVec>); break;
      case 64: launch(reduce_two_groups_short_kernel<In, Out, Tree, 64, kVec>); break;
      case 128: launch(reduce_two_groups_short_kernel<In, Out, Tree, 128, kVec>); break;
      default: launch(reduce_two_groups_short_kernel<In, Out, Tree, 256, kVec>);
    }
  };
  if constexpr (sizeof(In) <= 4) {
    if (vec == 2) {
      by_threads(Int<2>{});
      return true;
    }
    if (vec == 4) {
      by_threads(Int<4>{});
      return true;
    }
  }
  if constexpr (sizeof(In) == 2) {
    if (vec == 8) {
      by_threads(Int<8>{});
      return true;
    }
  }
  by_threads(Int<1>{});
  return true;
}

constexpr int kRoundsMax = 3, kRoundsMaxItemsPerSM = 5;
template <typename In, typename Out, typename R>
bool launch_two_groups_runs(const at::Tensor& xt, const TwoGroupsGeometry& g, const at::Tensor& out_t, const R& r,
                            cudaStream_t stream, bool small) {
  using Acc = typename R::Acc;
  constexpr int kVec = kMaxVec<In>;
  constexpr int kScalars = sizeof(In) == 8 ? 4 : 8;  // float64: 8 spilled at 32 registers
  const In* x = xt.const_data_ptr<In>();
  // The widest pack (kVec, kVec / 2, ... elements) every run and output starts on and holds whole.
  constexpr uint64_t kBytes = sizeof(In);
  int vec = static_cast<int>(std::max<int64_t>(
      1, widest_pack_bytes({reinterpret_cast<uintptr_t>(x), g.ms * kBytes, g.q_stride * kBytes,
                            g.outer_stride * kBytes, g.inner_stride * kBytes}) / static_cast<int64_t>(kBytes)));
  const int64_t row = g.qs * g.ms, rows = g.outer * g.inner;
  constexpr int64_t kShortRow = kRowsBlockThreads * kShortLoads;  // the short kernel takes rows of fewer loads
  constexpr int64_t kPackRound = kRowsBlockThreads * 8;           // a round of packs: 8 a thread
  bool elements16 = false;  // 16-bit rows by elements in the one round
  // The short kernel's loads for rows whose runs hold packs of v elements: the widest pack (up to v, and
  // to REDUCE_OPS_RUNS_SHORT_PACK elements) of which the row holds at least 128 (its rule wants half of a
  // warp's round), where it holds less than a round of those; else elements where it holds less than a
  // round of those; 0: not the short kernel.
  const auto short_loads = [&](int v) {
    int64_t most = 1;  // the widest load the knob allows, in elements
    if (v >= 2 && row / v < kShortRow && row / 2 >= kShortRow / 16) {
      most = env_nonnegative("REDUCE_OPS_RUNS_SHORT_PACK", v);
    }
    for (int w = static_cast<int>(std::min<int64_t>(most, v)); w >= 2; w /= 2) {
      if (row / w >= kShortRow / 16) return row / w < kShortRow ? w : 0;
    }
    return row < kShortRow ? 1 : 0;
  };
  // The short kernel takes its rows first; where its rule refuses one, the paths below.
  // Float32 rows of packs shorter than a round of packs (256 x 8) but not than one of elements (256 x
  // 8), by elements, where the stages took them before (REDUCE_OPS_RUNS_ELEMENTS=0 leaves them there).
  // H200, us, CUDA graphs, stages -> elements (torch.compile; h200_study/session99.txt section 7): over
  // (0, 2, 3) 16 x 1024 x 14 x 14 sum 6.95 -> 5.97 (5.54), 8 x 512 x 28 x 28 9.25 -> 5.57 (5.05), 32 x
  // 1024 x 14 x 14 9.84 -> 8.57 (8.22), 16 x 2048 x 14 x 14 9.83 -> 9.44 (8.65), 64 x 512 x 8 x 8 5.74
  // -> 4.64 (4.00); over (0, 2) 64 x 1024 x 32 5.72 -> 5.19 (4.12), 96 x 1024 x 42 (8-byte packs) 8.25
  // -> 6.67 (6.21); amaxes alike: 1.03-1.70x, by events 1.07-1.56x.
  // Since the short kernel's packs, that is where it refuses a row (or the knobs keep it out).
  if constexpr (sizeof(In) == 4) {
    const int short_vec = short_loads(vec);
    if (short_vec > 0 && launch_two_groups_short<In, Out>(xt, g, out_t, r, stream, short_vec)) return true;
    if (vec > 1 && row / vec < kPackRound && env_nonnegative("REDUCE_OPS_RUNS_ELEMENTS", 1) != 0) vec = 1;
  }
  // 16-bit rows short of a round of their widest packs (REDUCE_OPS_RUNS_16=0 leaves them to the
  // stages): the short kernel (above), else narrower packs where a round of those fits the row (4-byte
  // ones only where the rows fit the SMs 4 at a time), else by elements in the one round where the row
  // holds 2048 to 256 x 32 elements and the rows fit the SMs 4 at a time. Measured before the short
  // kernel took packs of up to 16 bytes (it now takes these rows but where its rule refuses them): H200,
  // us, CUDA graphs over copies past 256 MB, stages -> now (torch.compile; h200_study/session100.txt
  // sections 1, 2 and 4): bfloat16 over (0, 2, 3), 8-byte packs, 32 x 1024 x 16 x 16 sum 8.95 -> 7.52 (6.55), 16
  // x 512 x 28 x 28 8.25 -> 7.13 (6.80); 4-byte, 32 x 512 x 14 x 14 7.04 -> 5.96 (4.13), float16 6.63 ->
  // 5.56 (3.97); by elements, over (0, 2) 64 x 512 x 65 6.51 -> 5.22 (4.01), 120 x 300 x 67 amax 7.05 ->
  // 5.94 (5.51), over (0, 2, 3) 64 x 512 x 7 x 7 5.10 -> 4.89 (3.56), 128 x 256 x 7 x 7 5.23 -> 4.88 (3.82);
  // amaxes alike, 1.00-1.28x. On 1024 outputs 4-byte packs lost (24 x 1024 x 14 x 14 7.54 -> 8.58), as
  // did the one round by elements (16 x 1024 x 14 x 14 6.76 -> 7.32, 32 x 1024 x 16 x 16 9.05 -> 11.28);
  // 8-byte packs won there (above).
  if constexpr (sizeof(In) == 2) {
    if ((vec == 1 || row / vec < kPackRound) && env_nonnegative("REDUCE_OPS_RUNS_16", 1) != 0) {
      const int short_vec = short_loads(vec);
      if (short_vec > 0 && launch_two_groups_short<In, Out>(xt, g, out_t, r, stream, short_vec)) return true;
      while (vec > 2 && row / vec < kPackRound) vec /= 2;
      if (vec == 2 && row / 2 >= kPackRound) {
        if (rows > 4 * sm_count()) return false;
      } else if (vec <= 2) {  // no pack's round fits the row
        if (row < kShortRow || row > kRowsBlockThreads * kOnceWideLoads || rows > 4 * sm_count()) return false;
        vec = 1;
        elements16 = true;
      }
    }
  }
  const bool packed = vec > 1;
  const int64_t round = kRowsBlockThreads * static_cast<int64_t>(packed ? 8 : kScalars);
  if ((vec * sizeof(In) < 4 && !elements16) || g.qs * g.ms / vec < round || g.ms / vec > INT32_MAX) return false;
  TwoGroupsRunsArgs a = runs_args(g, vec);
  const int64_t bytes = a.rows * g.qs * g.ms * static_cast<int64_t>(sizeof(In));
  const int64_t min_chunk = std::max(round, min_split_chunk<In>(bytes) / vec);
  if (!small && a.rows <= kMaxCounters && a.row_packs >= 2 * min_chunk) {
    const RowSplit plan = split_rows(a.rows, a.row_packs, min_chunk);
    a.splits = plan.splits;
    a.chunk = plan.chunk;
  }
  const int64_t items = a.rows * a.splits;  // the kernel's blocks' work: a segment each
  at::Tensor slots_owned, graph_owned;
  Slot* slots = nullptr;
  unsigned* counters = nullptr;
  if (a.splits > 1) {
    slots = zeroed_slots(items * kSlotWords<Acc>, xt, stream, slots_owned);
    counters = zeroed_counters(a.rows, xt, stream, graph_owned);
  }
  auto kernel = reduce_two_groups_runs_kernel<In, Out, R, 1, kScalars, 8, 1>;
  // Float32 runs by elements, where a row's runs span less than 2^31 elements (32-bit offsets): in
  // one round (above) of 256 threads x the fewest multiple of 4 loads that covers the segment
  // (once_loads_for: 8-16) where the segments hold at most 4096 elements, of 256 x 20, 24, 28 or 32
  // where they hold at most 8192 and the rows are whole or the items fit the SMs 4 at a time, an
  // unsplit compensated sum folding plain there (TreeReducer: at most 8192 values, as
  // launch_two_groups); past that in rounds of 256 x 16, at most kRoundsMax a thread, where the items
  // fit the SMs kRoundsMaxItemsPerSM at a time (above). Else 4 adjacent a thread (above), unless a
  // segment's last round is 45% to 7/8 full, where the strided loads won; where the items fit the
  // SMs 4 at a time on 48 registers (every load of a round issued before the first fold), else 8 at
  // a time on 32 (an amax's first 4 loads folded before the last 4 issue). REDUCE_OPS_RUNS_ONCE: 0
  // neither one round nor rounds of 16, 1 one round wherever the segments fit (else the adjacent or
  // strided kernels), 3 rounds of 16 wherever the offsets fit; REDUCE_OPS_RUNS_ADJACENT: 0 never, 1
  // always (the one round's rule only where it is not set).
  int64_t stride = kRowsBlockThreads;  // a thread's step, in packs: the block's threads, x 4 adjacent
  int once_loads = 0;                  // the one round's loads a thread, 0 where not taken
  // The one round's kernel of once_loads loads a thread, for the reducer of type T (Tag<T>).
  [[maybe_unused]] const auto once_kernel = [&once_loads](auto reducer) {
    using T = typename decltype(reducer)::type;
    switch (once_loads) {
      case 8: return reduce_two_groups_runs_kernel<In, Out, T, 1, 8, 4, 0>;
      case 12: return reduce_two_groups_runs_kernel<In, Out, T, 1, 12, 4, 0>;
      case 16: return reduce_two_groups_runs_kernel<In, Out, T, 1, 16, 4, 0>;
      case 20: return reduce_two_groups_runs_kernel<In, Out, T, 1, 20, 4, 0>;
      case 24: return reduce_two_groups_runs_kernel<In, Out, T, 1, 24, 4, 0>;
      case 28: return reduce_two_groups_runs_kernel<In, Out, T, 1, 28, 4, 0>;
      default: return reduce_two_groups_runs_kernel<In, Out, T, 1, 32, 4, 0>;
    }
  };
  // 16-bit rows by elements in the one round on kOnceWideBlockThreads threads an output (at most 16
  // loads a thread), launched with `threads`.
  [[maybe_unused]] const auto once_wide_kernel = [&once_loads](auto reducer) {
    using T = typename decltype(reducer)::type;
    switch (once_loads) {
      case 8: return reduce_two_groups_runs_kernel<In, Out, T, 1, 8, 2, 0, kOnceWideBlockThreads>;
      case 12: return reduce_two_groups_runs_kernel<In, Out, T, 1, 12, 2, 0, kOnceWideBlockThreads>;
      default: return reduce_two_groups_runs_kernel<In, Out, T, 1, 16, 2, 0, kOnceWideBlockThreads>;
    }
  };
  int threads = kRowsBlockThreads;
  if constexpr (sizeof(In) == 4) {
    if (vec == 1 && a.run_packs >= 4) {  // the getenvs only here (~0.1 us each a launch)
      const int64_t last = a.chunk % round, adjacent = env_nonnegative("REDUCE_OPS_RUNS_ADJACENT", 2);
      const bool span32 = (g.qs - 1) * a.q_stride + a.run_packs <= INT32_MAX;  // 32-bit offsets (the rounds')
      const int64_t once = span32 ? env_nonnegative("REDUCE_OPS_RUNS_ONCE", 2) : 0;
      const bool fits = a.chunk <= kRowsBlockThreads * kOnceWideLoads, narrow = a.chunk <= kRowsBlockThreads * kOnceLoads;
      const bool rule = once == 2 && adjacent == 2;
      if (fits && (once == 1 || (rule && (narrow || a.splits == 1 || items <= 4 * sm_count())))) {
        once_loads = once_loads_for(a.chunk);
        kernel = once_kernel(Tag<R>{});
      } else if (once == 3 || (rule && a.chunk <= kRoundsMax * kRowsBlockThreads * kOnceLoads &&
                               items <= kRoundsMaxItemsPerSM * sm_count())) {
        kernel = reduce_two_groups_runs_kernel<In, Out, R, 1, kOnceLoads, 4, -1>;
      } else if (adjacent == 1 || (adjacent == 2 && (last < round * 9 / 20 || last >= round * 7 / 8))) {
        kernel = items <= 4 * sm_count() ? reduce_two_groups_runs_kernel<In, Out, R, 1, kScalars, 4, 4>
                                         : reduce_two_groups_runs_kernel<In, Out, R, 1, kScalars, 8, 4>;
        stride *= 4;
      }
    }
  }
  set_runs_step(a, stride);
  if (vec == kVec) kernel = reduce_two_groups_runs_kernel<In, Out, R, kVec, 8, 4, 1>;
  if constexpr (kVec / 2 > 1) {
    if (vec == kVec / 2) kernel = reduce_two_groups_runs_kernel<In, Out, R, kVec / 2, 8, 4, 1>;
  }
  if constexpr (kVec / 4 > 1) {
    if (vec == kVec / 4) kernel = reduce_two_groups_runs_kernel<In, Out, R, kVec / 4, 8, 8, 1>;
  }
  if constexpr (sizeof(In) == 2) {
    if (elements16) {
      // On wider blocks where the rows are whole (of at most kOnceWideBlockThreads x kOnceLoads
      // elements, once_wide_kernel's most loads) and at most kOnceWideItemsPerSM an SM.
      if (a.splits == 1 && a.chunk <= kOnceWideBlockThreads * kOnceLoads &&
          items <= kOnceWideItemsPerSM * sm_count() && env_nonnegative("REDUCE_OPS_RUNS_16_WIDE", 1) != 0) {
        threads = kOnceWideBlockThreads;
        set_runs_step(a, threads);
      }
      once_loads = once_loads_for(a.chunk, threads);
      kernel = threads == kOnceWideBlockThreads ? once_wide_kernel(Tag<R>{}) : once_kernel(Tag<R>{});
    }
  }
  using Tree = typename TreeReducer<R>::type;
  if constexpr (sizeof(In) <= 4 && !std::is_same_v<Tree, R>) {  // float32 and 16-bit: the one round's element loads
    if (once_loads > 0 && a.splits == 1) {  // at most 8192 values an output: a tree of depth <= 13
      const auto once = threads == kOnceWideBlockThreads ? once_wide_kernel(Tag<Tree>{}) : once_kernel(Tag<Tree>{});
      once<<<grid_for(items), threads, 0, stream>>>(x, out_t.mutable_data_ptr<Out>(), a, nullptr, nullptr, Tree{});
      return true;
    }
  }
  if (small && once_loads == 0) return false;
  kernel<<<grid_for(items), threads, 0, stream>>>(x, out_t.mutable_data_ptr<Out>(), a, slots, counters, r);
  return true;
}

}  // namespace
}  // namespace cuda

void reduce_cuda(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, ReduceKind kind) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // Columns when the reduced elements are not adjacent but the kept ones are.
  const bool columns = g.inner > 1 && g.reduced_stride != 1 && g.inner_stride == 1;
  const cuda::ForcedStrategy forced;
  dispatch_in_out<true>("reduce_cuda", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    cuda::with_reducer<In, Out>(kind, [&](const auto& r) {
      if (columns) cuda::launch_cols<In, Out>(x, g, out, r, stream, forced);
      else cuda::launch_rows<In, Out>(x, g, out, r, stream, forced);
    });
  });
}

bool reduce_two_groups_cuda(const at::Tensor& x, const TwoGroupsGeometry& g, const at::Tensor& out, ReduceKind kind) {
  // Automatic only, as the few rows: a forced strategy runs the stages.
  if (cuda::ForcedStrategy().any()) return false;
  const bool small = g.qs * g.ms <= cuda::kTwoGroupsMaxPerOutput &&
                     g.outer * g.inner * g.qs * g.ms <=
                         cuda::env_nonnegative("REDUCE_OPS_TWO_GROUPS_MAX", cuda::kTwoGroupsMaxElements);
  const int64_t min_run_bytes = cuda::env_nonnegative("REDUCE_OPS_TWO_GROUPS_RUN_BYTES", cuda::kTwoGroupsMinRunBytes);
  // Shorter runs of at least 4 elements in rows of at most the one round's 256 x 32 elements: the short
  // kernel, or the runs kernel's one round by elements (launch_two_groups_runs).
  // REDUCE_OPS_TWO_GROUPS_SHORT_RUNS=0 leaves them to the stages.
  const bool runs = g.m_stride == 1 && min_run_bytes > 0 &&
                    (g.ms * static_cast<int64_t>(x.element_size()) >= min_run_bytes ||
                     (g.ms >= 4 && g.qs * g.ms <= cuda::kRowsBlockThreads * cuda::kOnceWideLoads &&
                      cuda::env_nonnegative("REDUCE_OPS_TWO_GROUPS_SHORT_RUNS", 1) != 0));
  if (!small && !runs) return false;
  // Inputs the block an output takes: the short kernel or the runs kernel's one round instead where
  // they apply (REDUCE_OPS_TWO_GROUPS_SMALL_RUNS=0: never; kTwoGroupsMaxElements has the figures).
  const bool runs_first = runs && (!small || cuda::env_nonnegative("REDUCE_OPS_TWO_GROUPS_SMALL_RUNS", 1) != 0);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  bool launched = true;
  dispatch_in_out("reduce_cuda", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    cuda::with_reducer<In, Out>(kind, [&](const auto& r) {
      launched = runs_first && cuda::launch_two_groups_runs<In, Out>(x, g, out, r, stream, small);
      if (!launched && small) {
        cuda::launch_two_groups<In, Out>(x, g, out, r, stream);
        launched = true;
      }
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return launched;
}

}  // namespace reduce_ops
