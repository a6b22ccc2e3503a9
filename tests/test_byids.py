"""Rows of a statement over a set of ids, whatever the set's size, on either database."""

from __future__ import annotations

from contextlib import closing

import pytest
from sqlalchemy import text

from governance.catalog import Catalog
from governance.catalog.byids import ByIds
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
def test_more_ids_than_a_statement_may_have_parameters_come_back_whole(catalog):
    ids = add_versions(catalog, "raw/a", 3)
    asked = [*range(max(ids) + 1, max(ids) + 70_000), *ids]  # SQLite allows 32,766, PostgreSQL 65,535
    with catalog.session() as session, closing(ByIds(session, "id", "version", "id")) as by_ids:
        found = by_ids.rows(asked)
    assert sorted(found) == [(vid,) for vid in sorted(ids)]


def test_postgresql_plans_the_statement_once_for_any_set_while_it_is_open(pg_url):
    catalog = Catalog(make_engine(pg_url))
    ids = add_versions(catalog, "raw/a", 2)
    with catalog.session() as session:
        connection = session.connection()
        with closing(ByIds(session, "id", "version", "id")) as by_ids:
            for _ in range(7):  # past the five runs after which PostgreSQL may plan for any array itself
                assert by_ids.rows(ids[:1]) == [(ids[0],)]
            plans = connection.execute(
                text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%= ANY($1%'")
            ).one()
            assert tuple(plans) == (7, 0)
        assert connection.execute(text("SHOW plan_cache_mode")).scalar_one() == "auto"  # as it was, once closed


def test_postgresql_through_psycopg2_gets_the_rows_of_a_set_too(pg_url):
    catalog = Catalog(make_engine(pg_url.replace("+psycopg:", "+psycopg2:")))
    ids = add_versions(catalog, "raw/a", 3)
    with catalog.session() as session, closing(ByIds(session, "id", "version", "id")) as by_ids:
        assert sorted(by_ids.rows(ids[1:])) == [(vid,) for vid in ids[1:]]
