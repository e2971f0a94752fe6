"""Whether the log records an entity's messages, and its message counts where it does.

The engine logs every enqueue, dequeue and refusal. A collector reads a real broker from outside
(log lines and samples, DESIGN §6) and a client's link recorder sees its own links only: neither
logs a broker's messages, so a queue seen only through them has no message counts. Counted, it
read 0 (an audit: "nothing lost or rejected" of a DROP address that had dropped messages, and
"0 rejected" of a RabbitMQ queue at its x-max-length). Its counts are unknown (null) instead,
and the advice says the log cannot tell.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from jobs.transforms.detail import detail_field
from schemas.broker_events import COLLECTOR_ORIGINS, RECORDED_BY_CLIENT_LINKS


def client_recorded() -> Column:
    """A client's record of its own AMQP 1.0 link (collectors/proton_links.py)."""
    return F.coalesce(detail_field("recorded_by") == RECORDED_BY_CLIENT_LINKS, F.lit(False))


def from_outside() -> Column:
    """A collector's row or a client's record of its own link: not the broker's own event."""
    collector = F.coalesce(detail_field("origin").isin(*COLLECTOR_ORIGINS), F.lit(False))
    return collector | client_recorded()


def messages_recorded() -> Column:
    """Aggregate: whether any of a group's events is the broker's own (its messages logged)."""
    return F.max(~from_outside())


def recorded_count(condition: Column) -> Column:
    """Aggregate: the events of a group where ``condition`` holds, null (unknown) when none of
    the group's events is the broker's own."""
    return F.when(messages_recorded(), F.count(F.when(condition, 1)))


def recorded_sum(column: str) -> Column:
    """Aggregate over rows that each counted a group's events (recommend's day rollup, with
    :func:`messages_recorded` of each in ``messages_recorded``): ``column`` added up, null
    (unknown) when none of their events is the broker's own, as :func:`recorded_count` says."""
    return F.when(F.max("messages_recorded"), F.sum(column))
