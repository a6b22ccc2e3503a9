"""Lineage is observed: the files a transform's Spark plan reads must be the pinned versions of its inputs."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from assets.factory import integration_asset
from governance import ledger
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCTS, drop_demo_batches
from governance.errors import IntegrityError, UndeclaredRead
from governance.ingest import ingest
from governance.integrate import materialize
from governance.runs import RunRequest
from governance.spec import Spec
from tests import transforms
from tests.helpers import assert_nothing_committed


def bob() -> RunRequest:
    """A run requested by bob, starting now: it pins the newest committed versions."""
    return RunRequest(requested_by="bob")


@pytest.fixture
def landed(spark, catalog, lake, demo_specs):
    """sales/products@1 and sales/clients@1..2 committed."""
    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], bob(), batch_id=dropped.products_batch)
    for batch in dropped.client_batches:
        ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id=batch)


def variant(spec: Spec, **changes) -> Spec:
    """The same spec with other fields, e.g. another transform or fewer inputs."""
    return Spec(spec.key, spec.file, spec.body.model_copy(update=changes))


@pytest.fixture
def extra_path(monkeypatch):
    def point_at(path):
        monkeypatch.setitem(transforms.EXTRA_PATH, "path", str(path))

    return point_at


def test_reading_an_undeclared_asset_fails_and_names_it(spark, catalog, lake, demo_specs, landed, extra_path):
    extra_path(str(lake.at(catalog.latest(PRODUCTS).path)))
    spec = variant(
        demo_specs[NAMES_AND_PRODUCTS],
        inputs=["sales/clients"],
        version_label_from="sales/clients",
        transform="tests.transforms:joins_an_extra_path",
    )
    with pytest.raises(
        UndeclaredRead, match=r"read sales/products@1, which is not a declared input \(declared inputs: sales/clients\)"
    ):
        materialize(spark, catalog, lake, spec, bob())
    assert_nothing_committed(catalog, lake, str(NAMES_AND_PRODUCTS))


def test_reading_another_version_than_the_pinned_one_fails(spark, catalog, lake, demo_specs, landed, extra_path):
    extra_path(str(lake.at(catalog.versions(CLIENTS)[0].path)))
    spec = variant(demo_specs[NAMES_AND_PRODUCTS], transform="tests.transforms:joins_an_extra_path")
    with pytest.raises(UndeclaredRead, match="read sales/clients@1, but this run pinned sales/clients@2"):
        materialize(spark, catalog, lake, spec, bob())
    with catalog.session() as session:
        [failed] = ledger.entries(session, ledger.LedgerFilter(action="materialization.failed"))
    assert "pinned sales/clients@2" in json.loads(failed.details)["error"]


@pytest.mark.parametrize("transform", ["reads_an_extra_path_in_a_subquery", "joins_a_cached_extra_path"])
def test_a_read_inside_a_subquery_or_a_cached_frame_is_seen(
    spark, catalog, lake, demo_specs, landed, extra_path, transform
):
    extra_path(str(lake.at(catalog.versions(CLIENTS)[0].path)))
    spec = variant(demo_specs[NAMES_AND_PRODUCTS], transform=f"tests.transforms:{transform}")
    with pytest.raises(UndeclaredRead, match="read sales/clients@1, but this run pinned sales/clients@2"):
        materialize(spark, catalog, lake, spec, bob())
    spark.catalog.clearCache()


def test_reading_files_outside_the_lake_fails(spark, catalog, lake, demo_specs, landed, extra_path, tmp_path):
    outside = tmp_path / "elsewhere"
    spark.range(3).write.parquet(str(outside))
    extra_path(outside)
    spec = variant(demo_specs[NAMES_AND_PRODUCTS], transform="tests.transforms:joins_an_extra_path")
    with pytest.raises(UndeclaredRead, match="which is not a committed version of any asset"):
        materialize(spark, catalog, lake, spec, bob())


def test_a_declared_input_that_is_not_read_is_a_warning_in_the_metadata(
    spark, catalog, lake, demo_specs, landed, resources
):
    spec = variant(demo_specs[NAMES_AND_PRODUCTS], transform="tests.transforms:passthrough")
    result = dg.materialize(
        [integration_asset(spec, demo_specs)], resources=resources, tags={"custody/requested_by": "bob"}
    )
    [event] = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert "`sales/products@1`" in metadata["custody/unread_inputs"].value
    with catalog.session() as session:
        [committed] = ledger.entries(session, ledger.LedgerFilter(action="materialization.committed"))
    details = json.loads(committed.details)
    assert details["inputs_read"] == ["sales/clients@2"] and details["inputs_unread"] == ["sales/products@1"]


@pytest.mark.parametrize("transform", [None, "tests.transforms:needs_a_first_row"])
def test_an_input_whose_files_are_gone_is_refused_and_nothing_is_committed(
    spark, catalog, lake, demo_specs, landed, transform
):
    """Whether the transform runs to its end on the input read as empty, or fails on it."""
    products = catalog.latest(PRODUCTS)
    for part in Path(lake.at(products.path)).glob("part-*"):
        part.unlink()
    spec = demo_specs[NAMES_AND_PRODUCTS]
    spec = variant(spec, transform=transform) if transform else spec
    with pytest.raises(IntegrityError, match=r"sales/products@1 holds \d+ rows, but .* has none of its files"):
        materialize(spark, catalog, lake, spec, bob())
    assert_nothing_committed(catalog, lake, str(NAMES_AND_PRODUCTS))


def test_inputs_read_as_declared_leave_no_warning(spark, catalog, lake, demo_specs, landed):
    done = materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], bob())
    assert done.observation.unread == ()
    assert set(done.observation.read) == {"sales/clients@2", "sales/products@1"}
    assert done.version.label == "16" and done.version.label_from == "sales/clients@2"
