"""What flow control held back, and at what grain, from gold (seed 004's comparison).

Seed 004's point is the grain: over AMQP 0.9.1 one slow target queue blocks the whole
connection (every publisher on it waits, ``blocking_daily`` kind ``connection``), while AMQP 1.0
withholds credit from the one link that publishes to it (``link_starvation_daily`` of a
publisher link). :func:`publishers_held_back` puts both on one table per day and run, so a run
that has a 0.9.1 and a 1.0 client on the same workload (the bundled ``rabbitmq-two-senders``)
reads as: the 0.9.1 connection blocked most of the time, the 1.0 link to the slow queue starved
and the 1.0 link to the fast queue not.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

HELD_BACK_COLUMNS = (
    "date",
    "broker",
    "run_id",
    "grain",
    "entity",
    "held_s",
    "episodes",
    "share",
)


def publishers_held_back(blocking_daily: DataFrame, link_starvation_daily: DataFrame) -> DataFrame:
    """Per day and run: every blocked 0.9.1 connection (``grain`` 'connection', ``share`` of the
    observed day) and every publisher link, starved or not (``grain`` 'link', ``share`` of its
    attached time), with seconds held back and episodes starting that day."""
    connections = blocking_daily.where(F.col("kind") == "connection").select(
        "date",
        "broker",
        "run_id",
        F.lit("connection").alias("grain"),
        "entity",
        F.col("blocked_s").alias("held_s"),
        "episodes",
        F.col("blocked_share").alias("share"),
    )
    links = link_starvation_daily.where(F.col("link_role") == "publisher").select(
        "date",
        "broker",
        "run_id",
        F.lit("link").alias("grain"),
        F.col("link").alias("entity"),
        F.col("starved_s").alias("held_s"),
        "episodes",
        F.col("starved_share").alias("share"),
    )
    return connections.unionByName(links).select(*HELD_BACK_COLUMNS)
