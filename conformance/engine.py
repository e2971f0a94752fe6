"""The conformance workloads on the engine (flowctl_core's Python API and scenario model).

Artemis workloads build an :class:`~flowctl_core.protocols.artemis.ArtemisServer` on a fresh
virtual clock, with the per-protocol memory overhead measured on the real broker; RabbitMQ
workloads are scenarios (:func:`~flowctl_core.scenario.parse_scenario`) run by
:func:`~flowctl_core.runner.run_scenario`. Figures are read from the engine's own state and its
event log (DESIGN.md §3).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conformance.rabbit import ONE_SENDER_BODY, ONE_SENDER_PREFETCH
from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.protocols.artemis import (
    AddressConfig,
    ArtemisConfig,
    ArtemisProducerConfig,
    ArtemisServer,
)
from flowctl_core.protocols.artemis_flow import DEFAULT_CORE_ENCODE_OVERHEAD, AddressSettings
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import parse_scenario
from schemas.broker_events import AMQP_0_9_1
from schemas.model import US_PER_SECOND


# -- Artemis ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineAddress:
    """What the engine's address did: its outcomes, its peak and final size, what the producers
    were told (the ``error`` of each ``message_rejected``) and its flow events."""

    accepted: int
    paged: int
    dropped: int
    failed: int
    rejected: int
    peak_size: int
    final_size: int
    in_memory: int  # messages counted in the address size at the end
    stored: int  # messages in the queue at the end (memory and page store)
    errors: Counter[str]
    flow_stopped: int
    flow_resumed: int
    credit_zero_with_work: bool  # an AMQP / CORE producer ended with work and no credit
    credit_granted: dict[str, int]  # AMQP producers: link credit ever granted
    told_refused: int  # refusals the producers were told of (FAIL errors, AMQP rejections)


def artemis_config(
    address: AddressConfig,
    producers: Sequence[ArtemisProducerConfig],
    *,
    core_overhead: int,
    amqp_overhead: int,
    core_encode_overhead: int | None = None,
    latency_us: int = 100,
) -> ArtemisConfig:
    """An engine config with the per-protocol memory overhead per message (DESIGN §2) and, when
    measured, what a CORE message's encoded size (its producer credit) adds to its body."""
    return ArtemisConfig(
        addresses=(address,),
        producers=tuple(producers),
        latency_us=latency_us,
        core_message_overhead_bytes=core_overhead,
        amqp_message_overhead_bytes=amqp_overhead,
        core_encode_overhead_bytes=(
            DEFAULT_CORE_ENCODE_OVERHEAD if core_encode_overhead is None else core_encode_overhead
        ),
    )


def address_config(
    name: str, max_size_bytes: int, policy: str, reject_threshold: int = -1
) -> AddressConfig:
    return AddressConfig(
        name,
        AddressSettings(
            max_size_bytes=max_size_bytes,
            address_full_policy=policy,  # type: ignore[arg-type]
            max_size_bytes_reject_threshold=reject_threshold,
        ),
    )


def _ran(config: ArtemisConfig, seconds: float) -> tuple[ArtemisServer, EventCollector]:
    """``config`` run for ``seconds`` of virtual time: the server and its validated events."""
    scheduler = Scheduler(0)
    log = EventCollector()
    bus = EventBus("conformance", scheduler, validate=True)
    bus.subscribe(log)
    server = ArtemisServer(Broker(bus, scheduler), config)
    server.start()
    scheduler.run_until(int(seconds * US_PER_SECOND))
    bus.flush()
    return server, log


def arrival_times(config: ArtemisConfig, *, seconds: float) -> list[int]:
    """Run ``config`` for ``seconds`` of virtual time; the times (us) its messages reached a
    queue, in order."""
    _, log = _ran(config, seconds)
    return sorted(int(e["ts"]) for e in log.of_type("enqueue"))


def processed_times(config: ArtemisConfig, *, seconds: float) -> list[int]:
    """Run ``config`` for ``seconds`` of virtual time; the times (us) its consumers finished
    processing a message, in order."""
    server, _ = _ran(config, seconds)
    return sorted(t for consumer in server.consumers.values() for t in consumer.processed_at_us)


def processed_by_consumer(config: ArtemisConfig, *, seconds: float) -> dict[str, int]:
    """Run ``config`` for ``seconds`` of virtual time; the messages each consumer processed."""
    server, _ = _ran(config, seconds)
    return {name: consumer.processed for name, consumer in server.consumers.items()}


def received_by_consumer(config: ArtemisConfig, *, seconds: float) -> dict[str, int]:
    """Run ``config`` for ``seconds`` of virtual time; the messages each consumer received."""
    server, _ = _ran(config, seconds)
    return {name: consumer.received for name, consumer in server.consumers.items()}


def address_and_queues(config: ArtemisConfig, *, seconds: float) -> tuple[int, list[int]]:
    """Run ``config`` (one address) for ``seconds`` of virtual time; its address size and the
    messages each of its queues holds at the end."""
    server, _ = _ran(config, seconds)
    (address,) = server.addresses.values()
    return address.state.size, [queue.depth_msgs for queue in address.queues]


def flow_lines(config: ArtemisConfig, *, seconds: float) -> list[tuple[bool, int, int]]:
    """Run ``config`` for ``seconds`` of virtual time; (blocked, address size, messages) of each
    address ``flow_stopped`` / ``flow_resumed``, in order (the broker's AMQ222183 / AMQ221046)."""
    _, log = _ran(config, seconds)
    return [
        (e["event_type"] == "flow_stopped", int(e["depth_bytes"]), int(e["depth_msgs"]))
        for e in log.of_type("flow_stopped", "flow_resumed")
    ]


def first_block(config: ArtemisConfig, *, seconds: float) -> int | None:
    """Run ``config`` for ``seconds`` of virtual time; the messages its address held when it
    first blocked (its first ``flow_stopped``), or None if it never did."""
    _, log = _ran(config, seconds)
    stops = log.of_type("flow_stopped")
    return int(stops[0]["depth_msgs"]) if stops else None


def run_artemis(config: ArtemisConfig, *, seconds: float) -> EngineAddress:
    """Run ``config`` (one address) for ``seconds`` of virtual time; its figures."""
    server, log = _ran(config, seconds)
    (address,) = server.addresses.values()
    state = address.state
    errors: Counter[str] = Counter()
    # What the clients were told: each rejected message's error, and a CORE producer's failed
    # credit request (logged as its link's detach with the error).
    for event in log.of_type("message_rejected", "link_detached"):
        detail = json.loads(event["detail"] or "{}")
        if event["event_type"] == "message_rejected" and detail.get("silent"):
            errors["(silent)"] += 1
        else:
            errors[str(detail.get("error") or detail.get("reason") or "(silent)")] += 1
    queue = address.queues[0]
    stuck = False
    granted: dict[str, int] = {}
    for producer in server.producers.values():
        if producer.has_message() and not producer._has_credit():
            stuck = True
        link = getattr(producer, "link", None)
        if link is not None:
            granted[producer.config.name] = int(link.delivery_count) + int(link.credit)
    in_memory = queue.depth_msgs - state.paged_msgs
    return EngineAddress(
        accepted=state.accepted,
        paged=state.paged,
        dropped=state.dropped,
        failed=state.failed,
        rejected=state.rejected,
        peak_size=state.peak_size,
        final_size=state.size,
        in_memory=in_memory,
        stored=queue.depth_msgs,
        errors=errors,
        flow_stopped=len(log.of_type("flow_stopped")),
        flow_resumed=len(log.of_type("flow_resumed")),
        credit_zero_with_work=stuck,
        credit_granted=granted,
        told_refused=sum(p.refused for p in server.producers.values()),
    )


# -- RabbitMQ (scenarios) ----------------------------------------------------------------------
def run_rabbit_scenario(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Run a scenario given as a dict; every event, in order."""
    collector = EventCollector()
    run_scenario(parse_scenario(spec, source=f"<conformance {spec['name']}>"), [collector])
    return collector.events


def two_senders_scenario(
    service_time_us: dict[str, int],
    queue_types: dict[str, str],
    *,
    shared_connection: bool,
    seconds: float,
) -> dict[str, Any]:
    """Seed 004's two senders over 0.9.1, flat out, each queue confirming one message per
    ``service_time_us`` (measured on the real broker) and of its type as declared there
    (``x-queue-type``); one connection or one per queue."""
    queues = [
        {"name": name, "service_time_us": us, "arguments": {"x-queue-type": queue_types[name]}}
        for name, us in service_time_us.items()
    ]
    publishers = [{"name": f"publisher-{name}", "queue": name} for name in service_time_us]
    groups = [publishers] if shared_connection else [[publisher] for publisher in publishers]
    connections = [
        {
            "name": f"connection-{index}",
            "protocol": AMQP_0_9_1,
            "frame_cost_us": 2,
            "publishers": group,
        }
        for index, group in enumerate(groups)
    ]
    return {
        "name": "conformance-two-senders",
        "kind": "workload",
        "duration_s": seconds,
        "queues": queues,
        "connections": connections,
    }


def one_sender_scenario(
    quorum_us: int, consume_us: int, write_us: int, *, batch: int, seconds: float, prefill: int
) -> dict[str, Any]:
    """Seed 004's one sender, one receiver over 0.9.1, as conformance/rabbit.py runs it: the
    benchmark's 12-byte messages in batches of ``batch``, the quorum queue confirming one message
    per ``quorum_us`` and the client taking ``consume_us`` a message and ``write_us`` a
    publish (each measured on the real broker), its socket's buffers holding a batch."""
    queues = [
        {"name": "classic", "prefill": {"count": prefill, "size": len(ONE_SENDER_BODY)}},
        {
            "name": "quorum",
            "service_time_us": quorum_us,
            "arguments": {"x-queue-type": "quorum"},
        },
    ]
    connection = {
        "name": "shared",
        "protocol": AMQP_0_9_1,
        "frame_cost_us": write_us,
        "socket_buffer_frames": 40_000,
        "consumers": [
            {
                "name": "consumer",
                "queue": "classic",
                "credit": ONE_SENDER_PREFETCH,
                "process_us": consume_us,
            }
        ],
        "publishers": [
            {"name": "publisher", "queue": "quorum", "batch": batch, "size": len(ONE_SENDER_BODY)}
        ],
    }
    return {
        "name": "conformance-one-sender-one-receiver",
        "kind": "workload",
        "duration_s": seconds,
        "queues": queues,
        "connections": [connection],
    }


def event_counts(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Per (event type, link), how many events (a consumer's deliveries are its dequeues)."""
    return Counter((event["event_type"], event.get("link") or "") for event in events)


def intake_rates(
    events: list[dict[str, Any]], queues: Sequence[str], *, after_s: float
) -> dict[str, float]:
    """Enqueues per second of each queue from ``after_s`` to the last event (the warm-up left
    out, as on the real broker)."""
    start = min(e["ts"] for e in events)  # microseconds
    end = max(e["ts"] for e in events)
    window = (end - start) / US_PER_SECOND - after_s
    counts = dict.fromkeys(queues, 0)
    for event in events:
        late = event["ts"] - start >= after_s * US_PER_SECOND
        if event["event_type"] == "enqueue" and event["queue"] in counts and late:
            counts[event["queue"]] += 1
    return {queue: count / window for queue, count in counts.items()}


def blocked_reasons(events: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """``connection_blocked`` events per connection, by reason (``credit_flow:<queue>``,
    ``alarm``)."""
    reasons: dict[str, Counter[str]] = {}
    for event in events:
        if event["event_type"] == "connection_blocked":
            reason = json.loads(event["detail"])["reason"]
            reasons.setdefault(event["connection"], Counter())[reason] += 1
    return reasons


def memory_alarm_scenario(
    *, prefill: int, raise_s: float, clear_s: float, seconds: float, consumer_latency_us: int
) -> dict[str, Any]:
    """A publisher connection flat out into one queue, a consumer connection draining a prefilled
    queue (prefetch 100: ``consumer_latency_us`` one way sets its pace, about 100 messages per
    round trip), and a memory alarm from ``raise_s`` to ``clear_s``."""
    return {
        "name": "conformance-memory-alarm",
        "kind": "workload",
        "duration_s": seconds,
        "queues": [
            {"name": "alarm-in", "service_time_us": 200},
            {"name": "alarm-drain", "prefill": {"count": prefill, "size": 16}},
        ],
        "connections": [
            {
                "name": "publisher",
                "protocol": AMQP_0_9_1,
                "publishers": [{"name": "publisher-in", "queue": "alarm-in", "size": 16}],
            },
            {
                "name": "consumer",
                "protocol": AMQP_0_9_1,
                "latency_us": consumer_latency_us,
                "consumers": [{"name": "consumer-drain", "queue": "alarm-drain", "credit": 100}],
            },
        ],
        "alarms": [{"resource": "memory", "raise_s": raise_s, "clear_s": clear_s}],
    }


def counts_between(
    events: list[dict[str, Any]], event_type: str, queue: str, from_s: float, to_s: float
) -> int:
    start = min(e["ts"] for e in events)
    return sum(
        1
        for e in events
        if e["event_type"] == event_type
        and e["queue"] == queue
        and from_s * US_PER_SECOND <= e["ts"] - start < to_s * US_PER_SECOND
    )


#: The consumer of :func:`paced_consumer_scenario`.
PACED_CONSUMER = "paced-consumer"


def paced_consumer_scenario(
    *, messages: int, prefetch: int, process_us: int, latency_us: int
) -> dict[str, Any]:
    """A 0.9.1 consumer with ``prefetch`` whose application takes ``process_us`` per message,
    over a queue holding ``messages``; long enough for each to wait a round trip (prefetch 1
    on a loaded machine's round trip of milliseconds)."""
    return {
        "name": "conformance-paced-consumer",
        "kind": "workload",
        "duration_s": messages * (process_us + 2 * latency_us) / US_PER_SECOND + 1.0,
        "queues": [{"name": "paced", "prefill": {"count": messages, "size": 512}}],
        "connections": [
            {
                "name": "consumer",
                "protocol": AMQP_0_9_1,
                "latency_us": latency_us,
                "consumers": [
                    {
                        "name": PACED_CONSUMER,
                        "queue": "paced",
                        "credit": prefetch,
                        "process_us": process_us,
                    }
                ],
            }
        ],
    }


def paced_figures(
    events: list[dict[str, Any]], *, messages: int, latency_us: int, sample_at: Sequence[int]
) -> tuple[float, dict[int, int]]:
    """The figures :func:`conformance.rabbit.paced_consumer` reads on the real broker: seconds
    from the first message taken to the last acknowledged (the consumer's side of the wire:
    a delivery arrives ``latency_us`` after the broker logs it, an ack left ``latency_us``
    before the broker reads it), and the queue's ready messages while message k was processed
    (those the broker had not sent when it read ack k)."""
    sent = acked = 0
    first_sent = last_acked = None
    ready_while: dict[int, int] = {}
    for event in events:
        if event.get("link") != PACED_CONSUMER:
            continue
        if event["event_type"] == "transfer":
            sent += 1
            first_sent = event["ts"] if first_sent is None else first_sent
        elif event["event_type"] == "flow" and json.loads(event["detail"]).get("frame") == (
            "basic.ack"
        ):
            acked += 1
            if acked in sample_at:
                ready_while[acked] = messages - sent
            last_acked = event["ts"]
    if first_sent is None or last_acked is None or acked != messages:
        raise RuntimeError(f"the engine's consumer acknowledged {acked} of {messages} messages")
    elapsed_us = (last_acked - latency_us) - (first_sent + latency_us)
    return elapsed_us / US_PER_SECOND, ready_while


# -- RabbitMQ 4.0, AMQP 1.0 (scenarios) -------------------------------------------------------
def amqp10_publisher_scenario(
    service_time_us: int,
    *,
    seconds: float,
    frame_cost_us: int,
    alarm: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """One AMQP 1.0 publisher, flat out, to a classic queue confirming one message per
    ``service_time_us``; ``alarm``: a memory alarm raised and cleared at those seconds."""
    spec: dict[str, Any] = {
        "name": "conformance-amqp10-publisher",
        "kind": "workload",
        "duration_s": seconds,
        "queues": [{"name": "queue", "service_time_us": service_time_us}],
        "connections": [
            {
                "name": "connection",
                "protocol": "amqp-1.0",
                "frame_cost_us": frame_cost_us,
                "publishers": [{"name": "publisher", "queue": "queue", "size": 100}],
            }
        ],
    }
    if alarm is not None:
        spec["alarms"] = [{"resource": "memory", "raise_s": alarm[0], "clear_s": alarm[1]}]
    return spec


def broker_grants(events: list[dict[str, Any]], link: str | None = None) -> list[tuple[int, int]]:
    """The broker's link-credit grants to publishers (``link``: to that one), as its flow frames
    carry them: (its delivery-count when it granted, the link-credit). The flow event is logged
    where the client applies it (its own delivery-count, the credit left); the grant's limit is
    the same."""
    grants = []
    for event in events:
        mine = link is None or event.get("link") == link
        if event["event_type"] == "flow" and event.get("link_role") == "publisher" and mine:
            granted = json.loads(event["detail"])["link_credit"]
            limit = event["delivery_count"] + event["credit"]
            grants.append((limit - granted, granted))
    return grants


def session_windows(events: list[dict[str, Any]]) -> list[tuple[float, int, int, str]]:
    """The broker's incoming window as it set it: (seconds from the first event,
    next-incoming-id, incoming-window, why)."""
    start = min(event["ts"] for event in events)
    found = []
    for event in events:
        if event["event_type"] == "session_window":
            detail = json.loads(event["detail"])
            found.append(
                (
                    (event["ts"] - start) / US_PER_SECOND,
                    detail["next_incoming_id"],
                    detail["incoming_window"],
                    detail["reason"],
                )
            )
    return found


def transfers_before(events: list[dict[str, Any]], seconds: float) -> int:
    start = min(event["ts"] for event in events)
    return sum(
        1
        for event in events
        if event["event_type"] == "transfer" and event["ts"] - start < seconds * US_PER_SECOND
    )


#: RabbitMQ 4.0 and 4.1's first delivery-count of a consumer link and first transfer-id of a
#: session (the engine's default is 4.2's 0: flowctl_core/protocols/config.py).
RABBITMQ_4_0_COUNTS = {"initial_delivery_count": 2**32 - 5, "initial_outgoing_id": 2**32 - 4}


def amqp10_consumer_scenario(
    ready: int, credit: int, *, drain: bool, seconds: float = 0.5
) -> dict[str, Any]:
    """A queue holding ``ready`` messages of 100 B and one AMQP 1.0 consumer that grants
    ``credit`` once (never again: its top-up point 0; with ``drain``, drained), on RabbitMQ
    4.0's counts."""
    consumer: dict[str, Any] = {"name": "consumer", "queue": "queue", "credit": credit}
    if drain:
        consumer |= {"drain": True, "drain_poll_us": int(seconds * 2 * US_PER_SECOND)}
    else:
        consumer["top_up_below"] = 0
    return {
        "name": "conformance-amqp10-consumer",
        "kind": "workload",
        "duration_s": seconds,
        "rabbitmq": RABBITMQ_4_0_COUNTS,
        "queues": [{"name": "queue", "prefill": {"count": ready, "size": 100}}],
        "connections": [{"name": "connection", "protocol": "amqp-1.0", "consumers": [consumer]}],
    }


def amqp10_two_senders_scenario(
    service_time_us: dict[str, int],
    queue_types: dict[str, str],
    *,
    frame_cost_us: int,
    seconds: float,
) -> dict[str, Any]:
    """Seed 004's two senders over AMQP 1.0: one session, a publisher link to each queue, flat
    out; each queue confirming one message per ``service_time_us`` and of its declared type,
    the client writing a frame per ``frame_cost_us`` (each measured on the real broker)."""
    return {
        "name": "conformance-two-senders-amqp10",
        "kind": "workload",
        "duration_s": seconds,
        "queues": [
            {"name": name, "service_time_us": us, "arguments": {"x-queue-type": queue_types[name]}}
            for name, us in service_time_us.items()
        ],
        "connections": [
            {
                "name": "connection",
                "protocol": "amqp-1.0",
                "frame_cost_us": frame_cost_us,
                "publishers": [
                    {"name": f"publisher-{name}", "queue": name, "size": 100}
                    for name in service_time_us
                ],
            }
        ],
    }
