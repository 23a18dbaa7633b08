"""benchmarks/bench.py --merge: kept rows stay against their own run's copy figure."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402


def _row(op, provider, us, **extra):
    return dict(op=op, shape=[4, 8], dim=-1, dtype="float32", provider=provider, us=us, bytes=256,
                GBps=256 / us / 1e3, ok=True, graph=False, **extra)


def _run(copy, rows):
    return {"copy_GBps": copy, "rows": rows, "errors": [], "unavailable": {}}


def test_merge_keeps_each_rows_copy_and_only_the_runs_still_present():
    first = _run(4000.0, [_row("sum", "reduce_ops", 1.0), _row("amax", "reduce_ops", 2.0)])
    second = bench.merge_results(first, _run(4100.0, [_row("sum", "reduce_ops", 1.5)]))
    assert second["copy_GBps"] == 4100.0
    assert second["copy_GBps_runs"] == [4000.0, 4100.0]
    kept = [r for r in second["rows"] if r["op"] == "amax"]
    assert len(kept) == 1 and kept[0]["copy_GBps"] == 4000.0  # the first run's figure
    assert [r["us"] for r in second["rows"] if r["op"] == "sum"] == [1.5]
    # A third run that re-measures the amax row leaves no row of the first run: its copy figure
    # goes from the list of runs the file holds.
    third = bench.merge_results(second, _run(4200.0, [_row("amax", "reduce_ops", 2.5)]))
    assert third["copy_GBps_runs"] == [4100.0, 4200.0]
    assert {r["op"]: r["copy_GBps"] for r in third["rows"] if "copy_GBps" in r} == {"sum": 4100.0}


def test_merge_drops_an_earlier_runs_unavailable_provider_that_this_run_timed():
    first = dict(_run(4000.0, [_row("softmax", "reduce_ops", 1.0)]),
                 unavailable={"liger": "ModuleNotFoundError", "quack": "ModuleNotFoundError"})
    second = bench.merge_results(first, _run(4100.0, [_row("softmax", "liger", 1.2)]))
    assert second["unavailable"] == {"quack": "ModuleNotFoundError"}
    third = bench.merge_results(second, dict(_run(4200.0, []), unavailable={"liger": "ImportError"}))
    assert third["unavailable"] == {"quack": "ModuleNotFoundError", "liger": "ImportError"}


def test_merge_keeps_a_peers_version_while_its_rows_are_kept():
    first = dict(_run(4000.0, [_row("softmax", "liger", 1.0), _row("sum", "reduce_ops", 1.0)]),
                 versions={"torch": "2.11", "liger": "0.8.5", "quack": "0.1"})
    # A run without liger installed re-measures the sum only: liger's rows and version stay;
    # quack timed no kept row, so its version goes.
    second = bench.merge_results(first, dict(_run(4100.0, [_row("sum", "reduce_ops", 1.5)]),
                                             versions={"torch": "2.12"}))
    assert second["versions"] == {"torch": "2.12", "liger": "0.8.5"}
    # Once liger's rows are re-measured by a run that has it, that run's version is the one.
    third = bench.merge_results(second, dict(_run(4200.0, [_row("softmax", "liger", 1.1)]),
                                             versions={"torch": "2.12", "liger": "0.9"}))
    assert third["versions"] == {"torch": "2.12", "liger": "0.9"}


def test_reductions_take_the_read_flush_whatever_their_output():
    # bench.Case.writes: reductions are timed after the flush that reads, ops that write after
    # do_bench's zero-fill. 8 x 2^24 over dim 0 writes 1/8 of what it reads, and took the zero-fill
    # until session 97, which billed it 7 us a call (78.2 against 71.0 back to back).
    assert not bench.Case("sum", (8, 2**24), 0, "bfloat16").writes
    assert not bench.Case("amax", (442368, 128), -1, "float32").writes
    assert not bench.Case("sum", (2**20,), None, "float32").writes
    assert all(bench.Case(op, (8, 2**24), -1, "float32").writes
               for op in ("softmax", "reduce_scale", "softmax_backward"))


def test_merge_gives_kept_rows_their_runs_commit():
    first = dict(_run(4000.0, [_row("sum", "reduce_ops", 1.0), _row("amax", "reduce_ops", 2.0)]), commit="aaa")
    second = bench.merge_results(first, dict(_run(4100.0, [_row("sum", "reduce_ops", 1.5)]), commit="bbb"))
    assert second["commit"] == "bbb"
    assert {r["op"]: r.get("commit") for r in second["rows"]} == {"amax": "aaa", "sum": None}
    # A row kept twice keeps the commit of the run that timed it, not that of the file it sat in.
    third = bench.merge_results(second, dict(_run(4200.0, []), commit="ccc"))
    assert {r["op"]: r.get("commit") for r in third["rows"]} == {"amax": "aaa", "sum": "bbb"}


def test_versions_name_reduce_ops_and_the_checkout():
    assert "reduce_ops" in bench.versions()  # installed, or imported from the source tree
    commit = bench.checkout_commit()
    assert commit is None or (len(commit.rstrip("+")) == 40 and set(commit.rstrip("+")) <= set("0123456789abcdef"))


def test_cuda_timer_resets_the_persisting_l2_before_each_timing():
    # Lines our row kernels load evict_last outlive the timer's flushes (the L2's persisting
    # set-aside), so each time() resets them first: no provider finds what the one before it left.
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    timer = bench.Timer("cuda", warmup_ms=1, rep_ms=1)
    assert timer.l2_reset, "the driver's cuCtxResetPersistingL2Cache was not found"
    assert "persisting lines reset" in timer.kind
    resets = []
    reset = timer._reset_l2
    timer._reset_l2 = lambda: (resets.append(1), reset())
    x = torch.ones(1024, device="cuda")
    timer.time(lambda: x.sum(), writes=False)
    timer.time(lambda: x.add(1))
    assert len(resets) == 2


def test_outputs_are_checked_against_torch_in_float64_rounded_to_the_dtype():
    # bench.reference: torch's own code in float64 on the same inputs, rounded to the case's
    # dtype, not torch eager's output (whose 16-bit softmax_backward on CUDA is off by more than
    # the check's tolerance where grad and the row's dot product cancel).
    case = bench.Case("softmax_backward", (64, 128), -1, "bfloat16")
    grad, out = bench.make_inputs(case, "cpu", 0)
    ref = bench.reference(case, (grad, out))
    exact = torch.ops.aten._softmax_backward_data(grad.double(), out.double(), -1, torch.float64)
    assert ref.dtype == torch.bfloat16 and torch.equal(ref, exact.to(torch.bfloat16))
    assert bench.close(exact.to(torch.bfloat16), ref, "bfloat16") == (True, "")
