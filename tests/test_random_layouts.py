"""Every op against torch on seeded random cases (scripts/fuzz_ops.py): random views (permuted,
sliced with steps and offsets, expanded, channels_last), dims, keepdim, dtypes, output dtypes,
NaN and infinities, empty dims and eps. Sums of small integers and amaxes must equal torch's bit
for bit, softmax and softmax_backward stay within twice torch's own error, reduce_scale within one
rounding (its scale exact), reduce_scale_ agree with reduce_scale on the same strides.
`python scripts/fuzz_ops.py --seconds N` draws more of the same cases for as long as asked."""
import sys
from pathlib import Path

import pytest

from conftest import DEVICES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import fuzz_ops  # noqa: E402

CASES_PER_SEED = 150


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("op", fuzz_ops.OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_random_cases_agree_with_torch(device, op, seed):
    done, failures = fuzz_ops.run(device, seed, count=CASES_PER_SEED, ops=[op])
    assert done == {op: CASES_PER_SEED}
    assert not failures, f"{len(failures)} of {CASES_PER_SEED} cases differ:\n" + "\n".join(failures[:10])
