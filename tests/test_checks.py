"""The asset checks: what each finds on a sound version, and on one its spec, the catalog or the disk no longer agrees with."""

from __future__ import annotations

import dagster as dg
import pytest
from sqlalchemy import text

from assets.factory import landing_asset
from governance.audit import audit, version_to_audit
from governance.checks import Check, checks_for
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCT_SUMMARY, PRODUCTS, drop_demo_batches
from governance.errors import NotFound
from governance.ingest import ingest
from governance.runs import RunRequest
from governance.spec import Spec
from tests.conftest import drop


def bob() -> RunRequest:
    return RunRequest(requested_by="bob")


def with_body(spec: Spec, **changes) -> Spec:
    return Spec(spec.key, spec.file, spec.body.model_copy(update=changes))


def finding(catalog, lake, spec: Spec, check: Check, number: int = 1):
    [found] = audit(catalog, lake, spec, version_to_audit(catalog, spec, number), (check,))
    return found


def test_each_asset_has_the_checks_that_apply_to_its_zone(demo_specs):
    assert checks_for(demo_specs[PRODUCTS]) == (
        Check.ROWS_ADD_UP,
        Check.QUARANTINE_WITHIN_LIMIT,
        Check.SCHEMA_MATCHES_SPEC,
        Check.FILES_INTACT,
    )
    assert checks_for(demo_specs[PRODUCT_SUMMARY]) == (Check.INPUTS_AS_DECLARED, Check.FILES_INTACT)


def test_a_sound_version_passes_every_check(catalog, lake, demo_specs, pipeline):
    for key in (PRODUCTS, CLIENTS, NAMES_AND_PRODUCTS, PRODUCT_SUMMARY):
        spec = demo_specs[key]
        found = audit(catalog, lake, spec, version_to_audit(catalog, spec), checks_for(spec))
        assert [(f.check, f.passed) for f in found] == [(check, True) for check in checks_for(spec)], found
    assert finding(catalog, lake, demo_specs[PRODUCTS], Check.ROWS_ADD_UP).description == (
        "sales/products@1: read 4 = landed 4 + quarantined 0"
    )


def test_rows_that_do_not_add_up_fail_with_the_three_counts(catalog, lake, demo_specs, pipeline):
    with catalog.engine.begin() as connection:
        connection.execute(text("UPDATE version SET rows = rows + 1 WHERE asset_key = 'sales/products'"))
    found = finding(catalog, lake, demo_specs[PRODUCTS], Check.ROWS_ADD_UP)
    assert not found.passed
    assert found.description == "sales/products@1: read 4 ≠ landed 5 + quarantined 0"


def test_a_quarantine_over_the_spec_s_limit_fails(spark, catalog, lake, demo_specs):
    spec = demo_specs[PRODUCTS]
    rows = b"product_id,product_name,category,unit_price\nP1,Pen,office,1.50\nP2,Ink,office,not-a-price\n"
    drop(lake, "sales/products", "b1", {"products.csv": rows}, requested_by="bob")
    ingest(spark, catalog, lake, with_body(spec, max_bad_fraction=0.5), bob(), batch_id="b1")
    assert finding(catalog, lake, with_body(spec, max_bad_fraction=0.5), Check.QUARANTINE_WITHIN_LIMIT).passed
    found = finding(catalog, lake, spec, Check.QUARANTINE_WITHIN_LIMIT)
    assert not found.passed
    assert found.description == "sales/products@1: 1 of 2 rows quarantined (50.00%), over max_bad_fraction 0"


def test_a_written_schema_unlike_the_spec_s_columns_fails_naming_them(catalog, lake, demo_specs, pipeline):
    spec = demo_specs[PRODUCTS]
    columns = [c.model_copy(update={"type": "string"}) if c.name == "unit_price" else c for c in spec.body.columns]
    found = finding(catalog, lake, with_body(spec, columns=columns[1:]), Check.SCHEMA_MATCHES_SPEC)
    assert not found.passed
    assert (
        found.description
        == "sales/products@1: undeclared product_id; unit_price is decimal(10,2), the spec says string"
    )


def test_inputs_other_than_the_declared_ones_fail(catalog, lake, demo_specs, pipeline):
    spec = with_body(demo_specs[PRODUCT_SUMMARY], inputs=["sales/names_and_products", "sales/products"])
    found = finding(catalog, lake, spec, Check.INPUTS_AS_DECLARED)
    assert not found.passed
    assert found.description == "sales/product_summary@1: sales/products declared but not used"


def test_a_file_altered_on_disk_fails_the_integrity_check_naming_it(catalog, lake, demo_specs, pipeline):
    spec = demo_specs[PRODUCTS]
    version = version_to_audit(catalog, spec)
    [data_file] = [p for p in lake.at(version.path).glob("*.parquet")]
    data_file.write_bytes(data_file.read_bytes()[:-1] + b"\0")
    found = finding(catalog, lake, spec, Check.FILES_INTACT)
    assert not found.passed
    assert found.description == f"sales/products@1: {data_file} does not match its sha256"


def test_right_after_a_commit_the_files_are_found_with_their_sizes_and_not_hashed_again(
    catalog, lake, demo_specs, pipeline
):
    spec = demo_specs[PRODUCTS]
    version = version_to_audit(catalog, spec)
    [data_file] = list(lake.at(version.path).glob("*.parquet"))
    data_file.write_bytes(data_file.read_bytes()[:-1] + b"\0")
    [quick] = audit(catalog, lake, spec, version, (Check.FILES_INTACT,), thorough=False)
    assert quick.passed and "with their sizes" in quick.description
    data_file.write_bytes(data_file.read_bytes()[:-1])
    [quick] = audit(catalog, lake, spec, version, (Check.FILES_INTACT,), thorough=False)
    assert not quick.passed and quick.description == f"sales/products@1: {data_file} is not the size its manifest says"


def test_every_materialization_runs_its_checks_in_its_own_step(lake, demo_specs, resources):
    drop_demo_batches(lake)
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [landing_asset(demo_specs[PRODUCTS])],
            resources=resources,
            instance=instance,
            tags={"custody/requested_by": "bob"},
        )
    evaluations = result.get_asset_check_evaluations()
    assert sorted((e.check_name, e.passed) for e in evaluations) == [
        ("files_intact", True),
        ("quarantine_within_limit", True),
        ("rows_add_up", True),
        ("schema_matches_spec", True),
    ]
    assert {e.metadata["custody/version"].value for e in evaluations} == {"sales/products@1"}
    assert {event.step_key for event in result.all_events if event.step_key} == {"sales__products"}


def test_an_asset_never_materialized_has_nothing_to_audit(catalog, demo_specs):
    with pytest.raises(NotFound, match="sales/products has no committed version to audit"):
        version_to_audit(catalog, demo_specs[PRODUCTS])


def test_a_check_runs_on_demand_against_the_version_asked_for(catalog, lake, demo_specs, resources, pipeline):
    spec = demo_specs[PRODUCTS]
    version = version_to_audit(catalog, spec)
    [data_file] = list(lake.at(version.path).glob("*.parquet"))
    data_file.unlink()
    check = dg.AssetCheckKey(dg.AssetKey(["sales", "products"]), "files_intact")
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [landing_asset(spec)],
            selection=dg.AssetSelection.checks(check),
            resources=resources,
            instance=instance,
            run_config={"ops": {"sales__products": {"config": {"audit_version": 1}}}},
        )
    [evaluation] = result.get_asset_check_evaluations()
    assert (evaluation.check_name, evaluation.passed) == ("files_intact", False)
    assert evaluation.description == f"sales/products@1: missing {data_file}"
    assert evaluation.metadata["custody/version"].value == "sales/products@1"
