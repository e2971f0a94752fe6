"""Reading the fields of an event's ``detail`` (DESIGN §3: "JSON with anything else").

Ingest checks that a detail is JSON, not what its fields hold (each field is read by one job or
another, and a check of every field of every row would cost the ingest a second parse). So a job
reads a field it needs as a number leniently: a field that holds no whole number (absent, text, a
boolean, a fraction) is unknown (null), never an error that stops the job on a row ingest
accepted. A whole number written as a float (``0.0``, as a hand-written log may) is that number.

A detail is parsed only when its text may hold the field's key: most details hold few of the
fields the jobs read, and a byte search costs far less than the parse it spares (the
recommendations of the demo's last day: a third of their time was parsing details).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def _may_hold_key(key: str) -> Column:
    """Whether ``detail`` may hold ``key`` as a field name. Without an escape (a backslash) or a
    single quote (``get_json_object``'s parser takes single-quoted names, as Hive's does), a name
    is written as itself between double quotes, so a text without ``"key"`` has no such field."""
    text = F.col("detail")
    return text.contains(f'"{key}"') | text.contains("\\") | text.contains("'")


def detail_field(path: str) -> Column:
    """The field at ``path`` (dots for nested objects) of ``detail``, as text; null when absent.
    The same as ``get_json_object(detail, "$.<path>")`` (a test holds them equal), parsed only
    where the text may hold the path's last name."""
    leaf = path.rsplit(".", 1)[-1]
    return F.when(_may_hold_key(leaf), F.get_json_object("detail", f"$.{path}"))


def detail_whole_number(path: str) -> Column:
    """The field at ``path`` of ``detail`` as a long: null unless it holds a whole number that
    fits one (Spark's strict cast would fail the whole job on a single ``"closed"``)."""
    text = detail_field(path)
    as_double = text.try_cast("double")
    whole = F.when(as_double == F.floor(as_double), as_double)
    return F.coalesce(text.try_cast("long"), whole.try_cast("long"))
