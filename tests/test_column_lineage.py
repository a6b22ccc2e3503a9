"""Column lineage from Spark plans: one operation per test, each output column traced to input columns."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from governance.lineage.columns import Kind, Transformation
from governance.lineage.spark import PlanLineage, extract

D, I = Kind.DIRECT, Kind.INDIRECT
IDENTITY, TRANSFORMATION, AGGREGATION, UNKNOWN = (
    Transformation.IDENTITY,
    Transformation.TRANSFORMATION,
    Transformation.AGGREGATION,
    Transformation.UNKNOWN,
)
FILTER, JOIN, GROUP_BY, SORT, WINDOW, CONDITIONAL = (
    Transformation.FILTER,
    Transformation.JOIN,
    Transformation.GROUP_BY,
    Transformation.SORT,
    Transformation.WINDOW,
    Transformation.CONDITIONAL,
)


@pytest.fixture(scope="module")
def tables(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("column-lineage")
    orders = spark.createDataFrame(
        [(1, "c1", "p1", 2, 9.5, ["a", "b"], ("Lyon", "69000")), (2, "c2", "p2", 1, 3.0, ["c"], ("Nice", "06000"))],
        "id int, customer string, product string, qty int, price double, tags array<string>, "
        "address struct<city: string, zip: string>",
    )
    customers = spark.createDataFrame(
        [("c1", "Ada", "FR"), ("c2", "Bob", "UK")], "customer string, name string, country string"
    )
    paths = {"orders": root / "orders", "customers": root / "customers"}
    orders.write.parquet(str(paths["orders"]))
    customers.write.parquet(str(paths["customers"]))
    return paths


@pytest.fixture
def orders(spark, tables) -> DataFrame:
    return spark.read.parquet(str(tables["orders"]))


@pytest.fixture
def customers(spark, tables) -> DataFrame:
    return spark.read.parquet(str(tables["customers"]))


def traced(
    frame: DataFrame, *, approximate: bool = False, **options
) -> tuple[PlanLineage, dict[str, set[tuple]], set[tuple]]:
    """The lineage, each column's dependencies and the dataset's, with inputs named by their folder.
    Unless `approximate`, every operation must have had a rule: no fallback, nothing left untraced."""
    lineage = extract(frame, **options)
    if not approximate:
        assert (lineage.fallbacks, lineage.notes) == ((), ())
    names = [Path(relation.paths[0].removeprefix("file:")).name for relation in lineage.inputs]

    def readable(deps) -> set[tuple]:
        return {(f"{names[d.relation]}.{d.column}", d.kind, d.transformation) for d in deps}

    return lineage, {c.column: readable(c.dependencies) for c in lineage.columns}, readable(lineage.dataset)


def test_select_rename_and_alias_are_identity(orders):
    _, columns, dataset = traced(
        orders.select("id", F.col("qty").alias("quantity")).withColumnRenamed("id", "order_id")
    )
    assert columns == {"order_id": {("orders.id", D, IDENTITY)}, "quantity": {("orders.qty", D, IDENTITY)}}
    assert dataset == set()


def test_arithmetic_and_functions_transform_every_argument(orders):
    _, columns, _ = traced(
        orders.select((F.col("qty") * F.col("price")).alias("amount"), F.upper("customer").alias("who"))
    )
    assert columns == {
        "amount": {("orders.qty", D, TRANSFORMATION), ("orders.price", D, TRANSFORMATION)},
        "who": {("orders.customer", D, TRANSFORMATION)},
    }


def test_case_when_values_are_direct_and_conditions_indirect(orders):
    frame = orders.select(F.when(F.col("qty") > 1, F.col("price")).otherwise(F.lit(0.0)).alias("bulk_price"))
    _, columns, _ = traced(frame)
    assert columns["bulk_price"] == {("orders.price", D, TRANSFORMATION), ("orders.qty", I, CONDITIONAL)}


def test_a_cast_transforms(orders):
    _, columns, _ = traced(orders.select(F.col("qty").cast("string").alias("qty_text")))
    assert columns["qty_text"] == {("orders.qty", D, TRANSFORMATION)}


def test_a_cast_to_the_type_a_column_already_has_is_identity(orders):
    _, columns, _ = traced(orders.select(F.col("qty").cast("int").alias("units")))
    assert columns["units"] == {("orders.qty", D, IDENTITY)}


def test_nullif_takes_its_value_from_the_first_argument_and_compares_both(orders):
    _, columns, _ = traced(orders.select(F.expr("nullif(customer, product)").alias("customer_unless_product")))
    assert columns["customer_unless_product"] == {
        ("orders.customer", D, TRANSFORMATION),
        ("orders.customer", I, CONDITIONAL),
        ("orders.product", I, CONDITIONAL),
    }


@pytest.mark.parametrize("function", ["coalesce", "nvl", "ifnull"])
def test_coalesce_takes_each_argument_as_value_and_its_nullness_as_condition(orders, function):
    _, columns, _ = traced(orders.select(F.expr(f"{function}(customer, product)").alias("first_known")))
    assert columns["first_known"] == {
        ("orders.customer", D, TRANSFORMATION),
        ("orders.customer", I, CONDITIONAL),
        ("orders.product", D, TRANSFORMATION),
        ("orders.product", I, CONDITIONAL),
    }


def test_a_filter_is_an_indirect_dependency_of_every_column(orders):
    lineage, columns, dataset = traced(orders.filter(F.col("price") > 5).select("id"))
    assert columns == {"id": {("orders.id", D, IDENTITY)}}
    assert dataset == {("orders.price", I, FILTER)}
    assert set(lineage.of("id")) >= set(lineage.dataset)


def test_an_inner_join_takes_columns_from_both_sides_and_its_keys_as_indirect(orders, customers):
    frame = orders.join(customers, orders.customer == customers.customer).select("id", "name")
    _, columns, dataset = traced(frame)
    assert columns == {"id": {("orders.id", D, IDENTITY)}, "name": {("customers.name", D, IDENTITY)}}
    assert dataset == {("orders.customer", I, JOIN), ("customers.customer", I, JOIN)}


def test_a_left_join_keeps_the_right_columns_it_brings(orders, customers):
    _, columns, dataset = traced(orders.join(customers, "customer", "left").select("id", "country"))
    assert columns["country"] == {("customers.country", D, IDENTITY)}
    assert ("customers.customer", I, JOIN) in dataset


def test_a_full_join_on_a_using_column_merges_both_keys(orders, customers):
    _, columns, dataset = traced(orders.join(customers, "customer", "full"))
    assert columns["customer"] == {
        ("orders.customer", D, TRANSFORMATION),
        ("orders.customer", I, CONDITIONAL),
        ("customers.customer", D, TRANSFORMATION),
        ("customers.customer", I, CONDITIONAL),
    }
    assert columns["name"] == {("customers.name", D, IDENTITY)}
    assert dataset == {("orders.customer", I, JOIN), ("customers.customer", I, JOIN)}


def test_an_inner_join_on_a_using_column_takes_the_left_key(orders, customers):
    _, columns, dataset = traced(orders.join(customers, ["customer"]).select("customer", "name"))
    assert columns["customer"] == {("orders.customer", D, IDENTITY)}
    assert dataset == {("orders.customer", I, JOIN), ("customers.customer", I, JOIN)}


@pytest.mark.parametrize("how", ["left_semi", "left_anti"])
def test_semi_and_anti_joins_keep_only_left_columns_and_filter_by_the_right_key(orders, customers, how):
    _, columns, dataset = traced(orders.join(customers, "customer", how).select("id", "customer"))
    assert columns == {"id": {("orders.id", D, IDENTITY)}, "customer": {("orders.customer", D, IDENTITY)}}
    assert dataset == {("orders.customer", I, JOIN), ("customers.customer", I, JOIN)}


def test_group_by_aggregates_its_arguments_and_groups_by_its_keys(orders):
    frame = orders.groupBy("customer").agg(
        F.sum("qty").alias("units"), F.countDistinct("product", "price").alias("kinds"), F.count("*").alias("n")
    )
    _, columns, dataset = traced(frame)
    assert columns == {
        "customer": {("orders.customer", D, IDENTITY)},
        "units": {("orders.qty", D, AGGREGATION)},
        "kinds": {("orders.product", D, AGGREGATION), ("orders.price", D, AGGREGATION)},
        "n": set(),
    }
    assert dataset == {("orders.customer", I, GROUP_BY)}


def test_a_window_function_depends_on_its_partition_and_order_indirectly(orders):
    spec = Window.partitionBy("customer").orderBy("id")
    _, columns, _ = traced(
        orders.select(F.sum("qty").over(spec).alias("running"), F.row_number().over(spec).alias("rank"))
    )
    assert columns["running"] == {
        ("orders.qty", D, AGGREGATION),
        ("orders.customer", I, WINDOW),
        ("orders.id", I, WINDOW),
    }
    assert columns["rank"] == {("orders.customer", I, WINDOW), ("orders.id", I, WINDOW)}


@pytest.mark.parametrize(
    "ranking", ["rank()", "dense_rank()", "percent_rank()", "row_number()", "ntile(2)", "cume_dist()"]
)
def test_a_ranking_window_function_takes_no_value_from_its_order_column(orders, ranking):
    spec = Window.partitionBy("customer").orderBy("price")
    _, columns, _ = traced(orders.select(F.expr(ranking).over(spec).alias("position")))
    assert columns["position"] == {("orders.customer", I, WINDOW), ("orders.price", I, WINDOW)}


@pytest.mark.parametrize(
    ("function", "transformation"),
    [
        ("lag(price)", TRANSFORMATION),
        ("lead(price)", TRANSFORMATION),
        ("first(price)", AGGREGATION),
    ],
)
def test_a_window_function_that_reads_its_order_column_takes_its_value(orders, function, transformation):
    spec = Window.partitionBy("customer").orderBy("price")
    _, columns, _ = traced(orders.select(F.expr(function).over(spec).alias("price_nearby")))
    assert columns["price_nearby"] == {
        ("orders.price", D, transformation),
        ("orders.customer", I, WINDOW),
        ("orders.price", I, WINDOW),
    }


def test_union_takes_each_column_from_every_side(orders, customers):
    _, columns, _ = traced(orders.select("customer").union(customers.select("customer")))
    assert columns["customer"] == {("orders.customer", D, IDENTITY), ("customers.customer", D, IDENTITY)}


def test_union_by_name_matches_columns_by_name(orders, customers):
    left = orders.select("customer", F.col("product").alias("label"))
    right = customers.select(F.col("name").alias("label"), "customer")
    _, columns, _ = traced(left.unionByName(right))
    assert columns["label"] == {("orders.product", D, IDENTITY), ("customers.name", D, IDENTITY)}
    assert columns["customer"] == {("orders.customer", D, IDENTITY), ("customers.customer", D, IDENTITY)}


def test_distinct_groups_by_every_column(orders):
    _, _, dataset = traced(orders.select("customer", "product").distinct())
    assert dataset == {("orders.customer", I, GROUP_BY), ("orders.product", I, GROUP_BY)}


def test_drop_duplicates_groups_by_its_subset(orders):
    _, columns, dataset = traced(orders.dropDuplicates(["customer"]).select("id"))
    assert columns == {"id": {("orders.id", D, IDENTITY)}}
    assert dataset == {("orders.customer", I, GROUP_BY)}


def test_explode_transforms_the_array(orders):
    _, columns, _ = traced(orders.select("id", F.explode("tags").alias("tag")))
    assert columns == {"id": {("orders.id", D, IDENTITY)}, "tag": {("orders.tags", D, TRANSFORMATION)}}


def test_a_struct_field_read_as_is_names_the_nested_field(orders):
    _, columns, _ = traced(orders.select(F.col("address.city").alias("city"), F.upper("address.zip").alias("zip")))
    assert columns == {
        "city": {("orders.address.city", D, IDENTITY)},
        "zip": {("orders.address.zip", D, TRANSFORMATION)},
    }


def test_a_struct_built_in_a_subquery_gives_each_field_read_back_only_its_own_columns(spark, orders):
    orders.createOrReplaceTempView("orders_v")
    frame = spark.sql(
        "SELECT s.x AS x, s.y AS y, s AS s FROM (SELECT named_struct('x', qty, 'y', price * 2) AS s FROM orders_v)"
    )
    _, columns, _ = traced(frame)
    assert columns == {
        "x": {("orders.qty", D, IDENTITY)},
        "y": {("orders.price", D, TRANSFORMATION)},
        "s": {("orders.qty", D, TRANSFORMATION), ("orders.price", D, TRANSFORMATION)},
    }


def test_a_struct_of_renamed_columns_gives_each_field_its_own_column(orders):
    built = orders.select(F.struct(F.col("qty").alias("units"), "price").alias("s"))
    _, columns, _ = traced(built.select("s.*"))
    assert columns == {"units": {("orders.qty", D, IDENTITY)}, "price": {("orders.price", D, IDENTITY)}}


def test_a_nested_struct_field_is_followed_down_to_its_own_column(spark, orders):
    orders.createOrReplaceTempView("orders_v")
    frame = spark.sql(
        "SELECT s.inner.x AS x, s.inner AS inner, s.home.city AS city FROM "
        "(SELECT named_struct('inner', named_struct('x', qty, 'y', price), 'home', address) AS s FROM orders_v)"
    )
    _, columns, _ = traced(frame)
    assert columns == {
        "x": {("orders.qty", D, IDENTITY)},
        "inner": {("orders.qty", D, TRANSFORMATION), ("orders.price", D, TRANSFORMATION)},
        "city": {("orders.address.city", D, IDENTITY)},
    }


def test_a_struct_cast_to_new_field_names_keeps_its_fields_apart(spark, orders):
    orders.createOrReplaceTempView("orders_v")
    frame = spark.sql(
        "SELECT s.units AS units, s.cost AS cost FROM (SELECT CAST(named_struct('x', qty, 'y', price) "
        "AS STRUCT<units: BIGINT, cost: DOUBLE>) AS s FROM orders_v)"
    )
    _, columns, _ = traced(frame)
    assert columns == {"units": {("orders.qty", D, TRANSFORMATION)}, "cost": {("orders.price", D, TRANSFORMATION)}}


def test_in_subquery_filters_by_the_subquery_column(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql(
        "SELECT id FROM orders_v WHERE customer IN (SELECT customer FROM customers_v WHERE country = 'FR')"
    )
    _, columns, dataset = traced(frame)
    assert columns == {"id": {("orders.id", D, IDENTITY)}}
    assert dataset == {
        ("orders.customer", I, FILTER),
        ("customers.customer", I, FILTER),
        ("customers.country", I, FILTER),
    }


def test_exists_filters_by_the_correlated_columns(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql(
        "SELECT id FROM orders_v o WHERE EXISTS (SELECT 1 FROM customers_v c WHERE c.customer = o.customer)"
    )
    _, _, dataset = traced(frame)
    assert dataset == {("orders.customer", I, FILTER), ("customers.customer", I, FILTER)}


def test_a_scalar_subquery_brings_its_value(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql("SELECT id, (SELECT count(DISTINCT country) FROM customers_v) AS countries FROM orders_v")
    _, columns, _ = traced(frame)
    assert columns["countries"] == {("customers.country", D, AGGREGATION)}


def test_a_correlated_scalar_subquery_matches_rows_by_its_key_and_brings_its_value(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql(
        "SELECT id, (SELECT max(c.name) FROM customers_v c WHERE c.customer = o.customer) AS name FROM orders_v o"
    )
    _, columns, _ = traced(frame)
    assert columns["name"] == {
        ("customers.name", D, AGGREGATION),
        ("customers.customer", I, FILTER),
        ("orders.customer", I, FILTER),
    }


def test_a_correlated_exists_in_a_select_list_only_matches_rows(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql(
        "SELECT EXISTS (SELECT 1 FROM customers_v c WHERE c.customer = o.customer) AS known FROM orders_v o"
    )
    _, columns, _ = traced(frame)
    assert columns["known"] == {("customers.customer", I, FILTER), ("orders.customer", I, FILTER)}


def test_a_cte_is_followed_to_its_definition(spark, orders):
    orders.createOrReplaceTempView("orders_v")
    frame = spark.sql(
        "WITH big AS (SELECT customer, qty * price AS amount FROM orders_v WHERE qty > 1) "
        "SELECT customer, amount FROM big WHERE amount > 0"
    )
    _, columns, dataset = traced(frame)
    assert columns["amount"] == {("orders.qty", D, TRANSFORMATION), ("orders.price", D, TRANSFORMATION)}
    assert dataset == {("orders.qty", I, FILTER), ("orders.price", I, FILTER)}


@pytest.fixture
def catalog_views(spark: SparkSession, tables, tmp_path: Path) -> Iterator[str]:
    """A catalog database of persistent views over the orders files, dropped after the test."""
    spark.sql(f"CREATE DATABASE lineage_views LOCATION '{tmp_path / 'warehouse'}'")
    spark.sql(
        "CREATE VIEW lineage_views.orders_view AS SELECT id, tags, address, upper(customer) AS who, "
        f"CAST(qty AS BIGINT) AS units FROM parquet.`{tables['orders']}`"
    )
    yield "lineage_views.orders_view"
    spark.sql("DROP DATABASE lineage_views CASCADE")


def test_a_column_read_through_a_catalog_view_keeps_its_identity(spark, catalog_views):
    _, columns, _ = traced(spark.table(catalog_views).select("id", "tags", "address"))
    assert columns == {
        "id": {("orders.id", D, IDENTITY)},
        "tags": {("orders.tags", D, IDENTITY)},
        "address": {("orders.address", D, IDENTITY)},
    }


def test_a_catalog_view_s_own_functions_and_casts_still_transform(spark, catalog_views):
    _, columns, _ = traced(spark.table(catalog_views).select("who", "units"))
    assert columns == {"who": {("orders.customer", D, TRANSFORMATION)}, "units": {("orders.qty", D, TRANSFORMATION)}}


def test_spark_sql_over_temp_views_traces_to_the_files_behind_them(spark, orders, customers):
    orders.createOrReplaceTempView("orders_v")
    customers.createOrReplaceTempView("customers_v")
    frame = spark.sql(
        "SELECT c.name, sum(o.qty) AS units FROM orders_v o JOIN customers_v c ON o.customer = c.customer GROUP BY c.name"
    )
    lineage, columns, dataset = traced(frame)
    assert columns == {"name": {("customers.name", D, IDENTITY)}, "units": {("orders.qty", D, AGGREGATION)}}
    assert dataset == {("customers.name", I, GROUP_BY), ("orders.customer", I, JOIN), ("customers.customer", I, JOIN)}
    assert {relation.format for relation in lineage.inputs} == {"parquet"}


def test_a_chain_of_with_column_composes_each_step(orders):
    frame = (
        orders.withColumn("amount", F.col("qty") * F.col("price"))
        .withColumn("amount", F.round("amount", 1))
        .withColumn("doubled", F.col("amount") * 2)
        .select("doubled")
    )
    _, columns, _ = traced(frame)
    assert columns == {"doubled": {("orders.qty", D, TRANSFORMATION), ("orders.price", D, TRANSFORMATION)}}


def test_pivot_aggregates_values_under_the_pivot_column(orders):
    _, columns, dataset = traced(orders.groupBy("customer").pivot("product", ["p1", "p2"]).sum("qty"))
    assert columns["p1"] == {("orders.qty", D, AGGREGATION), ("orders.product", I, CONDITIONAL)}
    assert ("orders.customer", I, GROUP_BY) in dataset


def test_a_python_udf_takes_every_argument_directly_in_an_unknown_way(orders):
    combine = F.udf(lambda customer, qty: f"{customer}:{qty}", "string")
    _, columns, _ = traced(orders.select(combine("customer", "qty").alias("key")))
    assert columns["key"] == {("orders.customer", D, UNKNOWN), ("orders.qty", D, UNKNOWN)}


def test_a_hash_is_marked_as_masking(orders):
    lineage, _, _ = traced(orders.select(F.sha2("customer", 256).alias("customer_hash")))
    (dependency,) = lineage.columns[0].dependencies
    assert dependency.masking and dependency.transformation is TRANSFORMATION


def test_intersect_and_except_filter_by_the_other_side(orders, customers):
    for combined in (
        orders.select("customer").intersect(customers.select("customer")),
        orders.select("customer").exceptAll(customers.select("customer")),
    ):
        _, columns, dataset = traced(combined)
        assert columns == {"customer": {("orders.customer", D, IDENTITY)}}
        assert dataset >= {("customers.customer", I, FILTER)}


def test_rollup_takes_each_grouping_column_through_every_grouping_set(orders):
    _, columns, dataset = traced(orders.rollup("customer", "product").agg(F.sum("qty").alias("units")))
    assert columns["customer"] == {("orders.customer", D, IDENTITY)}
    assert columns["units"] == {("orders.qty", D, AGGREGATION)}
    assert {("orders.customer", I, GROUP_BY), ("orders.product", I, GROUP_BY)} <= dataset


def test_an_aggregate_filter_clause_is_an_indirect_dependency_of_that_aggregate(spark, orders):
    orders.createOrReplaceTempView("orders_v")
    _, columns, _ = traced(spark.sql("SELECT sum(qty) FILTER (WHERE price > 5) AS big_units FROM orders_v"))
    assert columns["big_units"] == {("orders.qty", D, AGGREGATION), ("orders.price", I, FILTER)}


def test_a_sort_is_an_indirect_dependency(orders):
    _, _, dataset = traced(orders.orderBy("price").select("id"))
    assert dataset == {("orders.price", I, SORT)}


def test_an_unknown_plan_node_falls_back_to_all_to_all_and_says_so(orders):
    frame = orders.select("id", "qty").mapInPandas(lambda batches: batches, "id int, qty int")
    lineage, columns, _ = traced(frame, approximate=True)
    assert lineage.fallbacks == ("MapInPandas",)
    assert columns["id"] == columns["qty"] == {("orders.id", D, UNKNOWN), ("orders.qty", D, UNKNOWN)}


def test_a_fallback_beyond_the_cap_is_recorded_once_for_the_dataset(orders):
    frame = orders.select("id", "qty", "price").mapInPandas(lambda batches: batches, "id int, qty int, price double")
    lineage, columns, dataset = traced(frame, approximate=True, max_all_to_all=4)
    assert columns == {"id": set(), "qty": set(), "price": set()}
    assert dataset == {("orders.id", D, UNKNOWN), ("orders.qty", D, UNKNOWN), ("orders.price", D, UNKNOWN)}
    assert any("3 x 3 column dependencies exceed the cap of 4" in note for note in lineage.notes)


def test_output_columns_beyond_the_cap_are_left_out_with_a_note(orders):
    lineage = extract(orders, max_columns=3)
    assert [c.column for c in lineage.columns] == ["id", "customer", "product"]
    assert "column lineage covers the first 3 of 7 columns" in lineage.notes


def test_inputs_are_the_files_read_with_their_format(orders, customers, tables):
    lineage = extract(orders.join(customers, "customer"))
    assert [(r.kind, r.format) for r in lineage.inputs] == [("files", "parquet"), ("files", "parquet")]
    assert [Path(r.paths[0].removeprefix("file:")) for r in lineage.inputs] == [tables["orders"], tables["customers"]]


def test_a_generated_range_has_no_input(spark):
    lineage = extract(spark.range(3).select((F.col("id") + 1).alias("m")))
    assert lineage.inputs == () and lineage.columns[0].dependencies == ()


def test_rows_of_an_rdd_are_an_input_whose_own_source_is_unknown(spark):
    lineage = extract(spark.createDataFrame([(1, "x")], "n int, s string").select((F.col("n") + 1).alias("m")))
    assert [(r.kind, r.name) for r in lineage.inputs] == [("rdd", "LogicalRDD 0")]
    assert [(d.column, d.transformation) for d in lineage.columns[0].dependencies] == [("n", TRANSFORMATION)]


def test_two_unnamed_inputs_stay_two_inputs(spark):
    left = spark.createDataFrame([(1,)], "n int")
    right = spark.createDataFrame([(2,)], "m int")
    lineage = extract(left.crossJoin(right))
    assert len(lineage.inputs) == 2
    assert [c.dependencies[0].relation for c in lineage.columns] == [0, 1]


def test_extraction_runs_no_spark_job(spark, orders, customers):
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    extract(orders.join(customers, "customer").groupBy("country").agg(F.sum("qty")))
    assert set(tracker.getJobIdsForGroup(None)) == before


def test_extraction_leaves_no_temporary_file_behind(orders, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    extract(orders.select((F.col("qty") * 2).alias("twice")))
    assert list(tmp_path.iterdir()) == []
