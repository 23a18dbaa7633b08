"""A/B timing of developer knobs on any shape, in one process (CUDA only).

    python scripts/rows_ab.py --ops reduce_scale,softmax --shapes 1048576x12,262144x20 \
        --dtypes bfloat16 --mode auto --mode packs_off=REDUCE_OPS_HALF_PACKS=off --compile

Each --mode NAME[=VAR=VALUE[,VAR=VALUE...]] sets those REDUCE_OPS_* variables (the launcher reads
them at every call) and unsets the ones the other modes set. Modes are timed in turn, --rounds
times over, so that a drift of the machine touches every mode alike; each case prints every
round's time (us) and the median. Each mode's result is checked against the first mode's (the
same bits for reduce_scale, within bench.py's tolerance otherwise). The timer, inputs and the
least-traffic byte count are benchmarks/bench.py's; "% copy" is against its 1 GiB copy, measured
in the same run. --compile and --torch add torch.compile and torch eager as peers. --inputs N
times calls over N copies of the input in turn. --graph times
each inside CUDA graphs instead (launch-bound sizes; bench.py --graph's plan of calls over
rotated copies of the input, one plan for every mode and peer of a case).
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402


def parse_mode(text):
    name, _, rest = text.partition("=")
    env = {}
    for item in filter(None, rest.split(",")):
        var, sep, value = item.partition("=")
        if not sep or not var.startswith("REDUCE_OPS_"):
            raise argparse.ArgumentTypeError(f"{item!r}: expected REDUCE_OPS_VAR=VALUE")
        env[var] = value
    return name, env


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="softmax,reduce_scale")
    p.add_argument("--shapes", required=True, help="comma list of ROWSxCOLS (or N for 1-D)")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--dim", type=int, default=-1)
    p.add_argument("--mode", type=parse_mode, action="append", default=[], help="NAME[=VAR=VALUE,...]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=float, default=60.0, help="timed repetitions per round, ms")
    p.add_argument("--compile", action="store_true", help="time torch.compile too")
    p.add_argument("--torch", action="store_true", help="time torch eager too")
    p.add_argument("--inputs", type=int, default=1,
                   help="time calls over this many copies of the input in turn (not with --graph), "
                        "so that no call finds its input where the previous call left it")
    p.add_argument("--graph", action="store_true",
                   help="time inside CUDA graphs (bench.py --graph's plan: calls over rotated input "
                        "copies), for launch-bound sizes; a mode's knobs apply at its capture")
    args = p.parse_args(argv)
    if args.inputs < 1 or (args.inputs > 1 and args.graph):
        p.error("--inputs takes a count of at least 1, and not with --graph (which rotates copies of its own)")
    modes = args.mode or [("auto", {})]
    knobs = {var for _, env in modes for var in env}

    timer = bench.Timer("cuda", warmup_ms=10, rep_ms=args.rep)
    copy = bench.measure_copy(timer, "cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, copy {copy:.0f} GB/s")
    peers = [name for name, on in (("torch.compile", args.compile), ("torch", args.torch)) if on]
    providers, unavailable = bench.load_providers(["reduce_ops", *peers], "cuda")
    if "reduce_ops" not in providers:
        raise SystemExit(f"reduce_ops: {unavailable.get('reduce_ops')}")

    for op in args.ops.split(","):
        for dtype in args.dtypes.split(","):
            for text in args.shapes.split(","):
                shape = tuple(int(v) for v in text.split("x"))
                case = bench.Case(op, shape, args.dim if len(shape) > 1 else 0, dtype)
                inputs = bench.make_inputs(case, "cuda", seed=0)

                def copies(n):  # the inputs and n - 1 copies of them
                    return [inputs] + [tuple(t.clone() for t in inputs) for _ in range(n - 1)]

                turns = copies(args.inputs)
                ours = providers["reduce_ops"].fn(case)

                plan = []  # with --graph: (calls, input sets), one plan for every mode and peer

                def timed(fn):
                    if not args.graph:
                        turn = [0]

                        def call():
                            turn[0] = (turn[0] + 1) % len(turns)
                            return fn(*turns[turn[0]])

                        return timer.time(call, case.writes)
                    if not plan:
                        calls, n_copies = bench.graph_plan(case, timer.time(lambda: fn(*inputs), case.writes), timer)
                        plan.extend([calls, copies(n_copies)])
                    return timer.time_graph([lambda s=s: fn(*s) for s in plan[1]], plan[0], case.writes)

                times = {name: [] for name, _ in modes}
                results = {}
                for _ in range(args.rounds):
                    for name, env in modes:
                        for var in knobs:
                            os.environ.pop(var, None)
                        os.environ.update(env)
                        times[name].append(timed(ours))
                        if name not in results:
                            results[name] = ours(*inputs)
                for var in knobs:
                    os.environ.pop(var, None)
                for peer in peers:
                    fn = providers[peer].fn(case)
                    times[peer] = [timed(fn) for _ in range(args.rounds)]
                print(f"{op} {text} {dtype}:")
                first = modes[0][0]
                for name, ts in times.items():
                    med = statistics.median(ts)
                    pct = case.bytes / med / 1e3 / copy * 100
                    check = ""
                    if name in results and name != first:
                        a, b = bench._as_tuple(results[first]), bench._as_tuple(results[name])
                        if op == "reduce_scale":
                            same = all(torch.equal(x, y) for x, y in zip(a, b))
                            check = "  same bits" if same else "  DIFFERENT BITS"
                        else:
                            ok, _ = bench.close(results[name], results[first], dtype)
                            check = "" if ok else "  MISMATCH"
                    rounds = " ".join(f"{t:.2f}" for t in ts)
                    print(f"  {name:<16} {med:8.2f} us  {pct:5.1f}% copy  [{rounds}]{check}")


if __name__ == "__main__":
    main()
