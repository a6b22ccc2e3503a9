"""Rows of a statement over a set of ids, whatever the set's size, on either database."""

from __future__ import annotations

from contextlib import closing

import pytest

from governance.catalog.byids import ByIds
from tests.graphs import add_versions

pytestmark = pytest.mark.both_backends


@pytest.mark.parametrize("driven", [False, True])
def test_the_rows_of_the_ids_given_even_where_the_table_names_columns_as_json_each_does(catalog, driven):
    ids = add_versions(catalog, "raw/a", 3)
    with catalog.session() as session, closing(ByIds(session, "id, path", "version", "id", driven=driven)) as by_ids:
        found = by_ids.rows([ids[0], ids[2], max(ids) + 1])
    assert sorted(found) == [(ids[0], "/lake/integration/raw/a/v=1"), (ids[2], "/lake/integration/raw/a/v=3")]
