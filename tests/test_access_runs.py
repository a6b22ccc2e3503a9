"""Access enforced where work happens: Dagster runs check the requester before any Spark work, and
the CLI's read, status, purge, grant and revoke check theirs; every decision is in the ledger."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from sqlmodel import select

from assets.factory import build_assets
from governance import ledger
from governance.catalog.models import Attempt
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCTS, demo_password, drop_demo_batches
from governance.runs import os_user
from tests.helpers import assert_nothing_committed, cli, os_user_is, recorded


def key(asset):
    return dg.AssetKey([asset.domain, asset.name])


def launch(demo_specs, resources, assets, tags, config=None):
    with dg.instance_for_test() as instance:
        return dg.materialize(
            build_assets(demo_specs),
            resources=resources,
            instance=instance,
            tags=tags,
            selection=[key(a) for a in assets],
            run_config={"ops": config or {}},
            raise_on_error=False,
        )


def decisions(catalog, action: str) -> list[tuple[str, str | None, str, str | None]]:
    with catalog.session() as session:
        found = ledger.entries(session, ledger.LedgerFilter(action=action))
    return [(e.actor, e.asset_key, json.loads(e.details)["result"], e.assurance) for e in found]


def failure_message(result) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    return failure.step_failure_data.user_failure_data.description


@pytest.fixture
def dropped(lake):
    return drop_demo_batches(lake)


def test_a_ui_run_by_a_user_without_the_role_fails_before_any_spark_work(catalog, lake, demo_specs, resources, dropped):
    result = launch(demo_specs, resources, [PRODUCTS], {"custody/requested_by": "eve"})
    assert not result.success
    assert failure_message(result) == (
        "denied: eve may not ingest sales/products: it needs producer (sales-producers) or owner (sales-owners)"
    )
    assert decisions(catalog, "ingest") == [("eve", "sales/products", "denied", "asserted")]
    with catalog.session() as session:
        assert list(session.exec(select(Attempt))) == []
        assert ledger.entries(session, ledger.LedgerFilter(action="ingestion")) == []
    assert_nothing_committed(catalog, lake, "sales/products")


def test_a_run_that_names_no_requester_is_denied(catalog, lake, demo_specs, resources, dropped):
    result = launch(demo_specs, resources, [PRODUCTS], {})
    assert not result.success and "names no user" in failure_message(result)
    assert decisions(catalog, "ingest") == [("anonymous", "sales/products", "denied", "none")]


def test_a_schedule_s_tag_on_a_run_no_tick_launched_proves_nobody(
    catalog, settings, lake, demo_specs, resources, dropped
):
    os_user_is(settings, "bob")
    result = launch(demo_specs, resources, [PRODUCTS], {"dagster/schedule_name": "nightly"})
    assert not result.success and "names no user" in failure_message(result)
    assert decisions(catalog, "ingest") == [("anonymous", "sales/products", "denied", "none")]
    assert_nothing_committed(catalog, lake, "sales/products")


def test_a_sensor_run_is_asserted_for_its_batch_s_requester_and_names_the_sensor(
    catalog, demo_specs, resources, dropped
):
    result = launch(
        demo_specs, resources, [PRODUCTS], {"custody/requested_by": "bob", "dagster/sensor_name": "custody_dropzone"}
    )
    assert result.success
    assert decisions(catalog, "ingest") == [("bob", "sales/products", "allowed", "asserted")]
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action="ingest"))
    assert json.loads(entry.details)["via"] == "sensor custody_dropzone"


def test_materializing_reads_each_input_and_records_each_read(catalog, demo_specs, resources, dropped):
    config = {"sales__clients": {"config": {"batch": dropped.client_batches[0]}}}
    assert launch(
        demo_specs, resources, [PRODUCTS, CLIENTS, NAMES_AND_PRODUCTS], {"custody/requested_by": "bob"}, config
    ).success
    assert decisions(catalog, "materialize") == [("bob", "sales/names_and_products", "allowed", "asserted")]
    assert sorted(decisions(catalog, "read")) == [
        ("bob", "sales/clients", "allowed", "asserted"),
        ("bob", "sales/products", "allowed", "asserted"),
    ]
    with catalog.session() as session:
        reads = ledger.entries(session, ledger.LedgerFilter(action="read"))
    assert {(e.asset_key, e.version) for e in reads} == {("sales/clients", 1), ("sales/products", 1)}


@pytest.mark.parametrize(
    "resource, config",
    [
        ("custody", {"directory": "file:{tmp}/everyone.yaml", "home": "{tmp}/elsewhere"}),
        (
            "spark",
            {
                "master": "local[1]",
                "spark_config": {"spark.driver.extraJavaOptions": "-XX:OnOutOfMemoryError=touch {tmp}/owned"},
            },
        ),
    ],
)
def test_run_config_cannot_change_the_catalog_the_directory_or_spark(
    catalog, settings, tmp_path, dropped, resource, config
):
    from assets.definitions import build_definitions
    from assets.launch import instance_for

    (tmp_path / "everyone.yaml").write_text("users: {eve: {}}\ngroups: {sales-producers: [eve]}\n")
    given = json.loads(json.dumps(config).replace("{tmp}", str(tmp_path)))
    defs = build_definitions(settings.specs, transform_packages=settings.transform_packages)
    with (
        pytest.MonkeyPatch.context() as env,
        pytest.raises(
            dg.DagsterInvalidConfigError, match=rf"unexpected config entr.* root:resources:{resource}:config"
        ),
    ):
        env.setenv("CUSTODY_HOME", str(settings.home))
        defs.resolve_implicit_global_asset_job_def().execute_in_process(
            run_config={"resources": {resource: {"config": given}}},
            instance=instance_for(settings),
            asset_selection=[key(PRODUCTS)],
            tags={"custody/requested_by": "eve"},
        )
    assert decisions(catalog, "ingest") == []


DEMO_DIRECTORY = Path("assets/directory.yaml")


def home_directory(settings) -> Path:
    """The home's copy of the demo directory, which grants and revokes change."""
    [copy] = (settings.home / "directory").glob("*.yaml")
    return copy


def test_read_gives_rows_to_a_consumer_and_denies_others_with_exit_3(landed, capsys):
    code, out, _ = cli(capsys, "read", "sales/products", "--as", "carol", "--limit", "2", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["version"] == "sales/products@1" and len(data["rows"]) == 2 and "unit_price" in data["rows"][0]
    code, out, err = cli(capsys, "read", "sales/products@1", "--as", "eve")
    assert code == 3 and out == ""
    assert (
        err.strip()
        == "error: denied: eve may not read sales/products: it needs consumer (sales-consumers) or producer (sales-producers) or owner (sales-owners)"
    )


def test_ledger_show_action_read_lists_who_read_what(landed, capsys):
    cli(capsys, "read", "sales/products", "--as", "carol", "-c", "product_id")
    cli(capsys, "read", "sales/products@1", "--as", "eve")
    code, out, _ = cli(capsys, "ledger", "show", "--action", "read", "--json", "--as", "dave")
    found = [
        (e["actor"], e["asset_key"], e["version"], e["details"]["result"], e["assurance"]) for e in json.loads(out)
    ]
    assert code == 0 and found == [
        ("carol", "sales/products", 1, "allowed", "verified"),
        ("eve", "sales/products", 1, "denied", "verified"),
    ]
    code, out, _ = cli(capsys, "ledger", "show", "--action", "read", "--as", "dave")
    assert "carol (verified)" in out and "result=denied" in out


def test_ledger_show_is_for_auditors_and_admins_and_each_request_is_recorded(landed, capsys):
    code, _, err = cli(capsys, "ledger", "show", "--as", "carol")
    assert code == 3 and err.strip() == (
        "error: denied: carol may not read the ledger: it needs the auditor group (auditors) "
        "or the admin group (custody-admins)"
    )
    code, _, err = cli(capsys, "ledger", "show")  # the OS user running it, whom no directory knows
    assert code == 3 and f"denied: {os_user()} may not read the ledger" in err
    code, _, _ = cli(capsys, "ledger", "show", "--as", "dave", password=None)
    assert code == 3
    code, out, _ = cli(capsys, "ledger", "show", "--as", "dave", "--json")
    assert code == 0 and json.loads(out)[-1]["action"] == "ledger.read"
    decided = [(e["actor"], e["details"]["result"], e["details"]["method"]) for e in recorded(action="ledger.read")]
    assert decided == [
        ("carol", "denied", "password"),
        (os_user(), "denied", "os-user"),
        ("dave", "allowed", "password"),
    ]
    [unproven] = recorded(action="act-as")
    assert (unproven["actor"], unproven["details"]["as"]) == (os_user(), "dave")


def test_read_prints_a_table_and_says_how_many_rows_it_shows(landed, capsys):
    code, out, _ = cli(capsys, "read", "sales/products@1", "--as", "bob", "--limit", "1")
    assert code == 0 and "sales/products@1: 1 of 4 rows" in out and "product_name" in out


def test_reading_a_version_that_does_not_exist_is_not_found_after_the_decision(landed, capsys):
    code, _, err = cli(capsys, "read", "sales/products@9", "--as", "carol")
    assert code == 4 and "no version sales/products@9" in err
    code, _, err = cli(capsys, "read", "sales/products@9", "--as", "eve")
    assert code == 3


def test_the_python_read_api_enforces_and_records_too(landed, spark):
    from governance.api import Custody
    from governance.config import Settings
    from governance.errors import AccessDenied

    custody = Custody(Settings.from_env())
    carol, alice, eve = (demo_password(user) for user in ("carol", "alice", "eve"))
    assert custody.read("sales/products", as_user="carol", password=carol, columns=["product_id"]).num_rows == 4
    assert custody.read_spark(spark, "sales/products@1", as_user="alice", password=alice).count() == 4
    with pytest.raises(AccessDenied):
        custody.read("sales/products", as_user="eve", password=eve)
    assert [(a, r) for a, _, r, _ in decisions(custody.store, "read")] == [
        ("carol", "allowed"),
        ("alice", "allowed"),
        ("eve", "denied"),
    ]


def test_status_needs_the_owner(landed, capsys):
    code, _, err = cli(capsys, "status", "sales/products@1", "critical", "--by", "bob")
    assert code == 3 and "bob may not change the status of sales/products: it needs owner (sales-owners)" in err
    assert cli(capsys, "status", "sales/products@1", "critical", "--by", "alice", password="alice-demo")[0] == 0
    assert [(e["actor"], e["details"]["result"]) for e in recorded(action="status")] == [
        ("bob", "denied"),
        ("alice", "allowed"),
    ]


def test_purge_needs_the_admin_group(landed, capsys):
    code, _, err = cli(capsys, "purge", "sales/products@1", "--by", "bob")
    assert code == 3 and "bob may not purge: it needs the admin group custody-admins" in err
    code, out, _ = cli(capsys, "versions", "sales/products", "--json")
    assert json.loads(out)[0]["status"] == "committed"
    assert cli(capsys, "purge", "sales/products@1", "--by", "alice", password="alice-demo")[0] == 0


def test_an_owner_grants_and_revokes_a_role_in_the_home_s_copy_of_the_file_directory(landed, capsys):
    seed = DEMO_DIRECTORY.read_bytes()
    code, out, _ = cli(
        capsys, "access", "grant", "consumer", "sales/products", "eve", "--by", "alice", password="alice-demo"
    )
    assert code == 0 and "eve added to sales-consumers: consumer of sales/products" in out
    assert "sales/clients" in out  # the group holds roles on the other sales assets too
    copy = home_directory(landed).read_text()
    assert "eve" in copy.split("sales-consumers:")[1].splitlines()[0]
    assert copy.startswith("# This home's file directory, first copied from ") and "# The demo's file" in copy
    assert DEMO_DIRECTORY.read_bytes() == seed
    assert cli(capsys, "read", "sales/products", "--as", "eve")[0] == 0
    code, out, _ = cli(
        capsys, "access", "revoke", "consumer", "sales/products", "eve", "--by", "alice", password="alice-demo"
    )
    assert code == 0 and "eve removed from sales-consumers" in out and "still in" not in out
    assert cli(capsys, "read", "sales/products", "--as", "eve")[0] == 3
    assert [(e["action"], e["details"]["user"], e["details"]["changed"]) for e in recorded(action="member")] == [
        ("member.added", "eve", True),
        ("member.removed", "eve", True),
    ]


def test_only_an_owner_grants(cli_env, capsys):
    code, _, err = cli(capsys, "access", "grant", "producer", "sales/products", "eve", "--by", "bob")
    assert code == 3 and "bob may not grant roles on sales/products: it needs owner (sales-owners)" in err
    assert "eve" not in home_directory(cli_env).read_text().split("sales-producers:")[1].splitlines()[0]
    assert [(e["actor"], e["details"]["result"], e["details"]["user"]) for e in recorded(action="grant")] == [
        ("bob", "denied", "eve")
    ]


def test_grant_refuses_an_unknown_role_or_a_bad_user_name(cli_env, capsys):
    code, _, err = cli(
        capsys, "access", "grant", "reader", "sales/products", "eve", "--by", "alice", password="alice-demo"
    )
    assert code == 1 and "unknown role 'reader': use owner, producer or consumer" in err
    code, _, err = cli(capsys, "access", "grant", "consumer", "sales/products", "*)(uid=*", "--by", "alice")
    assert code == 1 and "invalid user name" in err


def test_the_only_owner_cannot_be_revoked(cli_env, capsys):
    code, _, err = cli(
        capsys, "access", "revoke", "owner", "sales/products", "alice", "--by", "alice", password="alice-demo"
    )
    assert code == 1 and "alice is the only owner of sales/products" in err


def test_access_show_lists_each_role_s_group_members_and_rights(cli_env, capsys):
    code, out, _ = cli(capsys, "access", "show", "sales/clients", "--json")
    view = json.loads(out)
    assert code == 0 and (view["classification"], view["pii"], view["needs_verified"]) == ("confidential", True, False)
    roles = {r["role"]: r for r in view["roles"]}
    assert roles["consumer"]["members"] == ["carol"] and roles["consumer"]["may"] == ["read"]
    assert roles["owner"]["may"] == ["read", "ingest", "grant", "revoke", "status", "spec.apply"]
    assert view["admins"] == ["alice"]
    code, out, _ = cli(capsys, "access", "show", "sales/clients")
    assert code == 0 and "sales-producers" in out and "bob" in out


def test_access_check_explains_each_answer_and_records_no_decision(cli_env, capsys):
    assert cli(capsys, "settings", "show")[0] == 0  # the first use pins the policy settings, which is recorded
    # CUSTODY_PASSWORD, the caller's own here, is not tried on bob: explaining records nothing.
    code, out, _ = cli(
        capsys, "access", "check", "sales/product_summary", "--as", "bob", "--json", password="alice-demo"
    )
    answers = {d["action"]: (d["result"], d["reason"]) for d in json.loads(out)["decisions"]}
    assert code == 0
    assert answers["materialize"] == ("allowed", "bob is in sales-producers, producer of sales/product_summary")
    assert answers["grant"][0] == "denied" and "ingest" not in answers
    assert [e["action"] for e in recorded()] == ["settings.pinned"]


def test_specs_check_fails_when_a_consumer_group_is_not_covered(cli_env, tmp_path, monkeypatch, capsys):
    specs = tmp_path / "specs"
    shutil.copytree("assets/specs", specs)
    summary = specs / "sales" / "product_summary.yaml"
    summary.write_text(summary.read_text().replace("consumer: sales-consumers", "consumer: auditors"))
    code, _, err = cli(capsys, "specs", "check", str(specs))
    assert code == 1
    assert (
        "roles.consumer: auditors is not covered by sales-consumers, consumer group of sales/names_and_products (pii): dave"
        in err
    )


def test_password_stdin_without_a_password_says_so(cli_env, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _, err = cli(capsys, "read", "sales/products", "--as", "carol", "--password-stdin")
    assert code == 1 and err.strip() == "error: --password-stdin: no password on stdin (pipe it in, one line)"
