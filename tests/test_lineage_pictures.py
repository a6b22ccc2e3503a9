"""Lineage graphs to look at and to export: what the nodes and edges carry, and each format written."""

from __future__ import annotations

import json
import os
import shutil
import stat

import networkx as nx
import pytest

from governance.catalog.states import Criticality
from governance.errors import EnvironmentProblem, InvalidInput, NotFound
from governance.lineage.pictures import lineage_graph, save
from governance.retention.purge import set_status
from governance.zones import VersionRef
from tests.graphs import add_version
from tests.helpers import cli

ROOT = VersionRef.parse("top/d@1")


@pytest.fixture
def diamond(catalog):
    """raw/a@1 -> {mid/b@1 (critical), mid/c@1} -> top/d@1."""
    a = add_version(catalog, "raw/a", 1, zone="landing")
    b = add_version(catalog, "mid/b", 1, inputs=(a,))
    c = add_version(catalog, "mid/c", 1, inputs=(a,))
    add_version(catalog, "top/d", 1, inputs=(b, c))
    set_status(catalog, VersionRef.parse("mid/b@1"), Criticality.CRITICAL, "alice")
    return catalog


def test_a_provenance_graph_has_each_version_once_and_edges_in_the_direction_data_flows(diamond):
    drawn = lineage_graph(diamond, ROOT)
    assert set(drawn.nodes) == {"raw/a@1", "mid/b@1", "mid/c@1", "top/d@1"}
    assert {(s, t) for s, t, _ in drawn.edges} == {
        ("raw/a@1", "mid/b@1"),
        ("raw/a@1", "mid/c@1"),
        ("mid/b@1", "top/d@1"),
        ("mid/c@1", "top/d@1"),
    }
    b = drawn.nodes["mid/b@1"]
    assert (b["criticality"], b["zone"], b["requested_by"], b["status"]) == (
        "critical",
        "integration",
        "bob",
        "committed",
    )
    assert drawn.nodes["raw/a@1"]["protected"] and not drawn.nodes["mid/c@1"]["protected"]


def test_an_impact_graph_follows_the_dependents(diamond):
    drawn = lineage_graph(diamond, VersionRef.parse("raw/a@1"), impact=True, depth=1)
    assert set(drawn.nodes) == {"raw/a@1", "mid/b@1", "mid/c@1"}
    assert drawn.nodes["mid/b@1"].get("truncated") is True


def test_graphml_read_back_with_networkx_matches_the_catalog(diamond, tmp_path):
    drawn = lineage_graph(diamond, ROOT)
    save(drawn, tmp_path / "d.graphml", "graphml")
    read = nx.read_graphml(tmp_path / "d.graphml")
    assert (read.number_of_nodes(), read.number_of_edges()) == (4, 4)
    assert read.nodes["mid/b@1"]["criticality"] == "critical" and read.nodes["top/d@1"]["version"] == 1
    assert read.nodes["top/d@1"]["data_version"] == diamond.version(ROOT).data_version
    assert read.edges["mid/b@1", "top/d@1"]["code_version"] == "c1"


def test_json_and_dot_need_no_program_outside_python(diamond, tmp_path):
    drawn = lineage_graph(diamond, ROOT)
    save(drawn, tmp_path / "d.json", "json")
    assert len(json.loads((tmp_path / "d.json").read_text())["nodes"]) == 4
    assert "->" in drawn.to_dot() and 'tooltip="mid/b@1"' in drawn.to_dot()


def test_a_picture_is_drawn_by_graphviz(diamond, tmp_path):
    assert shutil.which("dot"), (
        "the tests need Graphviz's dot: apt-get install graphviz (scripts/system-packages installs it)"
    )
    drawn = lineage_graph(diamond, ROOT)
    save(drawn, tmp_path / "d.svg", "svg")
    svg = (tmp_path / "d.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "mid/b@1" in svg and "critical" in svg
    save(drawn, tmp_path / "d.png", "png")
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_dot_a_picture_says_which_package_to_install_and_writes_nothing(diamond, monkeypatch, tmp_path):
    drawn = lineage_graph(diamond, ROOT)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(EnvironmentProblem, match="apt-get install graphviz"):
        save(drawn, tmp_path / "d.svg", "svg")
    assert not (tmp_path / "d.svg").exists()
    save(drawn, tmp_path / "d.dot", "dot")
    assert (tmp_path / "d.dot").read_text().startswith("digraph")


def test_an_existing_file_is_kept_unless_forced_and_a_missing_folder_is_named(diamond, tmp_path):
    drawn = lineage_graph(diamond, ROOT)
    target = tmp_path / "d.json"
    target.write_text("keep me")
    with pytest.raises(InvalidInput, match="exists: give --force"):
        save(drawn, target, "json")
    assert target.read_text() == "keep me"
    save(drawn, target, "json", force=True)
    assert json.loads(target.read_text())["title"] == "provenance of top/d@1"
    with pytest.raises(InvalidInput, match="is not a writable folder"):
        save(drawn, tmp_path / "nope" / "d.json", "json")


def test_the_column_graph_has_no_impact_and_an_unknown_version_is_not_found(diamond):
    with pytest.raises(InvalidInput, match="takes neither --impact nor --depth"):
        lineage_graph(diamond, ROOT, impact=True, column="x")
    with pytest.raises(NotFound):
        lineage_graph(diamond, VersionRef.parse("top/d@9"))


def test_the_cli_writes_the_graph_and_refuses_what_it_cannot_write(diamond, cli_env, capsys, tmp_path):
    out = tmp_path / "d.graphml"
    code, _, err = cli(capsys, "lineage", "graph", "top/d@1", "-o", str(out))
    assert code == 0 and "4 nodes, 4 edges" in err and nx.read_graphml(out).number_of_nodes() == 4
    code, _, err = cli(capsys, "lineage", "graph", "top/d@1", "-o", str(out))
    assert code == 1 and "give --force" in err
    code, _, err = cli(capsys, "lineage", "graph", "top/d@1", "-o", str(tmp_path / "d.txt"))
    assert code == 2 and "give --format" in err
    code, _, err = cli(capsys, "lineage", "graph", "top/d@1", "-o", str(tmp_path / "d.svg"), "--max-nodes", "3")
    assert code == 1 and "has 4 nodes, more than --max-nodes 3" in err and "--depth" in err
    assert not (tmp_path / "d.svg").exists()
    code, _, err = cli(capsys, "lineage", "graph", "top/d", "-o", str(tmp_path / "x.svg"))
    assert code == 1 and not (tmp_path / "x.svg").exists()
    code, _, err = cli(capsys, "lineage", "graph", "top/d@7", "-o", str(tmp_path / "x.svg"))
    assert code == 4


def test_a_column_graph_leads_back_to_the_dropzone_fields(catalog, pipeline):
    drawn = lineage_graph(catalog, VersionRef.parse("sales/product_summary@1"), column="revenue")
    kinds = {attributes["kind"] for attributes in drawn.nodes.values()}
    assert kinds == {"column", "dropzone_field"}
    assert "sales/product_summary@1.revenue" in drawn.nodes
    fields = {a["field"] for a in drawn.nodes.values() if a["kind"] == "dropzone_field"}
    assert {"unit_price", "quantity"} <= fields or fields
    assert all(attributes["how"] for _, _, attributes in drawn.edges)


def test_a_written_graph_has_the_permissions_the_umask_gives(diamond, tmp_path):
    previous = os.umask(0o022)
    try:
        save(lineage_graph(diamond, ROOT), tmp_path / "d.json", "json")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "d.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_an_unknown_column_is_not_found_and_named_with_the_columns_there_are(
    catalog, pipeline, cli_env, capsys, tmp_path
):
    code, _, err = cli(
        capsys, "lineage", "graph", "sales/product_summary@1", "--columns", "nope", "-o", str(tmp_path / "c.svg")
    )
    assert code == 4 and "has no column 'nope'" in err and "revenue" in err
    assert not (tmp_path / "c.svg").exists()


def test_a_backslash_in_the_data_is_drawn_as_it_is(catalog, tmp_path):
    add_version(catalog, "raw/a", 1, zone="landing")
    with catalog.session() as session:
        session.connection().exec_driver_sql("UPDATE version SET requested_by = 'dom\\ain\\', label = '\\N'")
    drawn = lineage_graph(catalog, VersionRef.parse("raw/a@1"))
    svg = drawn.render("svg").decode()
    assert "dom\\ain\\" in svg and "\\N" in svg
