"""examples/quickstart.ipynb runs top to bottom in a fresh `python3` kernel, and is stored clean.

The kernel is started by nbclient with this process's environment and interpreter, and imports
the same `reduce_ops` as the tests: the package's parent folder is put first on the kernel's
PYTHONPATH. The notebook takes a few seconds on a CPU (it picks the GPU when there is one).
"""
import json
import os
import pathlib

import pytest

import reduce_ops

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"
CELL_TIMEOUT_S = 300

_MISSING = "the notebook test needs nbclient, nbformat and ipykernel: `make deps` installs them " \
           "(or: pip install nbclient nbformat ipykernel)"


def test_quickstart_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    dirty = [i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"cells {dirty} of {NOTEBOOK.name} are stored with outputs; clear them"


def test_quickstart_runs(monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason=_MISSING)
    nbclient = pytest.importorskip("nbclient", reason=_MISSING)
    pytest.importorskip("ipykernel", reason=_MISSING)

    # The kernel inherits os.environ: make it import the reduce_ops this process imported.
    package_parent = str(pathlib.Path(reduce_ops.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in [package_parent, os.environ.get("PYTHONPATH")] if p))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # headless, whatever the user's default is

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails

    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), "the benchmark plot did not render"
