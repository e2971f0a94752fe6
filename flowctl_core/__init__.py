"""flowctl's broker engine: sans-IO flow-control state machines on a virtual clock.

The engine never touches files or sockets. State machines emit events into an :class:`EventBus`;
whoever subscribes (the Parquet sink, a test, the summary printer) decides what to do with them.
"""

from flowctl_core.broker import Broker, BrokerConfig
from flowctl_core.clock import Scheduler
from flowctl_core.events import EventBus, EventCollector
from flowctl_core.flowlimit import FlowConfigError, FlowDefaults, FlowLimit, FlowThresholds

__all__ = [
    "Broker",
    "BrokerConfig",
    "EventBus",
    "EventCollector",
    "FlowConfigError",
    "FlowDefaults",
    "FlowLimit",
    "FlowThresholds",
    "Scheduler",
]
