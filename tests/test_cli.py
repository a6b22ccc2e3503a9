"""The `custody` command: the contract's outputs, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assets.launch import instance_for
from governance.catalog import Catalog
from governance.demo import CLIENTS, PRODUCTS, drop_demo_batches
from governance.zones import Lake
from tests.conftest import DATA, DEMO_SPECS, drop
from tests.helpers import assert_nothing_committed, cli, recorded, run_proven, sha256_file


@pytest.fixture
def ingested(cli_env, spark, capsys, prepared):
    """Products and the first clients batch ingested, the integration assets materialized, via the CLI."""
    prepared.home(cli_env, "ingested", ingest_and_materialize)
    capsys.readouterr()  # the test reads only what its own commands print
    return cli_env


def ingest_and_materialize(settings):
    dropped = drop_demo_batches(Lake(settings.lake))
    assert run_proven(["ingest", "sales/products", "--as", "bob"]) == 0
    assert run_proven(["ingest", "sales/clients", "--batch", dropped.client_batches[0], "--as", "bob"]) == 0
    assert run_proven(["materialize", "--as", "alice"]) == 0


def test_ingest_runs_through_dagster_with_the_requester_as_tag(ingested, capsys):
    runs = instance_for(ingested).get_runs()
    assert len(runs) == 3
    assert {r.tags["custody/requested_by"] for r in runs} == {"bob", "alice"}
    code, out, _ = cli(capsys, "versions", "sales/clients", "--json")
    assert code == 0 and [v["number"] for v in json.loads(out)] == [1]


def test_provenance_json_has_the_contract_fields_down_to_source_files(ingested, capsys):
    code, out, _ = cli(capsys, "provenance", "sales/product_summary@1", "--json")
    tree = json.loads(out)
    assert code == 0
    for field in ("asset", "version", "data_version", "created_at", "run_id", "code_version", "requested_by", "inputs"):
        assert field in tree
    assert tree["requested_by"] == "alice" and tree["label"] == "15"
    joined = tree["inputs"][0]
    assert joined["asset"] == "sales/names_and_products"
    landing = {node["asset"]: node for node in joined["inputs"]}
    source = landing["sales/clients"]["sources"][0]
    assert Path(source["path"]).name == "clients-v15.json"
    # Relative to the lake, as the catalog keeps it: the DropZone is a zone of the lake.
    assert source["path"].startswith("drop/sales/clients/")
    assert source["sha256"] == sha256_file(Lake(ingested.lake).at(source["path"])) and source["bytes"] > 0


def test_provenance_depth_limits_the_tree(ingested, capsys):
    _code, out, _ = cli(capsys, "provenance", "sales/product_summary@1", "--depth", "1", "--json")
    tree = json.loads(out)
    assert tree["inputs"][0]["inputs"] == [] and tree["inputs"][0]["truncated"] is True


def test_provenance_prints_a_tree(ingested, capsys):
    code, out, _ = cli(capsys, "provenance", "sales/product_summary@1")
    assert code == 0
    assert "sales/product_summary@1" in out and "sales/clients@1" in out and "clients-v15.json" in out


def test_ledger_show_filters_and_verify_passes(ingested, capsys):
    code, out, _ = cli(capsys, "ledger", "show", "--action", "ingestion.committed", "--json", "--as", "dave")
    assert code == 0 and [e["asset_key"] for e in json.loads(out)] == ["sales/products", "sales/clients"]
    code, out, _ = cli(capsys, "ledger", "verify")
    assert code == 5 and "chain intact" in out  # without CUSTODY_LEDGER_KEY the checkpoints are not verified


def test_ledger_verify_names_the_first_tampered_entry(ingested, capsys):
    with Catalog.from_url(ingested.catalog_url).session() as session:
        session.connection().exec_driver_sql("UPDATE ledger SET actor = 'mallory' WHERE seq = 3")
    code, _, err = cli(capsys, "ledger", "verify")
    assert code == 1 and "error: ledger broken at seq 3: content does not match its hash" in err


def test_a_bad_batch_fails_the_run_with_one_clear_line_and_exit_1(cli_env, spark, capsys):
    lake = Lake(cli_env.lake)
    drop(lake, "sales/products", "b1", {"products.csv": DATA / "batches/csv/header_missing.csv"})
    code, _, err = cli(capsys, "ingest", "sales/products", "--as", "bob")
    assert code == 1
    assert "error: sales/products: " in err and "header does not match the spec of sales/products" in err
    assert_nothing_committed_cli(cli_env)


def test_errors_and_tables_show_names_and_data_as_they_are(cli_env, spark, capsys, monkeypatch):
    """No markup is read in what a file or a producer wrote, and no emoji code is replaced."""
    monkeypatch.setenv("COLUMNS", "250")
    lake = Lake(cli_env.lake)
    drop(lake, "sales/products", "b1", {"products.csv": b"product_id,[red]name[/red],:x:,unit_price\n1,a,b,2\n"})
    code, _, err = cli(capsys, "ingest", "sales/products", "--as", "bob")
    assert code == 1
    assert "unexpected [red]name[/red], :x:" in err and "\u274c" not in err
    products = b"product_id,product_name,category,unit_price\np1,Lamp,home,9.50\n"
    drop(lake, "sales/products", "b2", {"products.csv": products}, label="[bold]:x:[/bold]")
    assert cli(capsys, "ingest", "sales/products", "--batch", "b2", "--as", "bob")[0] == 0
    code, out, _ = cli(capsys, "versions", "sales/products")
    assert code == 0 and "[bold]:x:[/bold]" in out


def test_a_refused_batch_prints_one_clean_error_and_dagster_s_own_lines_only_with_verbose(cli_env, spark, capsys):
    drop(Lake(cli_env.lake), "sales/products", "b1", {"products.csv": b"product_id,name\n1,a\n"})
    code, _, err = cli(capsys, "ingest", "sales/products", "--as", "bob")
    assert code == 1
    [error] = [line for line in err.splitlines() if "error" in line.lower()]
    assert error.startswith("error: sales/products: ") and "header" in error
    assert "Traceback" not in err and "Stack Trace" not in err and "dagster - " not in err
    code, _, err = cli(capsys, "--verbose", "ingest", "sales/products", "--as", "bob")
    assert code == 1 and "dagster - ERROR" in err and "STEP_FAILURE" in err


def assert_nothing_committed_cli(settings):
    assert_nothing_committed(Catalog.from_url(settings.catalog_url), Lake(settings.lake), "sales/products")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["ingest", "sales/products", "--as", "bob"], 4, "no ready batch of sales/products in "),
        (["ingest", "sales/nope", "--as", "bob"], 4, "unknown asset sales/nope"),
        (["ingest", "../etc/passwd", "--as", "bob"], 1, "invalid asset key"),
        (["ingest", "sales/product_summary", "--as", "bob"], 1, "is an integration asset"),
        (["provenance", "sales/clients@1"], 4, "no version sales/clients@1"),
        (["provenance", "sales/clients"], 1, "expected DOMAIN/NAME@N"),
        (["versions", "sales/nope"], 4, "unknown asset sales/nope"),
        (["impact", "sales/nope@1"], 4, "no version sales/nope@1: unknown asset sales/nope"),
        (["impact", "sales/clients@x"], 1, "expected DOMAIN/NAME@N"),
        (["status", "sales/clients@1", "critical", "--by", "alice"], 4, "no version sales/clients@1"),
        (["status", "sales/clients@1", "critical"], 3, "may not change the status of sales/clients"),
        (["purge", "sales/clients@1", "--by", "alice"], 4, "no version sales/clients@1; nothing was purged"),
        (["purge"], 3, "may not purge: it needs the admin group"),
        (["materialize", "key:nothing/here", "--as", "bob"], 4, "matches no asset"),
        (["ingest", "sales/products"], 3, "may not ingest sales/products"),
        (["lineage", "columns", "sales/clients@1", "name"], 4, "no version sales/clients@1"),
        (["lineage", "columns", "sales/clients@1", "--origins"], 2, "--origins and --direct need a COLUMN to follow"),
    ],
)
def test_errors_follow_the_exit_code_contract(cli_env, spark, capsys, args, code, message):
    # Whoever --as or --by names proves who they are, so that the commands come to what they ask
    # about; a command that names nobody runs as the OS user running the tests, who holds no role.
    got, _, err = cli(capsys, *args)
    assert got == code, err
    assert message in err


@pytest.mark.parametrize(
    "args",
    [
        ["provenance", "sales/clients@99999999999999999999999"],
        ["impact", "sales/clients@99999999999999999999999"],
        ["lineage", "columns", "sales/clients@99999999999999999999999"],
        ["lineage", "graph", "sales/clients@99999999999999999999999", "-o", "graph.svg"],
        ["read", "sales/clients@99999999999999999999999", "--as", "carol"],
        ["status", "sales/clients@99999999999999999999999", "critical", "--by", "alice"],
        ["purge", "sales/clients@99999999999999999999999", "--by", "alice"],
    ],
)
def test_a_version_past_the_largest_number_the_catalog_keeps_is_not_found_in_one_line(cli_env, capsys, args):
    assert cli(capsys, *args) == (
        4,
        "",
        "error: no version sales/clients@99999999999999999999999: a version is numbered from 1 to 2147483647\n",
    )


@pytest.mark.parametrize(
    "args",
    [
        ["versions", "sales/clients", "--before"],
        ["versions", "sales/clients", "--limit"],
        ["ledger", "show", "--version"],
        ["ledger", "show", "--from-seq"],
        ["ledger", "show", "--limit"],
        ["read", "sales/clients", "--limit"],
    ],
)
def test_a_bound_past_the_largest_number_the_catalog_keeps_is_a_usage_error(cli_env, capsys, args):
    code, out, err = cli(capsys, *args, "9223372036854775808")
    assert (code, out) == (2, "")
    assert (
        err.splitlines()[-1]
        == f"Error: Invalid value for '{args[-1]}': Input should be less than or equal to 2147483647"
    )


def test_specs_check_lists_every_problem(capsys):
    code, _, err = cli(capsys, "specs", "check", str(DATA / "bad_specs" / "many"))
    assert code == 1 and err.startswith("3 problems in asset specs")
    code, out, _ = cli(capsys, "specs", "check", str(DEMO_SPECS), "--json")
    assert code == 0 and json.loads(out) == {"ok": True, "problems": []}


def test_repair_on_a_clean_lake_has_nothing_to_do(cli_env, capsys):
    code, out, _ = cli(capsys, "repair", "--verify")
    assert code == 0 and "nothing to repair" in out


def test_demo_twice_adds_versions_and_never_touches_old_ones(cli_env, spark, capsys):
    assert cli(capsys, "demo")[0] == 0
    catalog = Catalog.from_url(cli_env.catalog_url)
    lake = Lake(cli_env.lake)
    first = {v.ref: {p.name: sha256_file(p) for p in lake.at(v.path).iterdir()} for v in catalog.versions(CLIENTS)}
    code, out, _ = cli(capsys, "demo")
    assert code == 0 and "sales/product_summary@4 label 18" in out
    assert "Origins of sales/product_summary@4.revenue" in out and "DropZone field order.quantity" in out
    assert "Reads of sales/product_summary@4" in out
    assert "carol (verified)" in out and "result=allowed" in out and "eve (verified)" in out and "result=denied" in out
    assert "SELECT * FROM custody.sales.product_summary VERSION AS OF 'custody-v4'" in out
    assert [v.number for v in catalog.versions(CLIENTS)] == [1, 2, 3, 4]
    assert [v.number for v in catalog.versions(PRODUCTS)] == [1, 2]
    for version in catalog.versions(CLIENTS)[:2]:
        assert {p.name: sha256_file(p) for p in lake.at(version.path).iterdir()} == first[version.ref]


def test_impact_lists_the_versions_built_from_a_landing_version(ingested, capsys):
    code, out, _ = cli(capsys, "impact", "sales/clients@1", "--json")
    tree = json.loads(out)
    assert code == 0 and tree["asset"] == "sales/clients"
    [joined] = tree["dependents"]
    assert (joined["asset"], joined["version"], joined["depth"]) == ("sales/names_and_products", 1, 1)
    assert [(n["asset"], n["depth"]) for n in joined["dependents"]] == [("sales/product_summary", 2)]
    assert joined["requested_by"] == "alice" and joined["assurance"] == "verified"


def test_status_critical_protects_upstream_and_both_commands_show_it(ingested, capsys):
    code, out, _ = cli(capsys, "status", "sales/product_summary@1", "critical", "--by", "alice", password="alice-demo")
    assert code == 0 and "protected: sales/product_summary@1 and 3 version(s) upstream of it" in out
    code, out, _ = cli(capsys, "provenance", "sales/product_summary@1", "--json")
    tree = json.loads(out)
    assert tree["criticality"] == "critical"
    assert tree["inputs"][0]["protected"] is True and tree["inputs"][0]["inputs"][0]["protected"] is True
    code, out, _ = cli(capsys, "impact", "sales/products@1")
    assert code == 0 and "protected" in out and "CRITICAL" in out


def test_an_explicit_purge_of_a_protected_version_exits_1_and_changes_nothing(ingested, capsys):
    cli(capsys, "status", "sales/product_summary@1", "critical", "--by", "alice", password="alice-demo")
    code, _, err = cli(capsys, "purge", "sales/clients@1", "--by", "alice", password="alice-demo")
    assert code == 1 and "error: sales/clients@1 is protected: a critical version depends on it" in err
    code, out, _ = cli(capsys, "versions", "sales/clients", "--json")
    assert json.loads(out)[0]["status"] == "committed"


def test_purge_removes_a_version_s_files_and_provenance_shows_it_purged(ingested, capsys):
    code, out, _ = cli(capsys, "purge", "sales/clients@1", "--dry-run")
    assert code == 0 and "would purge sales/clients@1: requested explicitly" in out
    code, out, _ = cli(capsys, "purge", "sales/clients@1", "--by", "alice", password="alice-demo")
    assert code == 0 and "purged sales/clients@1" in out
    code, out, _ = cli(capsys, "provenance", "sales/product_summary@1")
    assert "sales/clients@1 label 15 landing PURGED" in out
    purged = recorded(action="version.purged")
    assert [(e["actor"], e["asset_key"], e["version"]) for e in purged] == [("alice", "sales/clients", 1)]


def test_purge_by_retention_with_nothing_expired_says_so(ingested, capsys):
    code, out, _ = cli(capsys, "purge", "--by", "alice", password="alice-demo")
    assert code == 0 and "nothing to purge" in out


def test_lineage_columns_lists_what_each_column_derives_from(ingested, capsys):
    code, out, _ = cli(capsys, "lineage", "columns", "sales/product_summary@1")
    assert code == 0
    assert "Column lineage of sales/product_summary@1" in out
    assert "sales/names_and_products@1.amount" in out and "DIRECT AGGREGATION" in out
    assert "every column" in out and "INDIRECT GROUP_BY" in out


def test_lineage_columns_follows_a_column_down_to_the_dropzone_files(ingested, capsys):
    code, out, _ = cli(capsys, "lineage", "columns", "sales/product_summary@1", "revenue", "--direct")
    assert code == 0
    assert "sales/names_and_products@1.amount" in out and "sales/clients@1.order__quantity" in out
    assert "DropZone field order.quantity" in out and "demo-clients-v15" in out and "clients-v15.json" in out


def test_lineage_columns_origins_in_json(ingested, capsys):
    code, out, _ = cli(
        capsys, "lineage", "columns", "sales/product_summary@1", "revenue", "--origins", "--direct", "--json"
    )
    found = json.loads(out)
    assert code == 0 and (found["version"], found["column"]) == ("sales/product_summary@1", "revenue")
    assert {(o["version"], o["dropzone_field"]) for o in found["origins"]} == {
        ("sales/clients@1", "order.quantity"),
        ("sales/products@1", "unit_price"),
    }
    quantity = next(o for o in found["origins"] if o["dropzone_field"] == "order.quantity")
    assert quantity["dependencies"] == [{"kind": "DIRECT", "transformation": "AGGREGATION", "masking": False}]
    [source] = quantity["files"]
    assert source["sha256"] == sha256_file(Lake(ingested.lake).at(source["path"]))


def test_lineage_columns_of_a_missing_column_names_the_columns(ingested, capsys):
    code, _, err = cli(capsys, "lineage", "columns", "sales/product_summary@1", "price")
    assert code == 4 and "sales/product_summary@1 has no column 'price'; its columns are product_id" in err
