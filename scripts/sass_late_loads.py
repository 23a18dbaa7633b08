#!/usr/bin/env python3
"""Counts the kernels that issue an input load after using an earlier load's value.

    cuobjdump -sass reduce.o > reduce.sass      # an object or cubin built for sm_90
    python3 scripts/sass_late_loads.py reduce.sass _ZN10reduce_ops4cuda22reduce_few_rows_kernel

The memory-bound kernels here mean to have all of a round's 16-byte loads in flight before their
first fold; when ptxas schedules a load after an instruction that reads a pending load's register,
that load waits for the earlier one to land: a second memory round trip. The scan is straight-line
per kernel (no CFG): it follows LDG.E.128/64 destinations, and a load counts as late when some
instruction before it read a pending load's register under a predicate that can hold together with
the load's own (@P0 reads do not make an @!P0 load late: if-converted branches). Loop heads and
the instruction after an unconditional BRA or EXIT start afresh, so a loop's next round does not
count. Prints each late kernel (demangled) and "N of M kernels ..." for those whose mangled name
starts with PREFIX.
"""
import re
import subprocess
import sys

# Opcodes with no destination register: every register operand is read.
NO_DEST = ("ST", "BRA", "EXIT", "BAR", "RED", "BSSY", "BSYNC", "WARPSYNC", "CALL", "RET", "ISETP",
           "FSETP", "DSETP", "HSETP2", "PLOP3", "NOP", "MEMBAR", "ERRBAR", "CCTL", "FENCE")


def predicate(ins):
    m = re.match(r"^@(!?)(U?P\w+)\s+", ins)
    return (m.group(2), m.group(1) == "!") if m else None


def exclusive(a, b):
    """Whether two guards can never both hold (@P0 and @!P0)."""
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]


def late_loads(body):
    """(late, total) input loads of one kernel's SASS text."""
    pairs = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", body)
    addrs = [int(a, 16) for a, _ in pairs]
    ins = [s for _, s in pairs]
    loop_heads = {int(t, 16) for a, s in pairs for t in re.findall(r"BRA\s+0x([0-9a-f]+)", s) if int(t, 16) <= int(a, 16)}
    pending = {}     # register -> the load that writes it
    used_under = set()  # guards under which a pending register was read
    late = total = 0
    for i, s in enumerate(ins):
        if addrs[i] in loop_heads or (i and re.match(r"(BRA|EXIT)\b", ins[i - 1])):
            pending, used_under = {}, set()
        body_ = re.sub(r"^@!?U?P\w+\s+", "", s)
        m = re.match(r"LDG\.E\.(128|64)(?:\.CONSTANT)?\s+R(\d+),", body_)
        if m:
            total += 1
            guard = predicate(s)
            late += any(not exclusive(u, guard) for u in used_under)
            for r in range(int(m.group(2)), int(m.group(2)) + (4 if m.group(1) == "128" else 2)):
                pending[r] = i
            continue
        parts = body_.split(None, 1)
        if len(parts) < 2:
            continue
        op, rest = parts
        operands = [o.strip() for o in rest.split(",")]
        has_dest = not op.startswith(NO_DEST)
        regs = set()
        for o in operands[1:] if has_dest else operands:
            regs |= {int(x) for x in re.findall(r"\bR(\d+)\b", o)}
            regs |= {int(x) + 1 for x in re.findall(r"\bR(\d+)\.64", o)}  # a 64-bit pair's high half
        if regs & pending.keys():
            used_under.add(predicate(s))
        if has_dest and not s.startswith("@"):
            d = re.findall(r"^R(\d+)", operands[0])
            if d:
                pending.pop(int(d[0]), None)
    return late, total


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    path, prefix = sys.argv[1:]
    kernels = late_kernels = 0
    for chunk in open(path).read().split("Function : ")[1:]:
        name = chunk.split("\n", 1)[0].strip()
        if not name.startswith(prefix):
            continue
        kernels += 1
        late, total = late_loads(chunk)
        if late:
            late_kernels += 1
            demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
            print(f"{late}/{total} late  {demangled[:160]}")
    print(f"{late_kernels} of {kernels} kernels issue input loads after using an earlier load's value")


if __name__ == "__main__":
    main()
