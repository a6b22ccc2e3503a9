"""The auditor's notebook: committed without outputs, and run top to bottom on the demo's catalog."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from sqlmodel import select

from governance.api import Custody
from governance.catalog.models import VersionRow
from governance.demo import demo_password
from governance.foreign.events import parse
from governance.foreign.join import receive
from governance.foreign.judge import reader_judge
from tests.helpers import cli, recorded

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "auditor.ipynb"
TAG_FACET = {
    "_producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.6.0",
    "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/TagsRunFacet.json#/$defs/TagsRunFacet",
}


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


def report_a_foreign_read(custody: Custody) -> None:
    """A job Custody does not run reads sales/clients@1 as mallory, who holds no role on it, and
    writes a table, as its OpenLineage events tell the service."""
    with custody.store.session() as session:
        [path] = session.exec(
            select(VersionRow.path).where(VersionRow.asset_key == "sales/clients", VersionRow.number == 1)
        ).all()
    run_id = str(uuid.uuid4())
    events = [
        {
            "eventType": state,
            "eventTime": f"2026-11-27T05:00:0{second}Z",
            "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.6.0",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": run_id, "facets": {"tags": {**TAG_FACET, "tags": [{"key": "user", "value": "mallory"}]}}},
            "job": {"namespace": "airflow://scheduler.example", "name": "reports.client_export"},
            "inputs": [{"namespace": "file", "name": str(Path(custody.lake.root).resolve() / path)}],
            "outputs": [{"namespace": "postgres://warehouse:5432", "name": "marts.public.client_export"}],
        }
        for second, state in enumerate(("START", "COMPLETE"))
    ]
    judge = reader_judge(custody.policy, lambda: custody.specs)
    receive(custody.store, custody.lake, parse(json.dumps(events).encode()), "lineage-bot", judge)


def test_the_notebook_runs_top_to_bottom_on_the_demo(cli_env, spark, capsys, monkeypatch):
    assert cli(capsys, "demo")[0] == 0
    report_a_foreign_read(Custody.from_env())
    monkeypatch.delenv("CUSTODY_SPECS")  # as `make notebook` runs it: the catalog is all it reads
    monkeypatch.setenv("CUSTODY_AUDITOR", "dave")  # and names the demo's auditor
    monkeypatch.setenv("CUSTODY_PASSWORD", demo_password("dave"))
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
    impact = next(svg for svg in pictures if "sales/clients@1" in svg)
    assert "reports.client_export" in impact and "not run by Custody" in impact
    tables = "".join(output.data["text/html"] for output in shown if "text/html" in output.get("data", {}))
    assert "sales/product_summary" in tables and "denied" in tables and "carol" in tables
    assert "mallory" in tables and "airflow://scheduler.example/reports.client_export" in tables
    verification = code_cells(notebook)[-1].outputs[-1].data
    assert "Verification(" not in verification["text/plain"]
    assert "entries, chain intact" in verification["text/plain"]
    assert "checkpoints are not verified: CUSTODY_LEDGER_KEY is not set" in verification["text/html"]
    # The demo shows its reads as dave too; the notebook asks who read clients@1, then reads the ledger.
    [by_the_demo, readers, read] = recorded(action="ledger.read")
    assert (readers["actor"], readers["details"]["readers"]) == ("dave", "sales/clients@1")
    assert by_the_demo["actor"] == "dave" and (read["actor"], read["details"]["result"], read["details"]["method"]) == (
        "dave",
        "allowed",
        "password",
    )
