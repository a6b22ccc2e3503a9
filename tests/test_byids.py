"""Rows of a statement over a set of ids, whatever the set's size, on either database."""

from __future__ import annotations

from contextlib import closing

import pytest
from sqlalchemy import text

from governance.catalog import Catalog
from governance.catalog.byids import CHUNK, ByIds
from governance.catalog.engine import make_engine
from tests.graphs import add_versions


@pytest.mark.both_backends
@pytest.mark.parametrize("driven", [False, True])
def test_the_rows_of_the_ids_given_even_where_the_table_names_columns_as_json_each_does(catalog, driven):
    ids = add_versions(catalog, "raw/a", 3)
    with catalog.session() as session, closing(ByIds(session, "id, path", "version", "id", driven=driven)) as by_ids:
        found = by_ids.rows([ids[0], ids[2], max(ids) + 1])
    assert sorted(found) == [(ids[0], "/lake/integration/raw/a/v=1"), (ids[2], "/lake/integration/raw/a/v=3")]


@pytest.mark.both_backends
def test_a_set_of_ids_larger_than_a_statement_may_hold_in_parameters_comes_back_whole(catalog):
    ids = add_versions(catalog, "raw/a", 3)
    asked = [*range(max(ids) + 1, max(ids) + 3 * CHUNK), *ids]
    with catalog.session() as session, closing(ByIds(session, "id", "version", "id")) as by_ids:
        found = by_ids.rows(asked)
    assert sorted(found) == [(vid,) for vid in sorted(ids)]


def test_postgresql_plans_the_statement_once_for_any_set_in_that_transaction_alone(pg_url):
    catalog = Catalog(make_engine(pg_url))
    ids = add_versions(catalog, "raw/a", 2)
    with catalog.session() as session, closing(ByIds(session, "id", "version", "id")) as by_ids:
        assert by_ids.rows(ids) and by_ids.rows(ids[:1]) == [(ids[0],)]
        assert session.connection().execute(text("SHOW plan_cache_mode")).scalar_one() == "force_generic_plan"
    with catalog.session() as session:  # the pool hands the same connection out again, as it came
        assert session.connection().execute(text("SHOW plan_cache_mode")).scalar_one() == "auto"
