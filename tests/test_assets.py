"""Specs as Dagster assets: what the UI shows, what each materialization records, how failures retry."""

from __future__ import annotations

import inspect
import shutil

import dagster as dg
import pytest
from py4j.protocol import Py4JNetworkError

import governance.ingest
from assets.definitions import build_definitions
from assets.factory import STEP_SIGNATURE, build_assets
from governance import ledger
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.demo import (
    CLIENTS,
    NAMES_AND_PRODUCTS,
    PRODUCT_SUMMARY,
    PRODUCTS,
    drop_demo_batches,
)
from governance.integrate import materialize
from governance.lineage.graph import provenance
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.zones import VersionRef
from tests.conftest import DEMO_SPECS

REQUESTED = {"custody/requested_by": "bob"}


def key(asset):
    return dg.AssetKey([asset.domain, asset.name])


def run(demo_specs, resources, instance, assets, config=None):
    return dg.materialize(
        build_assets(demo_specs),
        resources=resources,
        instance=instance,
        tags=REQUESTED,
        selection=[key(a) for a in assets],
        run_config={"ops": config or {}},
        raise_on_error=False,
    )


def batch_config(asset, batch_id):
    return {f"{asset.domain}__{asset.name}": {"config": {"batch": batch_id}}}


@pytest.fixture
def instance():
    with dg.instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def demo_round(lake):
    return drop_demo_batches(lake)


def test_every_spec_is_an_asset_with_group_owners_kinds_tags_and_schema():
    graph = build_definitions(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES).resolve_asset_graph()
    clients = graph.get(key(CLIENTS))
    assert clients.group_name == "sales"
    assert clients.owners == ["team:sales-owners"]
    assert clients.kinds == {"spark", "parquet"}
    assert {
        "custody/zone": "landing",
        "custody/classification": "confidential",
        "custody/pii": "true",
    }.items() <= clients.tags.items()
    assert clients.description.startswith("Clients and the products")
    schema = clients.metadata["dagster/column_schema"]
    assert [c.name for c in schema.columns][:2] == ["name", "surname"]
    assert clients.code_version
    assert graph.get(key(NAMES_AND_PRODUCTS)).parent_keys == {key(CLIENTS), key(PRODUCTS)}


def test_each_asset_function_carries_the_signature_its_code_has():
    # Dagster reads the signature an asset function carries instead of working it out from its code.
    built = build_assets(load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES))
    by_code = {asset.op.compute_fn.decorated_fn.__code__: asset.op.compute_fn.decorated_fn for asset in built}

    assert sorted(code.co_name for code in by_code) == ["_integration", "_landing"]
    for function in by_code.values():
        carried = function.__signature__
        del function.__signature__
        assert inspect.signature(function) == carried == STEP_SIGNATURE


@pytest.mark.both_backends
def test_a_materialization_records_version_rows_path_and_data_version(
    demo_specs, resources, instance, catalog, demo_round
):
    result = run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    assert result.success
    event = result.get_asset_materialization_events()[0].materialization
    version = catalog.latest(PRODUCTS)
    assert event.metadata["custody/version"].value == "sales/products@1"
    assert event.metadata["custody/version_number"].value == 1
    assert event.metadata["custody/rows_landed"].value == version.rows == 4
    assert event.metadata["custody/rows_quarantined"].value == 0
    assert event.metadata["custody/path"].value == version.path
    assert event.tags["dagster/data_version"] == version.data_version
    assert event.metadata["dagster/table_name"].value == "custody.sales.products"
    assert "VERSION AS OF 'custody-v1'" in event.metadata["custody/table_snapshot"].value


def test_the_label_follows_the_reference_input(demo_specs, resources, instance, catalog, demo_round):
    run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    for batch_id in demo_round.client_batches:
        run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, batch_id))
        run(demo_specs, resources, instance, [NAMES_AND_PRODUCTS, PRODUCT_SUMMARY])
    labels = [(v.number, v.label) for v in catalog.versions(PRODUCT_SUMMARY)]
    assert labels == [(1, "15"), (2, "16")]


@pytest.mark.both_backends
def test_inputs_are_pinned_to_the_version_committed_before_the_run_started(
    spark, demo_specs, resources, instance, catalog, lake, demo_round
):
    run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, demo_round.client_batches[0]))
    started = catalog.latest(CLIENTS).created_at
    run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, demo_round.client_batches[1]))
    request = RunRequest(requested_by="bob", run_id="late-run", started_at=started)
    joined = materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], request)
    assert sorted(v.ref for v in joined.inputs) == ["sales/clients@1", "sales/products@1"]
    recorded = provenance(catalog, VersionRef(NAMES_AND_PRODUCTS, joined.version.number), depth=1).root.links
    assert sorted(node.ref for node in recorded) == ["sales/clients@1", "sales/products@1"]


def test_a_transient_failure_is_retried(demo_specs, resources, instance, catalog, demo_round, monkeypatch):
    calls = []
    real_ingest = governance.ingest.ingest

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionResetError("connection reset by peer")
        return real_ingest(*args, **kwargs)

    monkeypatch.setattr(governance.ingest, "ingest", flaky)
    result = run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    assert result.success and len(calls) == 2
    assert [v.number for v in catalog.versions(PRODUCTS)] == [1]


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("unexpected"),
        Py4JNetworkError("Answer from Java side is empty"),
        PermissionError("denied by the disk"),
    ],
    ids=["a bug", "a Spark context that died", "a file it may not read"],
)
def test_a_failure_that_is_not_transient_is_not_retried(
    demo_specs, resources, instance, catalog, demo_round, monkeypatch, error
):
    calls = []

    def failing(*_args, **_kwargs):
        calls.append(1)
        raise error

    monkeypatch.setattr(governance.ingest, "ingest", failing)
    result = run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    assert not result.success and len(calls) == 1
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_failure_data.user_failure_data.description.startswith(type(error).__name__)


def test_a_validation_failure_is_not_retried(demo_specs, resources, instance, catalog, demo_round):
    result = run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, "no-such-batch"))
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    retries = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(failures) == 1 and retries == []
    assert "no batch 'no-such-batch' for sales/products" in failures[0].step_failure_data.user_failure_data.description


@pytest.mark.both_backends
def test_provenance_command_is_shown_for_each_version(demo_specs, resources, instance, catalog, demo_round):
    result = run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    event = result.get_asset_materialization_events()[0].materialization
    assert "custody provenance sales/products@1" in event.metadata["custody/provenance"].value
    assert catalog.version(VersionRef(PRODUCTS, 1)).requested_by == "bob"


def test_dagster_input_data_versions_agree_with_the_pinned_versions(
    demo_specs, resources, instance, catalog, demo_round
):
    run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, demo_round.client_batches[0]))
    run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, demo_round.client_batches[1]))
    result = run(demo_specs, resources, instance, [NAMES_AND_PRODUCTS])
    event = result.get_asset_materialization_events()[0].materialization
    joined = catalog.latest(NAMES_AND_PRODUCTS)
    pinned = {
        n.asset: n for n in provenance(catalog, VersionRef(NAMES_AND_PRODUCTS, joined.number), depth=1).root.links
    }
    dagster_says = {
        tag.removeprefix("dagster/input_data_version/"): value
        for tag, value in event.tags.items()
        if tag.startswith("dagster/input_data_version/")
    }
    assert dagster_says == {ref: v.data_version for ref, v in pinned.items()}
    assert event.tags["dagster/data_version"] == joined.data_version
    assert event.metadata["custody/version"].value == "sales/names_and_products@1"
    assert event.metadata["custody/input_versions"].value == {"sales/clients": 2, "sales/products": 1}
    assert event.metadata["custody/label_from"].value == "sales/clients@2"
    assert "custody provenance sales/names_and_products@1" in event.metadata["custody/provenance"].value


def staleness(instance, specs_dir):
    from assets.dagster_internals import CachingStaleStatusResolver, LoadingContextForTest

    graph = build_definitions(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES).resolve_asset_graph()
    resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
    return resolver.get_status(key(PRODUCTS)).value


def test_a_description_edit_leaves_the_asset_fresh_and_a_column_change_makes_it_stale(
    tmp_path, resources, instance, demo_round
):
    specs_dir = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs_dir)
    specs = load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert run(specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch)).success
    assert staleness(instance, specs_dir) == "FRESH"
    spec_file = specs_dir / "sales" / "products.yaml"
    cosmetic = spec_file.read_text(encoding="utf-8").replace("delivered as CSV.", "delivered as CSV files.")
    cosmetic = cosmetic.replace("classification: internal", "classification: confidential\ntags: {team: catalogue}")
    spec_file.write_text(cosmetic + "retention: {keep_versions: 5}\n", encoding="utf-8")
    assert staleness(instance, specs_dir) == "FRESH"
    spec_file.write_text(
        cosmetic.replace("{name: category, type: string}", "{name: category, type: string, nullable: false}"),
        encoding="utf-8",
    )
    assert staleness(instance, specs_dir) == "STALE"


def test_materializing_again_from_the_same_inputs_and_code_names_the_newest_version_and_makes_none(
    demo_specs, resources, instance, catalog, lake, demo_round
):
    run(demo_specs, resources, instance, [PRODUCTS], batch_config(PRODUCTS, demo_round.products_batch))
    run(demo_specs, resources, instance, [CLIENTS], batch_config(CLIENTS, demo_round.client_batches[0]))
    assert run(demo_specs, resources, instance, [NAMES_AND_PRODUCTS]).success
    again = run(demo_specs, resources, instance, [NAMES_AND_PRODUCTS])
    assert again.success
    [event] = again.get_asset_materialization_events()
    assert event.materialization.metadata["custody/version"].value == "sales/names_and_products@1"
    assert "no new version" in event.materialization.metadata["custody/unchanged"].value
    [newest] = catalog.versions(NAMES_AND_PRODUCTS)
    assert event.materialization.tags["dagster/data_version"] == newest.data_version
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action="materialization.unchanged"))
    assert (entry.asset_key, entry.version, entry.run_id) == ("sales/names_and_products", 1, again.run_id)
    assert list(lake.staging_root.iterdir()) == [] and catalog.running_attempts() == []
