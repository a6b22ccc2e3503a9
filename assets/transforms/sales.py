"""Transforms of the sales domain."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def names_and_products(spark: SparkSession, clients: DataFrame, products: DataFrame) -> DataFrame:
    """Each client order with its product's name and price, and what it amounts to."""
    orders = clients.select(
        "name",
        "surname",
        F.col("order__product_id").alias("product_id"),
        F.col("order__quantity").alias("quantity"),
        "version",
    )
    return orders.join(products, on="product_id", how="inner").select(
        "name",
        "surname",
        "product_id",
        "product_name",
        "quantity",
        "unit_price",
        (F.col("quantity") * F.col("unit_price")).alias("amount"),
        "version",
    )


def product_summary(spark: SparkSession, names_and_products: DataFrame) -> DataFrame:
    """Units, revenue and distinct buyers per product."""
    return (
        names_and_products.groupBy("product_id", "product_name")
        .agg(
            F.sum("quantity").alias("units"),
            F.sum("amount").alias("revenue"),
            F.countDistinct("name", "surname").alias("buyers"),
        )
        .orderBy("product_id")
    )


def product_clicks(spark: SparkSession, clicks: DataFrame, products: DataFrame) -> DataFrame:
    """Clicks and visiting sessions per product, with the product's name and category."""
    per_product = clicks.groupBy("product_id").agg(
        F.count("*").alias("clicks"), F.countDistinct("session").alias("sessions")
    )
    return (
        per_product.join(products, on="product_id", how="inner")
        .select("product_id", "product_name", "category", "clicks", "sessions")
        .orderBy("product_id")
    )
