"""Every notebook runs top to bottom on CPU and is stored without outputs."""

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    # Cell ids are required from nbformat 4.5 on; nbformat.read adds missing ones in memory
    # (with a MissingIDFieldWarning that says it will become an error), so read the file.
    ids = [cell.get("id") for cell in json.loads(path.read_text())["cells"]]
    assert None not in ids and len(set(ids)) == len(ids), f"{path.name}: cell ids {ids}"
    nb = nbformat.read(path, as_version=4)
    assert "colab-badge" in nb.cells[0].source, "first cell must be the Open in Colab badge"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


@pytest.mark.slow  # executes the notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
