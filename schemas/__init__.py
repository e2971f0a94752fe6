"""Versioned table schemas shared by the engine (pyarrow) and the jobs (Spark).

Every table is defined once as a :class:`TableSchema` of :class:`Column`; the pyarrow and Spark
renderings are derived from that single definition so the two can never drift apart.
"""

from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES, LINK_ROLES, PROTOCOLS
from schemas.model import Column, TableSchema

__all__ = ["BROKER_EVENTS", "EVENT_TYPES", "LINK_ROLES", "PROTOCOLS", "Column", "TableSchema"]
