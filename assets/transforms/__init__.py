"""PySpark transforms named by integration specs: `fn(spark, **inputs) -> DataFrame`."""
