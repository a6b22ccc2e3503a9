"""Long answers stay quick and readable: versions come a page at a time, and a lineage too large
for a tree is summarised unless asked for whole."""

from __future__ import annotations

import json

import pytest
from rich.cells import cell_len
from rich.console import Console

from governance.catalog import Catalog
from governance.catalog.models import ForeignDataset, ForeignIO, ForeignRun, VersionRow
from governance.foreign.datasets import INPUT, OUTPUT, ident
from governance.lineage.graph import lineage, stream
from governance.lineage.terms import SUMMARY_OVER, Direction
from governance.render import versions_table
from governance.zones import VersionRef
from tests.graphs import EPOCH, add_version, add_versions, random_dag
from tests.helpers import cli


@pytest.fixture
def long_history(cli_env) -> Catalog:
    """t/history with 120 versions."""
    catalog = Catalog.from_settings(cli_env, {})
    add_versions(catalog, "t/history", 120)
    return catalog


def numbers(out: str) -> list[int]:
    return [row["number"] for row in json.loads(out)]


def test_versions_shows_the_newest_fifty_and_how_to_see_older_ones(long_history, capsys):
    code, out, _ = cli(capsys, "versions", "t/history")
    assert code == 0
    assert "versions 71-120, 50 of 120; older: --before 71" in " ".join(out.split())


def test_before_and_limit_page_back(long_history, capsys):
    code, out, _ = cli(capsys, "versions", "t/history", "--before", "71", "--limit", "30", "--json")
    assert code == 0 and numbers(out) == list(range(41, 71))
    code, out, _ = cli(capsys, "versions", "t/history", "--before", "3", "--json")
    assert code == 0 and numbers(out) == [1, 2]


def test_json_is_a_page_too(long_history, capsys):
    code, out, _ = cli(capsys, "versions", "t/history", "--json")
    assert code == 0 and numbers(out) == list(range(71, 121))


def test_all_streams_every_version_oldest_first(long_history, capsys):
    code, out, _ = cli(capsys, "versions", "t/history", "--all", "--json")
    assert code == 0 and numbers(out) == list(range(1, 121))
    assert out.count("\n") == 122  # the brackets, and one version a line


def test_a_short_history_needs_no_caption(cli_env, capsys):
    add_versions(Catalog.from_settings(cli_env, {}), "t/short", 3)
    code, out, _ = cli(capsys, "versions", "t/short")
    assert code == 0 and "older" not in out and "of 3" not in out


def test_all_and_before_together_are_refused(long_history, capsys):
    code, _, err = cli(capsys, "versions", "t/history", "--all", "--before", "5")
    assert code == 2 and "--all lists every version; leave out --before" in " ".join(err.split())


@pytest.fixture
def wide_impact(cli_env) -> Catalog:
    """t/root@1, read by more versions than a tree is shown for."""
    catalog = Catalog.from_settings(cli_env, {})
    root = add_version(catalog, "t/root", 1, zone="landing")
    add_versions(catalog, "t/wide", SUMMARY_OVER, inputs=(root,))
    add_versions(catalog, "t/small", 3, inputs=(root,))
    return catalog


def test_an_impact_past_the_limit_is_summarised_per_asset_and_depth(wide_impact, capsys):
    code, out, _ = cli(capsys, "impact", "t/root@1", "--json")
    assert code == 0
    assert json.loads(out) == {
        "root": "t/root@1",
        "direction": "downstream",
        "versions": SUMMARY_OVER + 4,
        "complete": False,
        "summary": [
            {"asset": "t/root", "depth": 0, "versions": 1},
            {"asset": "t/small", "depth": 1, "versions": 3},
            {"asset": "t/wide", "depth": 1, "versions": SUMMARY_OVER},
        ],
    }
    code, out, _ = cli(capsys, "impact", "t/root@1")
    assert code == 0 and "too many to show as a tree: --all shows it whole" in " ".join(out.split())


def test_all_with_json_streams_every_version_once_nearest_first_naming_its_next_hops(wide_impact, capsys):
    code, out, _ = cli(capsys, "impact", "t/root@1", "--all", "--json")
    streamed = json.loads(out)
    assert code == 0 and len(streamed) == SUMMARY_OVER + 4
    root, first, *_ = streamed
    assert (root["asset"], root["version"], root["depth"]) == ("t/root", 1, 0)
    assert len(root["dependents"]) == SUMMARY_OVER + 3 and root["dependents"][:2] == ["t/small@1", "t/small@2"]
    assert (first["asset"], first["version"], first["depth"], first["dependents"]) == ("t/small", 1, 1, [])
    assert {f"{v['asset']}@{v['version']}" for v in streamed} == {"t/root@1", *root["dependents"]}


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("direction", [Direction.UPSTREAM, Direction.DOWNSTREAM])
def test_the_streamed_lineage_holds_the_tree_s_versions_and_edges(cli_env, seed, direction):
    catalog = Catalog.from_settings(cli_env, {})
    inputs_of = random_dag(catalog, seed)
    root = max(inputs_of) if direction is Direction.UPSTREAM else min(inputs_of)
    with catalog.session() as session:
        ref = VersionRef.parse(session.get(VersionRow, root).ref)
    tree = lineage(catalog, ref, direction, depth=4)
    streamed = list(stream(catalog, ref, direction, depth=4))
    key = direction.children_key
    assert [(v["asset"], v["version"], v["depth"]) for v in streamed] == sorted(
        {(n.asset, n.version, n.depth) for n in tree.root.walk()}, key=lambda a: (a[2], a[0], a[1])
    )
    assert {(f"{v['asset']}@{v['version']}", hop) for v in streamed for hop in v[key]} == {
        (node.ref, link.ref) for node in tree.root.walk() for link in node.links
    }
    assert {f"{v['asset']}@{v['version']}" for v in streamed if v["truncated"]} == {
        node.ref for node in tree.root.walk() if node.truncated
    }


def test_a_foreign_run_that_read_versions_at_two_depths_is_expanded_once_nearest_the_root_as_in_the_tree(cli_env):
    catalog = Catalog.from_settings(cli_env, {})
    root = add_version(catalog, "t/root", 1, zone="landing")
    middle = add_version(catalog, "t/middle", 1, inputs=(root,))
    leaf = add_version(catalog, "t/leaf", 1, inputs=(middle,))
    read_by_one_run(catalog, [middle, leaf])
    ref = VersionRef.parse("t/root@1")
    tree = {
        node.ref: [run.to_dict() for run in node.foreign]
        for node in lineage(catalog, ref, Direction.DOWNSTREAM).root.walk()
    }
    streamed = {f"{v['asset']}@{v['version']}": v["foreign_jobs"] for v in stream(catalog, ref, Direction.DOWNSTREAM)}
    assert streamed == tree
    [expanded], [again] = streamed["t/middle@1"], streamed["t/leaf@1"]
    assert expanded["outputs"] and not again["outputs"]


def read_by_one_run(catalog: Catalog, version_ids: list[int]) -> None:
    """One foreign run that read each of the versions and wrote one table."""
    with catalog.session() as session:
        session.add(
            ForeignRun(
                run_id="run-1",
                job_namespace="airflow",
                job_name="reports.build",
                producer="test",
                state="COMPLETE",
                state_time="2026-11-27T10:00:00+00:00",
                reporter="lineage-bot",
            )
        )
        datasets = [
            ForeignDataset(namespace="file", name=f"/lake/v{vid}", ident=ident("file", f"/lake/v{vid}"), key=f"in{vid}")
            for vid in version_ids
        ]
        table = ForeignDataset(namespace="postgres://w", name="r.t", ident=ident("postgres://w", "r.t"), key="out")
        session.add_all([*datasets, table])
        session.flush()
        for vid, dataset in zip(version_ids, datasets, strict=True):
            session.add(ForeignIO(run_id="run-1", direction=INPUT, dataset_id=dataset.id, version_id=vid))
        session.add(ForeignIO(run_id="run-1", direction=OUTPUT, dataset_id=table.id))
        session.commit()


def test_an_unknown_version_streams_nothing_and_says_so(wide_impact, capsys):
    code, out, err = cli(capsys, "impact", "t/root@9", "--all", "--json")
    assert code != 0 and out == "" and "t/root@9" in err


def test_a_depth_that_keeps_it_small_shows_the_tree(wide_impact, capsys):
    code, out, _ = cli(capsys, "provenance", "t/wide@1", "--json")
    assert code == 0 and json.loads(out)["inputs"][0]["asset"] == "t/root"


def page(width: int, rows: list[VersionRow], total: int | None = None) -> str:
    console = Console(width=width, record=True, highlight=False, emoji=False)
    console.print(versions_table("t/history", rows, total, width=width))
    return console.export_text()


def version(number: int, *, label: str | None = "2026-11-23T14", quarantined: int = 3, by: str = "bob") -> VersionRow:
    return VersionRow(
        asset_key="t/history",
        number=number,
        data_version="0123456789abcdef",
        zone="landing",
        path="/v",
        rows=1000,
        rows_quarantined=quarantined,
        bytes=1,
        table_schema="{}",
        created_at=EPOCH,
        code_version="c",
        spec_hash="s",
        requested_by=by,
        attempt_id=f"a{number}",
        run_id="21ac4517-run",
        label=label,
    )


def header_of(text: str) -> str:
    return next(line for line in text.splitlines() if "version" in line and "created" in line)


def test_on_a_narrow_terminal_run_and_data_version_give_way_first_and_a_line_names_them():
    text = page(100, [version(1), version(2)])
    assert [name for name in ("label", "quarantined", "requested by") if name not in header_of(text)] == []
    assert "not shown at this width: run, data_version" in text and "…" not in text
    assert max(cell_len(line) for line in text.splitlines()) <= 100


def test_at_80_columns_quarantined_goes_too_and_the_label_stays():
    text = page(80, [version(1), version(2)])
    assert "label" in header_of(text) and "quarantined" not in header_of(text)
    assert "not shown at this width: run, data_version, quarantined" in text
    assert max(cell_len(line) for line in text.splitlines()) <= 80


def test_columns_with_nothing_in_them_go_before_any_other():
    text = page(100, [version(1, label=None, quarantined=0)])
    assert "not shown, with nothing in them on this page: label, quarantined\n" in text
    assert "run" in header_of(text) and "not shown at this width" not in text


def test_wide_characters_and_brackets_are_measured_as_shown():
    text = page(110, [version(1, label="月次売上の訂正版"), version(2, label="[a][b][c][d][e][f]")])
    assert "月次売上の訂正版" in text and "[a][b][c][d][e][f]" in text and "…" not in text


def test_a_long_name_wraps_rather_than_being_cut():
    text = page(60, [version(1, by="firstname.lastname@example.com")])
    assert "…" not in text and "me@example.com" in text


def test_a_page_without_versions_says_so_without_an_empty_table():
    assert [line.strip() for line in page(80, [], 120).splitlines()] == [
        "Versions of t/history",
        "no versions on this page, of 120",
    ]


def test_versions_fits_an_80_column_terminal(long_history, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "versions", "t/history")
    assert code == 0
    assert max(cell_len(line) for line in out.splitlines()) <= 80 and "…" not in out
    assert "not shown, with nothing in them on this page: label, quarantined, state" in out


def test_a_wide_terminal_shows_every_version_column(long_history, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(capsys, "versions", "t/history")
    header = next(line for line in out.splitlines() if "version" in line and "created" in line)
    assert [
        name for name in ("label", "quarantined", "data_version", "requested by", "run", "state") if name not in header
    ] == []
    assert code == 0 and "not shown" not in out
