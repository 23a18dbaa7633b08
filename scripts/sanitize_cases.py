"""Small CUDA cases that reach every kernel strategy, for compute-sanitizer.

The whole test suite under memcheck takes far longer than a GPU call allows; this script runs
each strategy once on a small shape (and checks the result against torch, so a silent race
shows as a wrong value too). Softmax, ReduceScale and softmax_backward run once per row
strategy, forced through REDUCE_OPS_STRATEGY (a strategy that cannot run a shape falls back to
the automatic choice), plus once automatic:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python scripts/sanitize_cases.py
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck python scripts/sanitize_cases.py rows

Arguments name the parts to run, `reductions` (sum, amax) and `rows` (softmax, ReduceScale and
softmax_backward over rows and inner dims); none runs both. Racecheck is slower than memcheck: the
whole script under it ran past 300 s on an H200 (session 82), so run it a part a call. Without a
GPU the same cases run on the CPU kernels, which checks the script itself.
"""
import os
import sys

import torch

import reduce_ops

# The row dispatcher's strategies (csrc/cuda/softmax_launch.h); None is the automatic choice.
ROW_STRATEGIES = [None, "warp", "block", "cluster_row", "cluster", "smem", "split"]

PARTS = set(sys.argv[1:]) or {"reductions", "rows"}
if not PARTS <= {"reductions", "rows"}:
    raise SystemExit(f"unknown parts {sorted(PARTS - {'reductions', 'rows'})}: reductions, rows")
DTYPES = [(torch.float32, 1e-4), (torch.bfloat16, 3e-2), (torch.float64, 1e-10)]
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
bad = []


def check(name, got, ref, tol):
    if not torch.allclose(got.double(), ref.double(), atol=tol, rtol=tol, equal_nan=True):
        bad.append(name)


def check_row_ops(tag, rows, cols, dtype, tol):
    """Softmax, ReduceScale and softmax_backward of one random (rows, cols) input."""
    x = torch.randn(rows, cols, device=dev, dtype=dtype)
    if rows >= 3:
        x[1] = 0.0  # ReduceScale's zero row
    y = reduce_ops.softmax(x, -1)
    check(f"softmax {tag}", y, torch.softmax(x.double(), -1), tol)
    out, scale = reduce_ops.reduce_scale(x)
    ref_scale = x.double().abs().amax(-1, keepdim=True)
    ref_out = torch.where(ref_scale == 0, torch.zeros_like(ref_scale), x.double() / ref_scale)
    check(f"reduce_scale {tag}", out, ref_out, tol)
    g = torch.randn_like(y)
    ref = torch.ops.aten._softmax_backward_data(g.double(), y.double(), -1, torch.float64)
    check(f"softmax_backward {tag}", reduce_ops.softmax_backward(g, y, -1), ref, tol)


for dtype, tol in DTYPES if "reductions" in PARTS else []:
    # Reductions: few-rows blocks (few short aligned rows: 1024 whole, 64 x 100 and 64 x 500 in
    # 4- and 8-byte types with one warp, 16 x 1536 and 4 x 4096 with 4 and 8), short rows
    # (1001 x 128; 1001 x 48, lanes past the row; 1001 x 16 and 1001 x 8, groups of 1-4 lanes),
    # tiny rows (1001 x 3: shorter than a pack, a thread a pack's worth of rows), short rows of
    # narrow packs (501 x 13: 2-, 4- or 8-byte packs, under the 32 KB where staging starts), group rows
    # (4..32 lanes), block rows (300 rows of 4096 and 4001: one round a thread, added plain; of
    # 8192: two rounds), split rows of one round a segment (few long aligned rows, whole tensors;
    # segments past the row's packs load its last one) and of any length (70001, 140001), small
    # columns read whole by a block (every block shape: 4, 8, 16, 64, 300 and 2000 rows; 3 x 64 x
    # 40 over dim 1), columns with and without a split, strided rows, an unaligned start, dims that
    # fit no single view (40 x 7 x 9 over (0, 2) and 3 x 4 x 5 x 6 over (0, 2, 3): two groups, one
    # launch of reduce_two_groups_kernel; 2 x 3 x 4 x 5 x 6 over (0, 2, 4): three, in stages; 3 x 2 x
    # 9000, 9 x 2 x 1002 and 9 x 2 x 1001 over (0, 2): past 8192 values an output,
    # reduce_two_groups_runs_kernel by 16-byte packs, by narrower ones and element by element,
    # unsplit and, with REDUCE_OPS_REDUCE_CHUNK=64, split; 168 x 661 x 49: float32 elements 4 adjacent
    # a thread on the kernel bounded to 8 blocks an SM, 661 items of 8232; 250 x 7 x 37: on the 4-block
    # one with REDUCE_OPS_RUNS_ADJACENT=1, rows of 9250 whose whole rounds end inside a warp; by
    # default it, 9 x 2 x 1001 and 60 x 600 x 37 float32, segments of at most 4096 elements, take one
    # round of 256 threads, and with REDUCE_OPS_RUNS_ONCE=1 every float32 case here, the fewest
    # multiple of 4 loads a thread that covers the segment, 8 to 32 (8 on 9 x 2 x 1001's split below), as
    # 60 x 600 x 37 (600 items of 2220: 12), 96 x 256 x 49 (4704: 20), 112 x 256 x 49 (5488: 24), 128 x
    # 320 x 49 (6272: 28) and 160 x 256 x 49 (7840: 32) by default; 300 x 200 x 49, 600 items of 4928, rounds
    # of 256 x 16, and with REDUCE_OPS_RUNS_ONCE=3 every float32 case here). Many
    # rows of one block round (4300 x 3200 float32, 4300 x 4608 bfloat16: 800 and 576 packs), and
    # long rows on blocks of 512 threads, the last round partial (1100 x 12292 float32, 1100 x
    # 24584 bfloat16). A whole 16 MB and 32 bytes: one round a segment, 513 partials the last
    # block folds (past 256, the whole block; its last segment past the row's packs).
    wide = {torch.float32: [((4300, 3200), -1), ((1100, 12292), -1)],
            torch.bfloat16: [((4300, 4608), -1), ((1100, 24584), -1)]}.get(dtype, [])
    whole_16mb = (((16 << 20) + 32) // torch.empty((), dtype=dtype).element_size(),)
    for shape, dim in wide + [(whole_16mb, None), ((1024,), None), ((64, 13), -1), ((64, 100), -1), ((64, 500), -1), ((16, 1536), -1),
                       ((4, 4096), -1), ((1001, 128), -1), ((1001, 48), -1), ((1001, 16), -1), ((1001, 8), -1),
                       ((1001, 3), -1), ((501, 13), -1), ((8, 3000), -1), ((2, 70000), -1), ((3, 70001), -1),
                       ((300, 4096), -1), ((300, 4001), -1), ((300, 8192), -1),
                       ((140000,), None), ((140001,), None), ((4, 256), 0), ((8, 128), 0), ((16, 12), 0),
                       ((64, 72), 0), ((300, 64), 0), ((2000, 32), 0), ((3, 64, 40), 1), ((5000, 8), 0),
                       ((40, 7, 9), (0, 2)), ((3, 4, 5, 6), (0, 2, 3)), ((2, 3, 4, 5, 6), (0, 2, 4)),
                       ((3, 2, 9000), (0, 2)), ((9, 2, 1002), (0, 2)), ((9, 2, 1001), (0, 2)),
                       ((60, 600, 37), (0, 2)), ((168, 661, 49), (0, 2)), ((250, 7, 37), (0, 2)),
                       ((128, 320, 49), (0, 2)), ((96, 256, 49), (0, 2)), ((112, 256, 49), (0, 2)),
                       ((160, 256, 49), (0, 2)), ((300, 200, 49), (0, 2))]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        check(f"sum {dtype} {shape} {dim}", reduce_ops.sum(x, dim), x.double().sum(dim if dim is not None else ()), tol * 50)
        check(f"amax {dtype} {shape} {dim}", reduce_ops.amax(x, dim), torch.amax(x, dim if dim is not None else ()), 0)
    os.environ["REDUCE_OPS_REDUCE_CHUNK"] = "64"
    for shape in [(3, 2, 9000), (9, 2, 1002), (9, 2, 1001)]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        check(f"sum split runs {dtype} {shape}", reduce_ops.sum(x, (0, 2)), x.double().sum((0, 2)), tol * 50)
        check(f"amax split runs {dtype} {shape}", reduce_ops.amax(x, (0, 2)), torch.amax(x, (0, 2)), 0)
    os.environ.pop("REDUCE_OPS_REDUCE_CHUNK")
    # Rows shorter than reduce_two_groups_short_kernel's round, past 2^20 elements, by it: elements (4 x
    # 8192 x 49: rows of 196 on 32 threads, 8 outputs a block; 16 x 1024 x 65, 32 x 1024 x 7 x 7: 16-bit
    # runs of odd length, float32 runs under 128 bytes) and packs of up to 16 bytes (8 x 4096 x 40: 160
    # pairs on 32 threads; 8 x 1024 x 14 x 14; 32 x 512 x 14 x 14); 16-bit rows by elements in the runs
    # kernel's one round (64 x 512 x 65, 64 x 512 x 7 x 7); runs under 128 bytes by it too (512 x 256 x 3
    # x 3: 16-bit on 512 threads an output, its 256 outputs at most 2 an SM); inputs under 2^20 by the short kernel (60 x 700 x 6 off the boundary); and with
    # REDUCE_OPS_TWO_GROUPS_MAX=0 and REDUCE_OPS_RUNS_SHORT=1 small ones on 64 (8 x 64 x 49), 32 (3 x 101
    # x 37, the last block's outputs past the rows; 4 x 3 x 7 x 60 over (1, 3), two kept dims), 128 and
    # 256 threads an output (2 x 5 x 300, 41 x 9 x 49); 2 x 6 x 1024 and 3 x 5 x 1000 by packs.
    if dtype != torch.float64:
        for shape, dim, cut in [((4, 8192, 49), (0, 2), 0), ((16, 1024, 65), (0, 2), 0), ((32, 1024, 7, 7), (0, 2, 3), 0),
                                ((8, 4096, 40), (0, 2), 0), ((8, 1024, 14, 14), (0, 2, 3), 0),
                                ((32, 512, 14, 14), (0, 2, 3), 0), ((64, 512, 65), (0, 2), 0),
                                ((64, 512, 7, 7), (0, 2, 3), 0), ((512, 256, 3, 3), (0, 2, 3), 0), ((60, 700, 6), (0, 2), 1)]:
            x = torch.randn(shape, device=dev, dtype=dtype)[..., cut:]
            check(f"sum short rows {dtype} {shape} {cut}", reduce_ops.sum(x, dim), x.double().sum(dim), tol * 50)
            check(f"amax short rows {dtype} {shape} {cut}", reduce_ops.amax(x, dim), torch.amax(x, dim), 0)
        os.environ.update(REDUCE_OPS_TWO_GROUPS_MAX="0", REDUCE_OPS_RUNS_SHORT="1")
        for shape, dim in [((8, 64, 49), (0, 2)), ((3, 101, 37), (0, 2)), ((4, 3, 7, 60), (1, 3)),
                           ((2, 5, 300), (0, 2)), ((41, 9, 49), (0, 2)), ((2, 6, 1024), (0, 2)), ((3, 5, 1000), (0, 2))]:
            x = torch.randn(shape, device=dev, dtype=dtype)
            check(f"sum short runs {dtype} {shape}", reduce_ops.sum(x, dim), x.double().sum(dim), tol * 50)
            check(f"amax short runs {dtype} {shape}", reduce_ops.amax(x, dim), torch.amax(x, dim), 0)
        os.environ.pop("REDUCE_OPS_TWO_GROUPS_MAX")
        os.environ.pop("REDUCE_OPS_RUNS_SHORT")
    # Staged rows (dense rows not whole packs, from 32 KB-4 MB or any size past 64 bytes a row; any size
    # with the knob): a block's rows through shared memory; 16-bit rows of odd length read by words
    # shared between rows. Blocks fewer than the SMs are halved to 128 rows (1001 x 13, 300 x 27); 512
    # rows an SM and one more keep whole blocks of 256 rows up to 64 bytes (float32 x 5 and x 13,
    # float64 x 3, bfloat16 x 9, x 13 and x 27; rows of up to 24 bytes take 256 while those fit 8 blocks
    # an SM) and of 128 past 64 bytes (float32 x 27, float64 x 13; float64 x 27, 216 bytes, is not
    # staged); 2048 rows an SM and one more, whole blocks of 512 rows of up to 24 bytes.
    os.environ["REDUCE_OPS_STAGED_MIN"] = "1"
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 1
    mid, full = 512 * sms + 1, 2048 * sms + 1
    short = {torch.float32: 5, torch.float64: 3}.get(dtype, 9)
    for shape in [(1001, 13), (300, 27), (mid, 13), (mid, short), (mid, 27), (full, short)]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        check(f"sum staged {dtype} {shape}", reduce_ops.sum(x, -1), x.double().sum(-1), tol * 50)
        check(f"amax staged {dtype} {shape}", reduce_ops.amax(x, -1), torch.amax(x, -1), 0)
    os.environ.pop("REDUCE_OPS_STAGED_MIN")
    # Columns in the streaming plan too (small shapes take the one-round "wave" plan), split or not.
    for strategy in ("stream", "split"):
        os.environ["REDUCE_OPS_STRATEGY"] = strategy
        for shape, dim in [((300, 64), 0), ((5000, 8), 0), ((40, 7, 9), (0, 2)), ((300, 67), 0), ((5000, 7), 0)]:
            x = torch.randn(shape, device=dev, dtype=dtype)
            check(f"sum {strategy} {dtype} {shape} {dim}", reduce_ops.sum(x, dim), x.double().sum(dim), tol * 50)
            check(f"amax {strategy} {dtype} {shape} {dim}", reduce_ops.amax(x, dim), torch.amax(x, dim), 0)
    os.environ.pop("REDUCE_OPS_STRATEGY")
    # Columns of an element a thread in the one-round wave plan split in segments (by default it
    # takes them only unsplit in few blocks), the other unaligned-column paths off.
    element_wave = {"REDUCE_OPS_COLS_WAVE_ELEMENTS": "all", "REDUCE_OPS_COLS_PACKED": "off",
                    "REDUCE_OPS_COLS_ROW_GROUPS": "off", "REDUCE_OPS_COLS_FULL_WIDTH": "off"}
    os.environ.update(element_wave)
    for shape in [(300, 67), (5000, 7)]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        check(f"sum element wave {dtype} {shape}", reduce_ops.sum(x, 0), x.double().sum(0), tol * 50)
        check(f"amax element wave {dtype} {shape}", reduce_ops.amax(x, 0), torch.amax(x, 0), 0)
    for name in element_wave:
        os.environ.pop(name)
    # A column split whose partials fold in the launch in two levels (groups of 4 segments, then
    # the groups), then splits folded by a second launch from 2 segments: a block a word (5000 x 8,
    # few words; 300000 x 8, more than 128 segments) and a warp a word (4096 x 2048, many words).
    os.environ["REDUCE_OPS_COLS_FOLD_GROUP"] = "4"
    os.environ["REDUCE_OPS_COLS_FOLD_LAUNCH"] = "1000000"
    x = torch.randn(5000, 8, device=dev, dtype=dtype)
    check(f"sum {dtype} two-level column fold", reduce_ops.sum(x, 0), x.double().sum(0), tol * 50)
    check(f"amax {dtype} two-level column fold", reduce_ops.amax(x, 0), torch.amax(x, 0), 0)
    os.environ.pop("REDUCE_OPS_COLS_FOLD_GROUP")
    os.environ["REDUCE_OPS_COLS_FOLD_LAUNCH"] = "2"
    for shape in [(5000, 8), (300000, 8), (4096, 2048)]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        check(f"sum {dtype} {shape} fold launch", reduce_ops.sum(x, 0), x.double().sum(0), tol * 50)
        check(f"amax {dtype} {shape} fold launch", reduce_ops.amax(x, 0), torch.amax(x, 0), 0)
    os.environ.pop("REDUCE_OPS_COLS_FOLD_LAUNCH")
    # Rows a group of lanes shares (forced: a warp of 8 packs a lane past 128 packs), ending its
    # rounds part way (the last round's packs past the row are the identity, not loaded), and
    # starting anywhere in a pack (head and tail elements loaded apart from the packs).
    os.environ["REDUCE_OPS_STRATEGY"] = "warp"
    for cols in (77, 1000, 1100, 1021):
        xg = torch.randn(37 * cols + 3, device=dev, dtype=dtype)[3:].view(37, cols)
        check(f"sum warp {dtype} {cols} offset", reduce_ops.sum(xg, 1), xg.double().sum(1), tol * 50)
        check(f"amax warp {dtype} {cols} offset", reduce_ops.amax(xg, 1), torch.amax(xg, 1), 0)
    os.environ.pop("REDUCE_OPS_STRATEGY")
    # Columns that are not whole 16-byte packs, each path forced at any size: row groups (rows of
    # whole packs by the vectorized kernels, each column's partials folded by a second launch);
    # blocks as wide as the columns (up to 1024: 1002 threads a block), split or not; packed row
    # groups (the group values folded in shared memory, the segments' partials by a second
    # launch: 501 packs a block, blocks that take several work items with 5000 outer indices; 6
    # and 13 columns of 16400 rows, whose row groups' wide view is past reduce_cols_few_kernel's
    # 2048 rows, on rounds of 4 rows of packs in 2- and 4-byte types).
    # With a middle dim; then 20000 x 77 with the full-width kernel's splits folded in the launch
    # in groups of 3 segments (a partial last group) and the packed kernel at 8 blocks an SM (more
    # segments).
    off = {"REDUCE_OPS_COLS_PACKED": "off", "REDUCE_OPS_COLS_ROW_GROUPS": "off"}
    for label, knobs, shapes, extra in [
            ("row groups", {**off, "REDUCE_OPS_COLS_ROW_GROUPS": "on"},
             [((8192, 77), 0), ((3, 4096, 77), 1), ((64, 50257), 0)], {}),
            ("full width", {**off, "REDUCE_OPS_COLS_FULL_WIDTH": "on"},
             [((8193, 77), 0), ((3, 4096, 77), 1), ((16, 197), 0), ((600, 1002), 0)],
             {"REDUCE_OPS_COLS_FOLD_GROUP": "3", "REDUCE_OPS_COLS_FOLD_LAUNCH": "1000000"}),
            ("packed", {"REDUCE_OPS_COLS_PACKED": "on"},
             [((8192, 77), 0), ((3, 4096, 77), 1), ((16, 197), 0), ((600, 1002), 0), ((5000, 8, 77), 1),
              ((16400, 6), 0), ((2, 16400, 13), 1)],
             {"REDUCE_OPS_COLS_BLOCKS_PER_SM": "8"})]:
        os.environ.update(knobs)
        for shape, dim in shapes:
            xc = torch.randn(shape, device=dev, dtype=dtype)
            check(f"sum {dtype} {shape} {label}", reduce_ops.sum(xc, dim), xc.double().sum(dim), tol * 50)
            check(f"amax {dtype} {shape} {label}", reduce_ops.amax(xc, dim), torch.amax(xc, dim), 0)
        if extra:
            os.environ.update(extra)
            xc = torch.randn(20000, 77, device=dev, dtype=dtype)
            check(f"sum {dtype} {label}, {extra}", reduce_ops.sum(xc, 0), xc.double().sum(0), tol * 50)
        for name in [*knobs, *extra]:
            os.environ.pop(name, None)
    xo = torch.randn(64 * 37 + 1, device=dev, dtype=dtype)[1:].view(64, 37)
    check(f"sum {dtype} unaligned", reduce_ops.sum(xo, 1), xo.double().sum(1), tol * 10)
    check(f"sum {dtype} strided", reduce_ops.sum(xo.t(), 1), xo.double().sum(0), tol * 10)

for dtype, tol in DTYPES if "rows" in PARTS else []:
    # Softmax / ReduceScale / backward under every row strategy: warp (small groups, packs 1..8),
    # block and cluster (registers; 70000 gives clusters of 4 or 8 blocks), shared memory, split
    # rows; 201, 9001 and 30001 (and 16-bit 300) are unaligned: the forward's scalar smem and split
    # kernels, the backward's peeled warp (8 values a lane), smem and split kernels (30001 under
    # "smem": grad read again from the L2, out's row alone in shared memory).
    for strategy in ROW_STRATEGIES:
        if strategy is None:
            os.environ.pop("REDUCE_OPS_STRATEGY", None)
        else:
            os.environ["REDUCE_OPS_STRATEGY"] = strategy
        for rows, cols in [(33, 7), (33, 40), (33, 201), (33, 300), (9, 2000), (4, 9000), (3, 9001), (2, 40000),
                           (3, 30001), (3, 70000)]:
            check_row_ops(f"{strategy or 'auto'} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
    # "smem" on rows misaligned otherwise than the output (a storage offset of one element): the
    # unaligned kernel reads its shared memory back an element at a time; and in place.
    os.environ["REDUCE_OPS_STRATEGY"] = "smem"
    xs = torch.randn(5 * 1021 + 1, device=dev, dtype=dtype)[1:].view(5, 1021)
    check(f"softmax smem offset {dtype}", reduce_ops.softmax(xs, -1), torch.softmax(xs.double(), -1), tol)
    ref_out = xs.double() / xs.double().abs().amax(-1, keepdim=True)
    reduce_ops.reduce_scale_(xs)
    check(f"reduce_scale_ smem offset {dtype}", xs, ref_out, tol)
    # Peeled rows (unaligned, output on x's misalignment; float32 from 256 elements): the warp,
    # block (registers, staged) and cluster_row kernels on rows of odd length, each row at its own
    # misalignment; in place on rows off 16 bytes in their storage; the next row and its edges
    # loaded ahead.
    for strategy, hold, rows, cols in [("warp", "registers", 17, 37), ("warp", "registers", 17, 77),
                                       ("warp", "registers", 17, 301),
                                       ("warp", "registers", 9, 1021),
                                       ("block", "registers", 9, 4099), ("block", "shared", 9, 4099),
                                       ("cluster_row", "registers", 9, 4099), ("cluster_row", "registers", 5, 70001)]:
        os.environ["REDUCE_OPS_STRATEGY"] = strategy
        os.environ["REDUCE_OPS_BLOCK_HOLD"] = hold
        check_row_ops(f"peeled {strategy} {hold} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
        xs = torch.randn(rows * cols + 3, device=dev, dtype=dtype)[3:].view(rows, cols)
        ref_out = xs.double() / xs.double().abs().amax(-1, keepdim=True)
        reduce_ops.reduce_scale_(xs)
        check(f"reduce_scale_ peeled {strategy} {hold} offset {dtype}", xs, ref_out, tol)
    os.environ.pop("REDUCE_OPS_BLOCK_HOLD")
    os.environ["REDUCE_OPS_ROW_WAVES"] = "1"
    os.environ["REDUCE_OPS_AHEAD"] = "registers"
    os.environ["REDUCE_OPS_BLOCK_PACKS"] = "2"
    for strategy, rows, cols in [("warp", 3000, 37), ("warp", 3000, 77), ("warp", 3000, 301), ("block", 600, 4099)]:
        os.environ["REDUCE_OPS_STRATEGY"] = strategy
        check_row_ops(f"peeled {strategy} ahead {dtype} {rows}x{cols}", rows, cols, dtype, tol)
    for name in ("REDUCE_OPS_ROW_WAVES", "REDUCE_OPS_AHEAD", "REDUCE_OPS_BLOCK_PACKS"):
        os.environ.pop(name)
    # The tile kernels (a tile of consecutive unaligned rows a block through shared memory; float64
    # too, forced): 1-32 lanes a row (7 to 251 elements), tiles of one unit of rows
    # (REDUCE_OPS_TILE_BYTES=16) or several, each block several tiles (two stages), a total ending
    # inside a pack (67 x 37).
    os.environ["REDUCE_OPS_ROW_TILE"] = "on"
    os.environ["REDUCE_OPS_BACKWARD_TILE"] = "on"
    for tile_bytes, rows, cols in [(None, 67, 7), (None, 67, 10), ("600", 67, 37), (None, 33, 77), ("16", 19, 150),
                                   (None, 25, 251)]:
        if tile_bytes:
            os.environ["REDUCE_OPS_TILE_BYTES"] = tile_bytes
        check_row_ops(f"tile {tile_bytes} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
        os.environ.pop("REDUCE_OPS_TILE_BYTES", None)
    os.environ.pop("REDUCE_OPS_ROW_TILE")
    os.environ.pop("REDUCE_OPS_BACKWARD_TILE")
    # 16-bit rows of 8-byte packs (3-15 of them), 2 rows a lane group at once (row_norm_rows_kernel)
    # and one at a time (REDUCE_OPS_WARP_ROWS=off): lane groups of 2 (rows of 3 packs; of 4 under
    # REDUCE_OPS_WARP_LANES=4), 4 and 8, a last block's rows ending inside it.
    if dtype == torch.bfloat16:
        for held, knob in [("auto", None), ("off", "REDUCE_OPS_WARP_ROWS"), ("4", "REDUCE_OPS_WARP_LANES")]:
            if knob:
                os.environ[knob] = held
            for rows, cols in [(67, 12), (301, 20), (33, 36), (5, 60)]:
                check_row_ops(f"8-byte packs {held} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
            if knob:
                os.environ.pop(knob)
    os.environ["REDUCE_OPS_STRATEGY"] = "smem"
    os.environ["REDUCE_OPS_SMEM_LOAD"] = "packs"  # the middles by loads of packs (no bulk copy)
    check_row_ops(f"smem packs {dtype} 3x9001", 3, 9001, dtype, tol)
    os.environ.pop("REDUCE_OPS_SMEM_LOAD")
    # cluster_row on 16 blocks where 12 hold the row (float32 and bfloat16 3 x 70000): blocks
    # with no values.
    os.environ["REDUCE_OPS_STRATEGY"] = "cluster_row"
    os.environ["REDUCE_OPS_CLUSTER"] = "16"
    check_row_ops(f"cluster_row 16 blocks {dtype} 3x70000", 3, 70000, dtype, tol)
    os.environ.pop("REDUCE_OPS_CLUSTER")
    # cluster_row's kernel without a guard per pack (every block's share whole: 2 x 8192), and
    # rows whose exps reach a subnormal (each thread's packs read a second time).
    check_row_ops(f"cluster_row whole {dtype} 2x8192", 2, 8192, dtype, tol)
    for cols in (8192, 70000):
        xw = (-100.0 * torch.rand(3, cols, device=dev)).to(dtype)
        check(f"softmax cluster_row subnormal exps {dtype} 3x{cols}", reduce_ops.softmax(xw, -1),
              torch.softmax(xw.double(), -1), tol)
    # The register kernels' next row (REDUCE_OPS_AHEAD) with several rows per block (one wave of
    # 256-thread blocks) or per cluster (of 4 or 8 blocks).
    os.environ["REDUCE_OPS_ROW_WAVES"] = "1"
    for ahead in ("registers", "shared"):
        os.environ["REDUCE_OPS_AHEAD"] = ahead
        for strategy, rows, cols in [("block", 1200, 2000), ("cluster", 40, 70000)]:
            os.environ["REDUCE_OPS_STRATEGY"] = strategy
            check_row_ops(f"{strategy} ahead={ahead} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
    # The blocks and clusters in both holds (REDUCE_OPS_BLOCK_HOLD / REDUCE_OPS_CLUSTER_HOLD):
    # registers only, and half of each thread's packs (the backward: out's) bulk-copied into
    # shared memory; several rows a block or cluster.
    os.environ.pop("REDUCE_OPS_AHEAD")
    for hold in ("registers", "shared"):
        os.environ["REDUCE_OPS_BLOCK_HOLD"] = hold
        os.environ["REDUCE_OPS_CLUSTER_HOLD"] = hold
        for strategy, rows, cols in [("block", 1200, 2000), ("block", 200, 12000), ("cluster", 40, 70000)]:
            os.environ["REDUCE_OPS_STRATEGY"] = strategy
            check_row_ops(f"{strategy} hold={hold} {dtype} {rows}x{cols}", rows, cols, dtype, tol)
    for var in ("REDUCE_OPS_ROW_WAVES", "REDUCE_OPS_AHEAD", "REDUCE_OPS_STRATEGY", "REDUCE_OPS_CLUSTER_HOLD",
                "REDUCE_OPS_BLOCK_HOLD"):
        os.environ.pop(var, None)
    # Over a middle dim: plain tiles, then tiles on clusters (too few tiles for the GPU) with the
    # shares held in registers ((3000, 40): 4 blocks) and streamed ((1, 20000, 16): 8 blocks),
    # and plain blocks of 2 x 256 threads ((1100, 2048): 16 warps exchanging through shared
    # memory; 16-bit: the kernel for two blocks an SM) and of 64-byte rows ((1, 600, 4096): the
    # backward, and the float32 forward, held), with scalar loads ((1, 600, 1023): float32 32
    # values a thread) and 8-byte packs (16-bit: (1, 600, 1020) held, (1, 2100, 1020) streamed,
    # in 32-byte rows; (1, 600, 4092) held in 64-byte rows; (1, 1100, 4092) the forward streamed
    # in 64-byte rows, the backward held in 32); scalar loads ((1, 600, 4095): 64-byte rows;
    # (2, 3000, 1023): float64 held in 32-byte rows, 16-bit streamed); then the split (fold,
    # apply) with one level of last-block folds and with two (groups of 4 segments).
    for strategy, group in (("tiles", None), ("split", None), ("split", "4")):
        os.environ["REDUCE_OPS_STRATEGY"] = strategy
        if group:
            os.environ["REDUCE_OPS_COLS_FOLD_GROUP"] = group
        blocks = [(1, 1100, 2048), (1, 600, 4096), (1, 600, 1023), (1, 600, 1020), (1, 2100, 1020),
                  (1, 600, 4092), (1, 1100, 4092), (1, 600, 4095), (2, 3000, 1023)]
        if strategy != "tiles":
            blocks = []
        for shape in [(6, 50, 9), (1, 3000, 40), (1, 20000, 16)] + blocks:
            x = torch.randn(shape, device=dev, dtype=dtype)
            y = reduce_ops.softmax(x, 1)
            check(f"softmax inner {strategy} group={group} {dtype} {shape}", y, torch.softmax(x.double(), 1), tol)
            g = torch.randn_like(x)
            ref = torch.ops.aten._softmax_backward_data(g.double(), y.double(), 1, torch.float64)
            check(f"softmax_backward inner {strategy} group={group} {dtype} {shape}",
                  reduce_ops.softmax_backward(g, y, 1), ref, tol)
    os.environ.pop("REDUCE_OPS_STRATEGY")
    os.environ.pop("REDUCE_OPS_COLS_FOLD_GROUP", None)
    xo = torch.randn(16 * 301 + 1, device=dev, dtype=dtype)[1:].view(16, 301)
    check(f"softmax unaligned {dtype}", reduce_ops.softmax(xo, -1), torch.softmax(xo.double(), -1), tol)

# 16-bit rows widened to a float32 output (8-byte packs held as floats): the block kernel's
# unguarded loads (a pack past the row reads the row's first), one and several rows per block.
for strategy, waves in [("block", None), ("block", "1"), ("cluster", None)] if "rows" in PARTS else []:
    os.environ["REDUCE_OPS_STRATEGY"] = strategy
    if waves:
        os.environ["REDUCE_OPS_ROW_WAVES"] = waves
    for rows, cols in [(33, 300), (9, 2004), (1200, 2000), (3, 70000)]:
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        check(f"softmax {strategy} waves={waves} bfloat16->float32 {rows}x{cols}",
              reduce_ops.softmax(x, -1, dtype=torch.float32), torch.softmax(x.double(), -1), 1e-4)
    os.environ.pop("REDUCE_OPS_ROW_WAVES", None)
os.environ.pop("REDUCE_OPS_STRATEGY", None)

if dev == "cuda":
    torch.cuda.synchronize()
print(f"{len(bad)} wrong results", *bad, sep="\n  ")
raise SystemExit(1 if bad else 0)
