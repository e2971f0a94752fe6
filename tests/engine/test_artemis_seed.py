"""Apache ActiveMQ Artemis (flowctl_core/protocols/artemis.py, artemis_flow.py): the seed's
sentences.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/): 003 =
003_f23b3b194dd46fde.txt (Apache Artemis flow control). Moved from tests/test_seed_conformance.py
and tests/test_seed_conformance_links.py (provenance: the ``seed`` mark).
"""

from __future__ import annotations

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.protocols.artemis import (
    AddressConfig,
    ArtemisConfig,
    ArtemisConsumerConfig,
    ArtemisProducerConfig,
    ArtemisServer,
)
from flowctl_core.protocols.artemis_flow import (
    DEFAULT_CONSUMER_WINDOW,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    DEFAULT_MAX_SIZE_BYTES,
    DEFAULT_QUEUE_REFERENCE_OVERHEAD,
    AddressSettings,
    ArtemisConfigError,
    ConsumerWindow,
    rate_limiter,
)
from tests.engine.helpers import SECOND

pytestmark = pytest.mark.seed("003")


def _artemis(config: ArtemisConfig) -> tuple[Scheduler, ArtemisServer]:
    scheduler = Scheduler(0)
    bus = EventBus("t", scheduler, validate=True)
    bus.subscribe(EventCollector())
    server = ArtemisServer(Broker(bus, scheduler), config)
    server.start()
    return scheduler, server


# -- Artemis ---------------------------------------------------------------------------------------
def test_artemis_reject_threshold_must_be_above_the_block_limit() -> None:
    """003: "This is additional parameter allows a kind of soft and hard limit, in normal
    circumstances the broker will utilize the max-size-bytes parameter ... but will protect the
    broker by rejecting messages once the address size is reached." (DESIGN §2: "the reject
    threshold above the block limit")."""
    AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=1001)
    AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=-1)
    for threshold in (1000, 999, 0):
        with pytest.raises(ArtemisConfigError):
            AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=threshold)


# -- Artemis (seed 003) ----------------------------------------------------------------------------
def test_artemis_defaults() -> None:
    """003: "By default, the consumerWindowSize is set to 1 MiB (1024 * 1024 bytes)"; "in the
    default configuration all addresses are set to block producers after 10 MiB"; reject
    threshold "by default set to -1 (or no limit)"; max rates: "The default value is -1."."""
    assert DEFAULT_CONSUMER_WINDOW == 1024 * 1024
    assert ArtemisConsumerConfig("c", "q").window == 1024 * 1024
    settings = AddressSettings()
    assert settings.max_size_bytes == DEFAULT_MAX_SIZE_BYTES == 10 * 1024 * 1024
    assert settings.address_full_policy == "BLOCK"
    assert settings.max_size_bytes_reject_threshold == -1
    assert (settings.amqp_credits, settings.amqp_low_credits) == (100, 30)
    assert ArtemisProducerConfig("p", "q").max_rate == -1
    assert ArtemisConsumerConfig("c", "q").max_rate == -1


@pytest.mark.parametrize("rate", [0, -2, -100])
def test_a_max_rate_must_be_positive_or_minus_one(rate: int) -> None:
    """003: "The rate must be a positive integer to enable this functionality" / "Setting this to
    -1 disables rate limited flow control."."""
    assert rate_limiter(-1) is None
    assert rate_limiter(1) is not None
    with pytest.raises(ArtemisConfigError):
        rate_limiter(rate)
    with pytest.raises(ArtemisConfigError):
        ArtemisProducerConfig("p", "q", max_rate=rate)
    with pytest.raises(ArtemisConfigError):
        ArtemisConsumerConfig("c", "q", max_rate=rate)


def test_consumer_window_minus_one_buffers_without_bound() -> None:
    """003: "-1 for an unbounded buffer" / "This will allow unbounded message buffering on the
    client side." A consumer that takes a second per message still receives every message."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(AddressConfig("q", AddressSettings(max_size_bytes=-1), prefill_count=500),),
            consumers=(ArtemisConsumerConfig("c", "q", window=-1, process_us=SECOND),),
        )
    )
    scheduler.run_until(SECOND // 2)
    consumer = server.consumers["c"]
    assert consumer.server_end.credits is None
    assert consumer.received == 500 and consumer.peak_buffered_msgs >= 499
    assert ConsumerWindow(-1).on_take(10_000) == 0  # nothing to give back: no credit exists


def test_consumer_window_counts_bytes_not_messages() -> None:
    """003: "The total maximum size of messages (in bytes) that will be buffered on each consumer
    is determined by the consumerWindowSize parameter." A 10,000-byte window holds 10 messages of
    1,000 bytes (the server sends while it has any credit left). A message's size here is all
    its delivery counts (delivery overhead 0; with Artemis's own, 366 B, it holds 8)."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(
                AddressConfig(
                    "q", AddressSettings(max_size_bytes=-1), prefill_count=50, prefill_size=1_000
                ),
            ),
            consumers=(ArtemisConsumerConfig("c", "q", window=10_000, process_us=10 * SECOND),),
            core_delivery_overhead_bytes=0,
        )
    )
    scheduler.run_until(SECOND)
    consumer = server.consumers["c"]
    assert consumer.received == 10
    assert consumer.server_end.credits == 0


def test_address_size_counts_a_message_once_for_all_its_queues() -> None:
    """003: "The address block applies to all queues registered to that address. i.e. the total
    memory for all queues bound to that address will not exceed max-size-bytes."."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(
                AddressConfig(
                    "t", AddressSettings(max_size_bytes=100_000), queues=("s1", "s2", "s3")
                ),
            ),
            producers=(ArtemisProducerConfig("p", "t", size=1_000, count=20),),
        )
    )
    scheduler.run_until(SECOND)
    state = server.addresses["t"].state
    assert state.accepted == 20
    # Each message once at its memory estimate (DESIGN §2: body + the CORE overhead), not 3 x;
    # a real broker adds a reference per queue after the first (72 B each, measured).
    per_message = 1_000 + DEFAULT_CORE_MESSAGE_OVERHEAD + 2 * DEFAULT_QUEUE_REFERENCE_OVERHEAD
    assert state.size == 20 * per_message
    assert all(server.broker.queue(q).depth_msgs == 20 for q in ("s1", "s2", "s3"))
