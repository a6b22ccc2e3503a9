"""Spec column types as Spark and Arrow types."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from governance.spec import COLUMN_TYPE, Column

_SIMPLE: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "short": T.ShortType(),
    "byte": T.ByteType(),
    "double": T.DoubleType(),
    "float": T.FloatType(),
    "boolean": T.BooleanType(),
    "date": T.DateType(),
    "timestamp": T.TimestampType(),
    "binary": T.BinaryType(),
}


def spark_type(name: str) -> T.DataType:
    match = COLUMN_TYPE.fullmatch(name)
    if match and match.group("precision"):
        return T.DecimalType(int(match.group("precision")), int(match.group("scale")))
    return _SIMPLE[name]


def spark_schema(columns: list[Column]) -> T.StructType:
    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in columns])


def arrow_type_name(arrow_type: pa.DataType) -> str:
    """The spec's name for an Arrow type, or Arrow's own name when the spec has none."""
    checks = (
        (pa.types.is_int8, "byte"),
        (pa.types.is_int16, "short"),
        (pa.types.is_int32, "int"),
        (pa.types.is_int64, "long"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_date32, "date"),
        (pa.types.is_timestamp, "timestamp"),
        (pa.types.is_binary, "binary"),
        (pa.types.is_large_binary, "binary"),
    )
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    for check, name in checks:
        if check(arrow_type):
            return name
    return str(arrow_type)


def normalized(type_name: str) -> str:
    return type_name.replace(" ", "")
