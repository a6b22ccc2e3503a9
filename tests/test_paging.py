"""Long answers stay quick and readable: versions come a page at a time, and a lineage too large
for a tree is summarised unless asked for whole."""

from __future__ import annotations

import json

import pytest

from governance.catalog import Catalog
from governance.lineage.graph import SUMMARY_OVER
from tests.graphs import add_version, add_versions
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
        "root": "t/root@1", "direction": "downstream", "versions": SUMMARY_OVER + 4, "complete": False,
        "summary": [{"asset": "t/root", "depth": 0, "versions": 1}, {"asset": "t/small", "depth": 1, "versions": 3},
                    {"asset": "t/wide", "depth": 1, "versions": SUMMARY_OVER}],
    }
    code, out, _ = cli(capsys, "impact", "t/root@1")
    assert code == 0 and "too many to show as a tree: --all shows it whole" in " ".join(out.split())


def test_all_shows_the_whole_tree(wide_impact, capsys):
    code, out, _ = cli(capsys, "impact", "t/root@1", "--all", "--json")
    tree = json.loads(out)
    assert code == 0 and tree["asset"] == "t/root" and len(tree["dependents"]) == SUMMARY_OVER + 3


def test_a_depth_that_keeps_it_small_shows_the_tree(wide_impact, capsys):
    code, out, _ = cli(capsys, "provenance", "t/wide@1", "--json")
    assert code == 0 and json.loads(out)["inputs"][0]["asset"] == "t/root"


def test_versions_fits_a_narrow_terminal_by_leaving_columns_out_and_naming_them(long_history, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "versions", "t/history")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    [note] = [line.strip() for line in out.splitlines() if line.startswith("not shown at this width: ")]
    header = next(line for line in out.splitlines() if "version" in line and "created" in line)
    left_out = note.removeprefix("not shown at this width: ").split(", ")
    assert left_out and not [name for name in left_out if name in header]
    assert [name for name in ("version", "created (UTC)", "rows", "requested by") if name not in header] == []


def test_a_wide_terminal_shows_every_version_column(long_history, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(capsys, "versions", "t/history")
    header = next(line for line in out.splitlines() if "version" in line and "created" in line)
    assert [name for name in ("label", "quarantined", "data_version", "requested by", "run", "state") if name not in header] == []
    assert code == 0 and "not shown" not in out
