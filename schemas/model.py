"""A tiny, dependency-free schema model with renderers for pyarrow and Spark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
    from pyspark.sql.types import StructType

LogicalType = Literal["string", "int64", "int32", "float64", "bool", "timestamp", "date"]

#: A timestamp counts microseconds (:func:`_arrow_timestamp`), as the engine's clock does: the
#: one definition of the unit for every layer that converts it.
US_PER_SECOND = 1_000_000
US_PER_DAY = 86_400 * US_PER_SECOND


@dataclass(frozen=True)
class Column:
    name: str
    type: LogicalType
    nullable: bool = True
    doc: str = ""


@dataclass(frozen=True)
class TableSchema:
    """One versioned table definition: the single source of truth for its columns."""

    name: str
    version: int
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    doc: str = ""
    _index: dict[str, Column] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        duplicated = {n for n in names if names.count(n) > 1}
        if duplicated:
            raise ValueError(f"table {self.name}: duplicated columns {sorted(duplicated)}")
        self._index.update({c.name: c for c in self.columns})

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.nullable]

    def column(self, name: str) -> Column:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"table {self.name} v{self.version} has no column {name!r}") from None

    def to_pyarrow(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(
            [pa.field(c.name, _ARROW_TYPES[c.type](), nullable=c.nullable) for c in self.columns],
            metadata={b"table": self.name.encode(), b"schema_version": str(self.version).encode()},
        )

    def to_spark(self, names: Sequence[str] | None = None) -> StructType:
        """The table's Spark schema; given ``names``, of those columns only, in that order (a
        test's expected frame of some of its columns, typed as the table types them)."""
        from pyspark.sql import types as T

        spark_types: dict[str, Any] = {
            "string": T.StringType,
            "int64": T.LongType,
            "int32": T.IntegerType,
            "float64": T.DoubleType,
            "bool": T.BooleanType,
            "timestamp": T.TimestampType,
            "date": T.DateType,
        }
        return T.StructType(
            [
                T.StructField(
                    c.name, spark_types[c.type](), nullable=c.nullable, metadata={"doc": c.doc}
                )
                for c in (self.columns if names is None else map(self.column, names))
            ]
        )

    def ddl(self) -> str:
        """Spark SQL DDL column list, e.g. for ``CREATE TABLE ... (<ddl>)``."""
        sql = {
            "string": "STRING",
            "int64": "BIGINT",
            "int32": "INT",
            "float64": "DOUBLE",
            "bool": "BOOLEAN",
            "timestamp": "TIMESTAMP",
            "date": "DATE",
        }
        return ", ".join(
            f"`{c.name}` {sql[c.type]}{'' if c.nullable else ' NOT NULL'}" for c in self.columns
        )


def _arrow_timestamp() -> Any:
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def _arrow(name: str) -> Any:
    def make() -> Any:
        import pyarrow as pa

        return getattr(pa, name)()

    return make


_ARROW_TYPES: dict[str, Any] = {
    "string": _arrow("string"),
    "int64": _arrow("int64"),
    "int32": _arrow("int32"),
    "float64": _arrow("float64"),
    "bool": _arrow("bool_"),
    "timestamp": _arrow_timestamp,
    "date": _arrow("date32"),
}
