"""Owners put edited specs in force: `custody specs diff | apply | history | show`, and runs that use
only the definitions in force."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from governance.demo import drop_demo_batches
from governance.spec.diff import changes
from governance.zones import AssetKey, Lake
from tests.conftest import DEMO_SPECS
from tests.dagster_servers import graphql
from tests.helpers import alias_bomb, cli, edit_spec, recorded
from tests.test_ui import ASSETS_QUERY, launch_answer

PRODUCTS = "sales/products"
IN_FORCE_AFTER_EDIT = "the spec file of sales/products differs from its definition in force"


@pytest.fixture
def specs(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Approval on, over a copy of the demo's specs that the test edits."""
    folder = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, folder)
    monkeypatch.setenv("CUSTODY_SPECS", str(folder))
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "on")
    return folder


def pending(capsys) -> list[dict]:
    code, out, _ = cli(capsys, "specs", "diff", "--json")
    assert code == 0
    return json.loads(out)


def apply(capsys, *args: str) -> list[dict]:
    """`custody specs apply ARGS`, the user of --as giving the password the demo directory documents."""
    user = args[args.index("--as") + 1]
    code, out, err = cli(capsys, "specs", "apply", *args, "--json", password=f"{user}-demo")
    assert code == 0, err
    return json.loads(out)


def test_an_owner_applies_the_specs_and_the_ledger_says_who_and_which_hashes(specs, capsys):
    before = pending(capsys)
    assert [edit["asset"] for edit in before] == [
        PRODUCTS,
        "sales/clients",
        "sales/names_and_products",
        "sales/product_summary",
    ]
    assert all(edit["new"] for edit in before)
    applied = apply(capsys, "--as", "alice")
    assert [a["asset"] for a in applied] == [e["asset"] for e in before]
    assert pending(capsys) == []
    entries = {entry["asset_key"]: entry for entry in recorded(action="spec.applied")}
    products = entries[PRODUCTS]
    assert products["actor"] == "alice" and products["assurance"] == "verified"
    assert products["details"]["spec_hash"] == before[0]["new_hash"] and products["details"]["previous_hash"] is None
    assert products["details"]["changes"][0].startswith("+ new asset: landing, internal, 4 columns, owner sales-owners")


@pytest.mark.parametrize(
    "user, reason",
    [
        ("bob", "bob may not apply the spec of sales/products: it needs owner (sales-owners)"),
        ("eve", "eve may not apply the spec of sales/products: it needs owner (sales-owners)"),
    ],
)
def test_a_producer_or_a_user_without_a_role_is_refused_and_nothing_is_applied(specs, capsys, user, reason):
    apply(capsys, "--as", "alice")
    edit_spec(specs, PRODUCTS, "delivered as CSV", "delivered as CSV files")
    code, _, err = cli(capsys, "specs", "apply", PRODUCTS, "--as", user)
    assert code == 3
    assert reason in err
    [denial] = [d for d in recorded(action="spec.apply") if d["details"]["result"] == "denied"]
    assert denial["actor"] == user and denial["asset_key"] == PRODUCTS and reason in denial["details"]["reason"]
    assert [e["asset"] for e in pending(capsys)] == [PRODUCTS]


def test_a_new_asset_is_applied_by_an_owner_it_names_or_else_by_an_admin(specs, capsys):
    apply(capsys, "--as", "alice")
    # Owned by a group neither bob nor alice is in.
    returns = (specs / "sales" / "products.yaml").read_text(encoding="utf-8").replace("sales-owners", "auditors")
    (specs / "sales" / "returns.yaml").write_text(returns, encoding="utf-8")
    code, _, err = cli(capsys, "specs", "apply", "sales/returns", "--as", "bob")
    assert code == 3
    assert "it needs owner (auditors), or for a new asset the admin group custody-admins" in err
    [applied] = apply(capsys, "sales/returns", "--as", "alice")  # alice is in custody-admins
    assert applied["asset"] == "sales/returns" and applied["old_hash"] is None
    [decision] = [
        d
        for d in recorded(action="spec.apply")
        if d["asset_key"] == "sales/returns" and d["details"]["result"] == "allowed"
    ]
    assert decision["details"]["role"] == "admin"


def test_widening_the_consumers_past_what_they_may_read_upstream_is_refused(specs, capsys):
    apply(capsys, "--as", "alice")
    edit_spec(specs, "sales/names_and_products", "consumer: sales-consumers", "consumer: auditors")
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 3
    assert "auditors is not covered by sales-consumers, consumer group of sales/clients (pii)" in err
    assert [e["asset"] for e in pending(capsys)] == ["sales/names_and_products"]


def test_a_spec_that_breaks_the_folder_is_refused_before_any_decision(specs, capsys):
    apply(capsys, "--as", "alice")
    edit_spec(specs, "sales/names_and_products", "classification: confidential", "classification: public")
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 1
    assert "names_and_products.yaml" in err and "public is below its input(s) sales/clients (confidential)" in err
    assert len(recorded(action="spec.applied")) == 4


def test_a_run_of_an_edited_spec_is_refused_until_an_owner_applies_it(specs, cli_env, capsys):
    drop_demo_batches(Lake(cli_env.lake))
    code, _, err = cli(capsys, "ingest", PRODUCTS, "--as", "bob")
    assert code == 3
    assert (
        "sales/products has no definition in force yet: an owner must apply its spec with `custody specs apply sales/products --as OWNER`"
        in err
    )
    apply(capsys, "--as", "alice")
    edit_spec(specs, PRODUCTS, "delivered as CSV", "delivered as CSV files")
    code, _, err = cli(capsys, "ingest", PRODUCTS, "--as", "bob")
    assert code == 3 and IN_FORCE_AFTER_EDIT in err and "\n" not in err.strip()
    [denial] = [d for d in recorded(action="ingest") if IN_FORCE_AFTER_EDIT in d["details"]["reason"]]
    assert denial["actor"] == "bob" and denial["details"]["at"] == "submission"


def test_an_applied_spec_runs(specs, cli_env, capsys, spark):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    apply(capsys, PRODUCTS, "--as", "alice")
    code, _, err = cli(capsys, "ingest", PRODUCTS, "--batch", dropped.products_batch, "--as", "bob")
    assert code == 0, err
    assert not [d for d in recorded(action="spec.changed")]  # the run met the spec in force


def test_the_ui_refuses_a_launch_of_an_unapplied_spec_and_shows_the_asset_pending(specs, capsys, webserver):
    answer = launch_answer(webserver.as_user("bob"), ["sales", "products"], {})
    assert answer["__typename"] == "PythonError", answer
    assert answer["message"] == (
        "Custody refused this run: sales/products has no definition in force yet: an owner "
        "must apply its spec with `custody specs apply sales/products --as OWNER`"
    )
    nodes = {"/".join(n["assetKey"]["path"]): n for n in graphql(webserver, ASSETS_QUERY)["assetNodes"]}
    products = nodes[PRODUCTS]
    assert {"key": "custody/approval", "value": "pending"} in products["tags"]
    assert products["description"].startswith("**Pending approval:** sales/products has no definition in force yet")


def test_the_git_commit_and_author_of_the_file_are_recorded(specs, capsys):
    git = ["git", "-C", str(specs)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run(
        [*git, "-c", "user.name=Olivia Owner", "-c", "user.email=olivia@example.com", "commit", "-qm", "specs"],
        check=True,
    )
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    applied = apply(capsys, PRODUCTS, "--as", "alice")
    assert applied[0]["git"] == {"commit": head, "author": "Olivia Owner <olivia@example.com>"}
    [entry] = recorded(action="spec.applied")
    assert entry["details"]["git"] == {"commit": head, "author": "Olivia Owner <olivia@example.com>"}
    edit_spec(specs, PRODUCTS, "delivered as CSV", "delivered as CSV files")
    [edited] = apply(capsys, PRODUCTS, "--as", "alice")
    assert edited["git"] == {"commit": head, "author": "Olivia Owner <olivia@example.com>", "uncommitted": True}


def test_history_show_and_diff_across_three_applied_specs(specs, capsys):
    [first] = apply(capsys, PRODUCTS, "--as", "alice")
    edit_spec(
        specs,
        PRODUCTS,
        "  - {name: category, type: string}\n",
        "  - {name: category, type: string}\n  - {name: weight, type: double}\n",
    )
    [second] = apply(capsys, PRODUCTS, "--as", "alice")
    edit_spec(specs, PRODUCTS, "max_bad_fraction: 0.0", "max_bad_fraction: 0.02")
    edit_spec(specs, PRODUCTS, "{name: weight, type: double}", "{name: weight, type: float}")
    [third] = apply(capsys, PRODUCTS, "--as", "alice")
    assert second["changes"] == ["+ columns.weight: double"]
    assert third["changes"] == ["~ columns.weight.type: double -> float", "~ max_bad_fraction: 0.0 -> 0.02"]

    code, out, _ = cli(capsys, "specs", "history", PRODUCTS, "--json")
    history = json.loads(out)
    assert code == 0
    assert [h["spec_hash"] for h in history] == [first["new_hash"], second["new_hash"], third["new_hash"]]
    assert [h["previous_hash"] for h in history] == [None, first["new_hash"], second["new_hash"]]
    assert [h["applied_by"] for h in history] == ["alice"] * 3

    code, out, _ = cli(capsys, "specs", "show", f"{PRODUCTS}@{second['new_hash'][:8]}")
    assert code == 0
    assert out.startswith(f"# sales/products, spec {second['new_hash']}\n")
    weight = [column for column in yaml.safe_load(out)["columns"] if column["name"] == "weight"]
    assert weight == [{"name": "weight", "type": "double", "nullable": True, "description": ""}]

    code, out, _ = cli(
        capsys, "specs", "diff", PRODUCTS, "--from", first["new_hash"][:8], "--to", third["new_hash"][:8], "--json"
    )
    assert code == 0
    assert json.loads(out)["changes"] == ["+ columns.weight: float", "~ max_bad_fraction: 0.0 -> 0.02"]


def test_diff_names_each_change_and_what_follows_from_it(specs, capsys):
    apply(capsys, "--as", "alice")
    edit_spec(specs, PRODUCTS, "  - {name: category, type: string}\n", "")
    edit_spec(
        specs,
        PRODUCTS,
        '{name: unit_price, type: "decimal(10,2)", nullable: false}',
        "{name: unit_price, type: double, nullable: false}\n  - {name: weight, type: double}",
    )
    edit_spec(specs, PRODUCTS, "consumer: sales-consumers", "consumer: auditors")
    [found] = pending(capsys)
    assert found["asset"] == PRODUCTS
    assert found["changes"] == [  # by field, as the canonical spec orders them
        "- columns.category: string",
        "~ columns.unit_price.type: decimal(10,2) -> double",
        "+ columns.weight: double",
        "~ roles.consumer: sales-consumers -> auditors",
    ]
    assert found["implications"] == [
        "new code version: versions made from now on are stale against older ones",
        "gain read access: dave",
        "lose read access: carol",
        "dependents affected: sales/names_and_products, sales/product_summary",
    ]


def test_unknown_assets_and_hashes_are_named(specs, capsys):
    apply(capsys, "--as", "alice")
    code, _, err = cli(capsys, "specs", "diff", "sales/nothing")
    assert code == 4 and "no spec file declares sales/nothing" in err
    code, _, err = cli(capsys, "specs", "show", f"{PRODUCTS}@abc")
    assert code == 1 and "give at least 6 hex digits" in err
    code, _, err = cli(capsys, "specs", "show", f"{PRODUCTS}@000000")
    assert code == 4 and "no spec of sales/products has a hash starting 000000" in err
    code, _, err = cli(capsys, "specs", "history", "sales/nothing")
    assert code == 4 and "no spec of sales/nothing was ever applied" in err


def test_reordered_columns_and_inputs_are_one_change_each():
    before = {"columns": [{"name": "a", "type": "string"}, {"name": "b", "type": "int"}], "inputs": ["x/a", "x/b"]}
    after = {"columns": [{"name": "b", "type": "int"}, {"name": "a", "type": "string"}], "inputs": ["x/b", "x/a"]}
    assert [change.line() for change in changes(before, after)] == [
        '~ columns: ["a", "b"] -> ["b", "a"]',
        '~ inputs: ["x/a", "x/b"] -> ["x/b", "x/a"]',
    ]


def test_the_python_api_edits_applies_and_reads_history(specs):
    from governance.api import Custody

    custody = Custody.from_env()
    assert [edit.key for edit in custody.spec_edits([PRODUCTS])] == [AssetKey.parse(PRODUCTS)]
    [first] = custody.apply_specs([PRODUCTS], as_user="alice", password="alice-demo")
    edit_spec(specs, PRODUCTS, "max_bad_fraction: 0.0", "max_bad_fraction: 0.1")
    custody = Custody.from_env()  # the specs are read once per object
    [second] = custody.apply_specs([PRODUCTS], as_user="alice", password="alice-demo")
    assert [h.spec_hash for h in custody.spec_history(PRODUCTS)] == [first.new_hash, second.new_hash]
    assert custody.spec(f"{PRODUCTS}@{second.new_hash[:10]}")["max_bad_fraction"] == 0.1
    assert custody.spec_diff(PRODUCTS, first.new_hash[:8], second.new_hash[:8]) == ["~ max_bad_fraction: 0.0 -> 0.1"]


def test_a_description_edit_is_no_new_code_version(specs, capsys):
    apply(capsys, "--as", "alice")
    edit_spec(specs, PRODUCTS, "delivered as CSV", "delivered as CSV files")
    [found] = pending(capsys)
    assert found["changes"] == [
        (
            "~ description: The product catalogue with prices, delivered as CSV. -> "
            "The product catalogue with prices, delivered as CSV files."
        )
    ]
    assert found["implications"] == ["dependents affected: sales/names_and_products, sales/product_summary"]


def test_the_catalog_lists_a_retired_asset_as_it_was_when_retired_even_without_versions(specs, capsys):
    summary = "sales/product_summary"
    apply(capsys, "--as", "alice")
    edit_spec(specs, summary, "distinct buyers", "buyers")
    apply(capsys, summary, "--as", "alice")
    edit_spec(specs, summary, "buyers", "distinct buyers")  # back to the first spec: its snapshot is the older one
    apply(capsys, summary, "--as", "alice")
    (specs / f"{summary}.yaml").unlink()
    apply(capsys, summary, "--as", "alice")
    code, out, _ = cli(capsys, "catalog", "--json", "--search", "summary")
    [listed] = json.loads(out)
    assert code == 0 and listed["retired"] and listed["versions"] == 0
    assert "distinct buyers" in listed["description"]
    code, out, _ = cli(capsys, "catalog", summary, "--json")
    assert code == 0 and json.loads(out)["retired"]


def test_a_deleted_spec_file_retires_the_asset_once_an_owner_applies_it_and_its_versions_stay(
    specs, cli_env, capsys, spark
):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    apply(capsys, "--as", "alice")
    assert cli(capsys, "ingest", PRODUCTS, "--batch", dropped.products_batch, "--as", "bob")[0] == 0
    for name in ("product_summary", "names_and_products"):  # its dependents go first: a folder must stay valid
        (specs / "sales" / f"{name}.yaml").unlink()
    (specs / "sales" / "products.yaml").unlink()
    found = pending(capsys)
    assert [(e["asset"], e["retired"]) for e in found] == [
        ("sales/names_and_products", True),
        ("sales/product_summary", True),
        ("sales/products", True),
    ]
    code, _, err = cli(capsys, "specs", "apply", PRODUCTS, "--as", "bob")
    assert code == 3 and "bob may not apply the spec of sales/products: it needs owner (sales-owners)" in err
    [retired] = apply(capsys, PRODUCTS, "--as", "alice")
    assert retired["new_hash"] is None and retired["changes"][0].startswith("- retired")
    [entry] = recorded(action="spec.retired")
    assert entry["actor"] == "alice" and entry["asset_key"] == PRODUCTS
    code, out, _ = cli(capsys, "versions", PRODUCTS, "--json")
    assert code == 0 and [v["number"] for v in json.loads(out)] == [1]
    code, out, _ = cli(capsys, "specs", "history", PRODUCTS, "--json")
    assert [h["spec_hash"] is None for h in json.loads(out)] == [False, True]


def test_two_files_declaring_one_asset_are_refused_and_nothing_is_applied(specs, capsys):
    shutil.copy(specs / "sales" / "products.yaml", specs / "sales" / "products.yml")
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 1
    assert "sales/products is declared twice: by products.yaml and products.yml; keep one" in err
    assert recorded(action="spec.applied") == []


def test_an_edit_that_makes_a_cycle_or_names_a_foreign_transform_applies_nothing(specs, capsys):
    apply(capsys, "--as", "alice")
    edit_spec(
        specs,
        "sales/names_and_products",
        "transform: assets.transforms.sales:names_and_products",
        "transform: os:system",
    )
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 1 and "transform module 'os' is outside the allowed transform packages" in err
    edit_spec(
        specs,
        "sales/names_and_products",
        "transform: os:system",
        "transform: assets.transforms.sales:names_and_products",
    )
    edit_spec(
        specs, "sales/names_and_products", "  - sales/products\n", "  - sales/products\n  - sales/product_summary\n"
    )
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 1 and "dependency cycle among" in err
    assert len(recorded(action="spec.applied")) == 4


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"description: [unclosed\n", "not valid YAML"),
        (alias_bomb().encode(), "alias"),
        (
            b"description: " + b"x" * (10 * 1024 * 1024) + b"\n",
            "more than the 262,144 bytes (256 KB) a spec file may hold",
        ),
    ],
)
def test_a_file_that_is_no_spec_applies_nothing(specs, capsys, content, expected):
    (specs / "sales" / "products.yaml").write_bytes(content)
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")
    assert code == 1
    assert "products.yaml" in err and expected in err
    assert recorded(action="spec.applied") == [] and recorded(action="spec.apply") == []


def test_an_admin_turning_approval_off_lets_runs_take_the_files(specs, cli_env, capsys, monkeypatch, spark):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    with monkeypatch.context() as scoped:
        scoped.setenv("CUSTODY_PASSWORD", "alice-demo")  # a setting needs a verified admin
        code, _, err = cli(capsys, "settings", "set", "specs_approval", "off", "--by", "alice")
    assert code == 0, err
    monkeypatch.delenv("CUSTODY_SPECS_APPROVAL")  # the deployment now agrees with the pinned setting
    code, _, err = cli(capsys, "ingest", PRODUCTS, "--batch", dropped.products_batch, "--as", "bob")
    assert code == 0, err
    [registered] = recorded(action="spec.registered")
    assert registered["actor"] == "bob" and registered["asset_key"] == PRODUCTS


@pytest.mark.both_backends
def test_the_code_location_reads_which_specs_wait_for_approval(settings, catalog, demo_specs):
    from governance.access.policy import Identity
    from governance.api import Custody
    from governance.approval import apply as apply_specs
    from governance.inforce import awaiting
    from governance.runs import Assurance

    assert set(awaiting(settings.catalog_url, demo_specs, "on")) == {spec.key for spec in demo_specs}
    approving = Custody(replace(settings, specs_approval="on"))  # pins approval on
    apply_specs(
        catalog, approving.policy, Identity("alice", Assurance.VERIFIED), demo_specs, [AssetKey.parse(PRODUCTS)]
    )
    waiting = awaiting(settings.catalog_url, demo_specs, "on")
    assert AssetKey.parse(PRODUCTS) not in waiting and len(waiting) == 3
    assert waiting[AssetKey("sales", "clients")].startswith("sales/clients has no definition in force yet")
    assert awaiting(settings.catalog_url, demo_specs, "off") == waiting  # the pinned setting counts, not the default


def test_a_role_naming_a_group_the_directory_does_not_have_is_refused_at_check_and_apply(specs, capsys):
    apply(capsys, "--as", "alice")
    path = edit_spec(specs, PRODUCTS, "owner: sales-owners", "owner: sales-ownrs")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "sales-ownrs" in text)

    checked, _, check_err = cli(capsys, "specs", "check")
    applied, _, apply_err = cli(capsys, "specs", "apply", "--as", "alice", password="alice-demo")

    said = f"products.yaml:{line}: roles.owner: sales-ownrs: the directory has no such group"
    assert (checked, applied) == (1, 1)
    assert said in check_err and said in apply_err
    assert len(recorded(action="spec.applied")) == 4
    assert [edit["asset"] for edit in pending(capsys)] == [PRODUCTS]


def test_the_directory_is_asked_once_for_each_group_however_many_specs_name_it(demo_specs):
    from governance.access.directory import FileDirectory
    from governance.access.policy import missing_groups

    asked: list[str] = []

    class Counted(FileDirectory):
        def has_group(self, group: str) -> bool:
            asked.append(group)
            return super().has_group(group)

    named = {getattr(spec.body.roles, role) for spec in demo_specs for role in ("owner", "producer", "consumer")}

    assert missing_groups(list(demo_specs), Counted.load(Path("assets/directory.yaml"))) == []
    assert sorted(asked) == sorted(named)
