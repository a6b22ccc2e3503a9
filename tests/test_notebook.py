"""The auditor's notebook: committed without outputs, and run top to bottom on the demo's catalog."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.helpers import cli

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "auditor.ipynb"


def code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_the_notebook_is_committed_with_its_outputs_cleared():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code_cells(notebook))


def test_jupyters_checkpoints_beside_the_notebook_are_ignored_by_git():
    checkpoint = NOTEBOOK.parent / ".ipynb_checkpoints" / "auditor-checkpoint.ipynb"
    assert (
        subprocess.run(["git", "check-ignore", "-q", str(checkpoint)], check=False, cwd=NOTEBOOK.parent).returncode == 0
    )


def test_the_notebook_runs_top_to_bottom_on_the_demo(cli_env, spark, capsys, monkeypatch):
    assert cli(capsys, "demo")[0] == 0
    monkeypatch.delenv("CUSTODY_SPECS")  # as `make notebook` runs it: the catalog is all it reads
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    started = time.monotonic()
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    print(f"auditor.ipynb ran in {time.monotonic() - started:.1f}s")
    shown = [output for cell in code_cells(notebook) for output in cell.outputs]
    assert not [output for output in shown if output.output_type == "error"]
    pictures = [output.data["image/svg+xml"] for output in shown if "image/svg+xml" in output.get("data", {})]
    assert len(pictures) == 3 and all("sales/product_summary" in svg or "sales/clients@1" in svg for svg in pictures)
    tables = "".join(output.data["text/html"] for output in shown if "text/html" in output.get("data", {}))
    assert "sales/product_summary" in tables and "denied" in tables and "carol" in tables
    verification = code_cells(notebook)[-1].outputs[-1].data
    assert "Verification(" not in verification["text/plain"]
    assert "entries, chain intact" in verification["text/plain"]
    assert "checkpoints are not verified: CUSTODY_LEDGER_KEY is not set" in verification["text/html"]
