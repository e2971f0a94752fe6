"""Cases from the brokers' own test suites, replayed against our engine.

Each test names the upstream case it mirrors (apache/activemq-artemis, and for AMQP 0.9.1
connection blocking rabbitmq/rabbitmq-java-client) and the fact it checks. Inputs are translated
to our engine: a message's size is its body, and the address counts it with the engine's default
per-protocol overhead (DESIGN §2: the broker's memory estimate of a message), wall-clock waits
become virtual time, and sessions the upstream test closes become
consumers that start later or never take a message. Where the upstream rule and ours differ and
nothing in DESIGN.md, seed 003 or README.md decides it, the test is a strict xfail whose reason
states the difference; differences those documents decide are noted in the comments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.protocols.amqp091 import Amqp091Connection
from flowctl_core.protocols.artemis import (
    AddressConfig,
    AmqpProducer,
    ArtemisConfig,
    ArtemisConsumerConfig,
    ArtemisProducerConfig,
    ArtemisServer,
)
from flowctl_core.protocols.artemis_flow import (
    DEFAULT_AMQP_MESSAGE_OVERHEAD,
    DEFAULT_CONSUMER_WINDOW,
    DEFAULT_CORE_DELIVERY_OVERHEAD,
    DEFAULT_CORE_ENCODE_OVERHEAD,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    AddressSettings,
    ArtemisConfigError,
    ConsumerWindow,
    RateLimiter,
)
from flowctl_core.protocols.config import ConnectionConfig, PublisherConfig
from schemas.broker_events import AMQP_0_9_1
from tests.engine.helpers import SECOND, expected_core_bound_bytes

pytestmark = pytest.mark.implementation_case

MS = 1_000
KIB = 1024
MIB = 1024 * 1024


class Server:
    """An Artemis server on its own virtual clock; every event is schema-checked."""

    def __init__(self, config: ArtemisConfig) -> None:
        self.scheduler = Scheduler(0)
        self.log = EventCollector()
        bus = EventBus("artemis-cases", self.scheduler, validate=True)
        bus.subscribe(self.log)
        self.broker = Broker(bus, self.scheduler)
        self.server = ArtemisServer(self.broker, config)
        self.server.start()

    def run(self, until_us: int) -> Server:
        self.scheduler.run_until(until_us)
        return self

    def state(self, address: str = "q") -> Any:
        return self.server.addresses[address].state

    def producer(self, name: str) -> Any:
        return self.server.producers[name]

    def consumer(self, name: str) -> Any:
        return self.server.consumers[name]

    def events(self, event_type: str, link: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.log.of_type(event_type) if link is None or e.get("link") == link]


def settings(
    max_size: int = -1,
    policy: str = "BLOCK",
    reject_threshold: int = -1,
    **extra: Any,
) -> AddressSettings:
    return AddressSettings(
        max_size_bytes=max_size,
        address_full_policy=policy,  # type: ignore[arg-type]
        max_size_bytes_reject_threshold=reject_threshold,
        **extra,
    )


def detail(event: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(event["detail"]))


# The connection latency and send cost of the cases below (the engine's defaults, set explicitly
# so that the bound can be worked out from them): 100 // 10 = 10 messages on the wire.
LATENCY_US = 100
SEND_COST_US = 10

# -- ProducerFlowControlTest (CORE producers, BLOCK) ---------------------------------------------
FLOW_CONTROL_CASES = {
    # name: (messages, size, max-size-bytes, producer window, consumer window, consumers,
    #        producers, consumer delay in ms)
    "SingleConsumer": (1000, 500, 10 * KIB, 1024, 1024, 1, 1, 0),
    "SingleConsumerLargeMaxSize": (1000, 500, MIB, 1024, 1024, 1, 1, 0),
    "MultipleConsumers": (1000, 500, -1, 1024, 1024, 5, 1, 0),
    "ZeroConsumerWindowSize": (1000, 500, 10 * KIB, 1024, 0, 1, 1, 0),
    "SingleConsumerSlowConsumer": (100, 500, 1024, 512, 512, 1, 1, 10),
    "SmallMessages": (1000, 0, 10 * KIB, 1024, 1024, 1, 1, 0),
    "LargerMessagesSmallWindowSize": (1000, 10 * KIB, 10 * KIB, 1024, 1024, 1, 1, 0),
    "MultipleProducers": (1000, 500, MIB, 1024, 1024, 1, 5, 0),
    "MultipleProducersAndConsumers": (500, 500, 100 * KIB, 1024, 1024, 1, 3, 3),
}
# Each case's overshoot bound by hand: producers x ((2 x max(encoded, window // 2) - 1) //
# encoded messages of credit + 10 on the wire) x (size + the default CORE overhead, OVH), where
# encoded = size + the default CORE encode overhead (357 B): what a message costs in credit.
OVH = DEFAULT_CORE_MESSAGE_OVERHEAD
FLOW_CONTROL_BOUNDS = {
    # 500 + 357 = 857 > 512: (2 x 857 - 1) // 857 = 1 message of credit + 10: 11.
    "SingleConsumer": 1 * (1 + 10) * (500 + OVH),
    "SingleConsumerLargeMaxSize": 1 * (1 + 10) * (500 + OVH),  # 11, as above
    "ZeroConsumerWindowSize": 1 * (1 + 10) * (500 + OVH),  # 11, as above
    "SingleConsumerSlowConsumer": 1 * (1 + 10) * (500 + OVH),  # 11 (max(857, 256) = 857)
    # 0-byte messages still cost 357 in credit: (2 x 512 - 1) // 357 = 2 + 10: 12.
    "SmallMessages": 1 * (2 + 10) * (0 + OVH),
    # 10,240 + 357 = 10,597 > 512: (2 x 10,597 - 1) // 10,597 = 1 + 10: 11.
    "LargerMessagesSmallWindowSize": 1 * (1 + 10) * (10 * KIB + OVH),
    "MultipleProducers": 5 * (1 + 10) * (500 + OVH),  # 5 x 11
    "MultipleProducersAndConsumers": 3 * (1 + 10) * (500 + OVH),  # 3 x 11
}


@pytest.mark.parametrize("case", list(FLOW_CONTROL_CASES))
def test_producer_flow_control_test_flow_control(case: str) -> None:
    # ProducerFlowControlTest.testFlowControl<case>: under BLOCK with these windows and limits,
    # every consumer (one queue each on the address) gets all messages * producers, with no
    # deadlock between producer credits, address memory and consumer credits. Ours also keeps
    # the address within max-size-bytes plus its producers' windows (seed 003), SmallMessages'
    # 0-byte messages too: each costs its encoded size (the default encode overhead) in credit.
    messages, size, max_size, p_window, c_window, consumers, producers, delay_ms = (
        FLOW_CONTROL_CASES[case]
    )
    queues = tuple(f"testqueue{i}" for i in range(consumers))
    config = ArtemisConfig(
        addresses=(AddressConfig("testaddress", settings(max_size), queues=queues),),
        producers=tuple(
            ArtemisProducerConfig(
                f"p{j}",
                "testaddress",
                window=p_window,
                size=size,
                count=messages,
                send_cost_us=SEND_COST_US,
            )
            for j in range(producers)
        ),
        consumers=tuple(
            ArtemisConsumerConfig(
                f"c{i}", queue, window=c_window, process_us=max(10, delay_ms * MS)
            )
            for i, queue in enumerate(queues)
        ),
        latency_us=LATENCY_US,
    )
    server = Server(config).run(30 * SECOND)
    for i in range(consumers):
        assert server.consumer(f"c{i}").processed == messages * producers
    state = server.state("testaddress")
    assert state.size == 0 and state.accepted == messages * producers
    if max_size != -1:
        expected = producers * expected_core_bound_bytes(
            p_window,
            size,
            LATENCY_US,
            SEND_COST_US,
            DEFAULT_CORE_MESSAGE_OVERHEAD,
            encode=DEFAULT_CORE_ENCODE_OVERHEAD,
        )
        assert expected == FLOW_CONTROL_BOUNDS[case]
        assert server.server.overshoot_bound_bytes("testaddress") == expected
        assert state.peak_size < max_size + expected


def test_producer_flow_control_test_closing_session_unblocks_blocked_producer() -> None:
    # ProducerFlowControlTest.testClosingSessionUnblocksBlockedProducer: max-size-bytes 1024,
    # BLOCK, producerWindowSize 1024, messages of 2000 bytes and no consumer: the producer blocks
    # before its 10th send ("This will block") and stays blocked. As in Artemis (DESIGN §2), the
    # server grants the 512 asked at the start and the 1,845 more asked for the first message
    # (its encoded size, 2,000 + the 357 encode overhead, less the 512 arriving) whole while the
    # address is empty, though both exceed the 1,024 bytes of room: one message
    # goes out; it fills the address (2,000 + overhead >= 1,024) before the request for the
    # second lands, which is withheld.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(1024)),),
            producers=(
                ArtemisProducerConfig(
                    "p", "q", window=1024, size=2000, count=10, send_cost_us=SEND_COST_US
                ),
            ),
            latency_us=LATENCY_US,
        )
    ).run(SECOND)
    producer = server.producer("p")
    assert producer.sent == 1
    flows = [detail(e) for e in server.events("flow", "p")]
    assert [f["requested"] for f in flows if "requested" in f] == [512, 1_845, 2_357]
    assert [f["granted"] for f in flows if "granted" in f] == [512, 1_845]
    assert producer.blocked_total_us() > SECOND // 2
    assert server.server.addresses["q"].pending_core  # the credit request waits for room
    assert server.state().peak_size == 2000 + DEFAULT_CORE_MESSAGE_OVERHEAD
    # A message costs 2,000 + the encode overhead (2,357) in credit: (2 x 2,357 - 1) // 2,357 =
    # 1 message of credit + 10 of 2000 on the wire, each 2000 + O.
    expected = expected_core_bound_bytes(
        1024,
        2000,
        LATENCY_US,
        SEND_COST_US,
        DEFAULT_CORE_MESSAGE_OVERHEAD,
        encode=DEFAULT_CORE_ENCODE_OVERHEAD,
    )
    assert expected == (1 + 10) * (2000 + DEFAULT_CORE_MESSAGE_OVERHEAD)
    assert server.server.overshoot_bound_bytes("q") == expected
    assert server.state().peak_size < 1024 + expected


def test_address_full_logging_test_block_logging() -> None:
    # AddressFullLoggingTest.testBlockLogging: max-size-bytes 20 KiB, BLOCK, default producer
    # window, 200 sends of 1 KiB: the producer blocks before the 200th ("message sending has been
    # blocked", AMQ222183), and production resumes once a consumer takes the messages (the
    # "unblocking" line, AMQ221046): all 200 arrive. DESIGN §2: our log has the address's
    # flow_stopped / flow_resumed for those lines.
    blocked = Server(
        ArtemisConfig(
            addresses=(AddressConfig("myAddress", settings(20 * KIB), queues=("myQueue",)),),
            producers=(ArtemisProducerConfig("p", "myAddress", size=1024, count=200),),
        )
    ).run(3 * SECOND)
    assert blocked.producer("p").sent < 200
    assert blocked.producer("p").blocked_total_us() > 2 * SECOND
    stopped = blocked.events("flow_stopped")
    assert len(stopped) == 1 and not blocked.events("flow_resumed")
    assert stopped[0]["queue"] == "myAddress" and stopped[0]["depth_bytes"] >= 20 * KIB

    drained = Server(
        ArtemisConfig(
            addresses=(AddressConfig("myAddress", settings(20 * KIB), queues=("myQueue",)),),
            producers=(ArtemisProducerConfig("p", "myAddress", size=1024, count=200),),
            consumers=(ArtemisConsumerConfig("c", "myQueue", window=1024, start_us=3 * SECOND),),
        )
    ).run(10 * SECOND)
    producer = drained.producer("p")
    assert producer.sent == 200 and drained.consumer("c").processed == 200
    assert 0 < producer.blocked_total_us() < 10 * SECOND
    resumed = drained.events("flow_resumed")
    assert resumed and resumed[0]["ts"] > 3 * SECOND  # unblocked by the consumer's acks
    assert resumed[0]["queue"] == "myAddress" and resumed[0]["depth_bytes"] < 20 * KIB
    assert drained.state("myAddress").size == 0


# -- ConsumerWindowSizeTest (CORE consumers) ------------------------------------------------------
def test_consumer_window_size_test_send_window_size() -> None:
    # ConsumerWindowSizeTest.testSendWindowSize: a window of 100 messages' size, two consumers on
    # the queue, 400 messages sent. Round robin gives the consumer that never takes a message
    # exactly its window (100) and the other one the rest, so the active consumer can receive
    # 2 x 100 (the upstream assertion) and more. A message's size is what its delivery costs in
    # credit: the body + the delivery overhead (upstream sizes the window from the encoding).
    size = 100
    delivery = size + DEFAULT_CORE_DELIVERY_OVERHEAD
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings()),),
            producers=(ArtemisProducerConfig("p", "q", size=size, count=400),),
            consumers=(
                ArtemisConsumerConfig("receiving", "q", window=100 * delivery, process_us=10),
                ArtemisConsumerConfig("idle", "q", window=100 * delivery, process_us=100 * SECOND),
            ),
        )
    ).run(5 * SECOND)
    receiving, idle = server.consumer("receiving"), server.consumer("idle")
    # 100 messages: one in the application's hands (it never finishes), 99 in the buffer.
    assert idle.received == 100 and idle.processed == 0
    assert idle.peak_buffered_bytes == 99 * delivery
    assert receiving.processed == 300 >= 200
    assert receiving.received + idle.received == 400


def test_consumer_window_size_test_slow_consumer_on_message_handler_buffer_one() -> None:
    # ConsumerWindowSizeTest.testSlowConsumerOnMessageHandlerBufferOne: window 1, a handler that
    # holds a message: the credit it returned when it took that message lets exactly one more
    # into its buffer (getBufferSize() == 1); a second consumer then gets all the rest.
    # (testSlowConsumerBufferingOne, whose consumer never takes even one message and so buffers
    # exactly 1 of 100, has no equivalent: our consumer application always takes its first.)
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(), prefill_count=100, prefill_size=60),),
            consumers=(
                ArtemisConsumerConfig("holder", "q", window=1, process_us=100 * SECOND),
                ArtemisConsumerConfig("cons1", "q", window=1, process_us=10, start_us=10 * MS),
            ),
        )
    ).run(SECOND)
    holder, cons1 = server.consumer("holder"), server.consumer("cons1")
    assert (holder.received, len(holder.buffer), holder.peak_buffered_msgs) == (2, 1, 1)
    assert cons1.processed == 98


def test_consumer_window_size_test_slow_consumer_no_buffers() -> None:
    # ConsumerWindowSizeTest.testSlowConsumerOnMessageHandlerNoBuffers / testSlowConsumerNoBuffer2:
    # window 0: "A slow consumer shouldn't buffer anything on the client side": while it holds a
    # message its buffer is empty and everything else goes to the other consumer, in order.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(), prefill_count=100, prefill_size=60),),
            consumers=(
                ArtemisConsumerConfig("holder", "q", window=0, process_us=100 * SECOND),
                ArtemisConsumerConfig("cons1", "q", window=0, process_us=10, start_us=MS),
            ),
        )
    ).run(SECOND)
    holder, cons1 = server.consumer("holder"), server.consumer("cons1")
    assert holder.received == 1 and len(holder.buffer) == 0
    assert holder.peak_buffered_msgs == 1  # only the message it asked for, then taken
    assert cons1.processed == 99 and cons1.peak_buffered_msgs == 1
    delivered = [e["message_id"] for e in server.events("transfer", "cons1")]
    assert delivered == sorted(delivered)


@pytest.mark.parametrize("consumers", [1, 10], ids=["SingleImmediate", "MultipleImmediate"])
def test_consumer_window_size_test_immediate(consumers: int) -> None:
    # ConsumerWindowSizeTest.testSingleImmediate / testMultipleImmediate: window 0, 200 messages:
    # one consumer, or ten sharing the queue, receive exactly the 200, each message once, and no
    # consumer ever holds more than the one message it asked for.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(), prefill_count=200, prefill_size=60),),
            consumers=tuple(
                ArtemisConsumerConfig(f"c{i}", "q", window=0, process_us=50)
                for i in range(consumers)
            ),
        )
    ).run(2 * SECOND)
    every = list(server.server.consumers.values())
    assert sum(c.processed for c in every) == 200
    delivered = [e["message_id"] for e in server.events("transfer")]
    assert len(delivered) == len(set(delivered)) == 200
    assert max(c.peak_buffered_msgs for c in every) == 1
    if consumers > 1:
        assert all(c.processed > 0 for c in every)


def test_consumer_window_size_test_no_window_round_robin() -> None:
    # ConsumerWindowSizeTest.testNoWindowRoundRobin: window -1, two consumers, 100 messages sent:
    # round robin puts exactly 50 in each consumer's buffer.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings()),),
            producers=(ArtemisProducerConfig("p", "q", size=60, count=100),),
            consumers=(
                ArtemisConsumerConfig("consA", "q", window=-1, process_us=100 * SECOND),
                ArtemisConsumerConfig("consB", "q", window=-1, process_us=100 * SECOND),
            ),
        )
    ).run(SECOND)
    assert server.consumer("consA").received == 50
    assert server.consumer("consB").received == 50


def test_consumer_window_size_test_default_consumer_window_size() -> None:
    # ConsumerWindowSizeTest.testDefaultConsumerWindowSize: the client window (the batch in which
    # credits go back) is half the default consumerWindowSize of 1 MiB.
    window = ConsumerWindow(DEFAULT_CONSUMER_WINDOW)
    assert window.client_window == DEFAULT_CONSUMER_WINDOW // 2 == 512 * KIB
    assert window.initial_credits() == MIB


def test_consumer_window_size_test_address_settings_window() -> None:
    # ConsumerWindowSizeTest.testConsumerWindowSizeAddressSettingsDifferentAddressAndQueueName: a
    # 5 KiB window gives a client window of 2560 and the server consumer 2 x 2560 = 5120 bytes of
    # available credit once attached (nothing to send yet).
    assert ConsumerWindow(5 * KIB).client_window == 5 * KIB // 2
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("addressA", settings(), queues=("queueA",)),),
            consumers=(ArtemisConsumerConfig("c", "queueA", window=5 * KIB),),
        )
    ).run(SECOND)
    assert server.consumer("c").server_end.credits == 5 * KIB


# -- MessageRateTest and TokenBucketLimiterImplTest (consumerMaxRate / producerMaxRate) -----------
@pytest.mark.parametrize(
    "window",
    [DEFAULT_CONSUMER_WINDOW, MIB],
    ids=["ConsumeRate/ConsumeRateListener", "ConsumeRate2"],
)
def test_message_rate_test_consume_rate(window: int) -> None:
    # MessageRateTest.testConsumeRate / testConsumeRateListener / testConsumeRate2:
    # consumerMaxRate 10, 12 messages waiting: consuming all 12 takes at least a second.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(), prefill_count=12, prefill_size=60),),
            consumers=(ArtemisConsumerConfig("c", "q", window=window, process_us=0, max_rate=10),),
        )
    ).run(5 * SECOND)
    times = server.consumer("c").processed_at_us
    assert len(times) == 12
    assert times[-1] - times[0] >= SECOND


def test_message_rate_test_produce_rate_by_design() -> None:
    # MessageRateTest.testProduceRate: producerMaxRate 10; Artemis takes >= 1 s for 10 sends
    # because its TokenBucketLimiterImpl starts with no tokens (nothing in the first second).
    # README ("Where DESIGN.md leaves room") reads the seed's "never ... higher than that
    # specified" as at most `rate` in any sliding second *from t=0*: our 10 go out at once, and
    # the second's worth is only exceeded, and the wait appears, from the 11th send.
    def send_span(count: int) -> int:
        server = Server(
            ArtemisConfig(
                addresses=(AddressConfig("q", settings()),),
                producers=(ArtemisProducerConfig("p", "q", size=60, count=count, max_rate=10),),
            )
        ).run(5 * SECOND)
        sends = [e["ts"] for e in server.events("transfer", "p")]
        assert len(sends) == count
        return sends[-1] - sends[0]

    assert send_span(10) < SECOND  # Artemis: >= 1 s (documented difference)
    assert send_span(11) >= SECOND


@pytest.mark.parametrize("rate", [1, 10, 100, 1000, 10_000])
def test_token_bucket_limiter_impl_test_rate(rate: int) -> None:
    # TokenBucketLimiterImplTest.testRate: calls made flat out for 5 s (to settle), 2 s idle, then
    # flat out for 5 s more: rate 1 passes 5 or 6 ("in 5 seconds you may get exactly 6 buckets"),
    # other rates pass 5 x rate within 5 %. Virtual time: a call waits for the limiter's permit.
    limiter = RateLimiter(rate)

    def flat_out(start: int, span: int) -> tuple[int, int]:
        now, count = start, 0
        while now - start < span:
            if not limiter.allows(now):
                now = limiter.retry_at_us()
            limiter.record(now)
            count += 1
        return now, count

    now, _ = flat_out(0, 5 * SECOND)
    _, count = flat_out(now + 2 * SECOND, 5 * SECOND)
    if rate == 1:
        assert count in (5, 6)
    else:
        assert rate * 0.95 < count / 5 < rate * 1.05


# -- AmqpFlowControlTest / AmqpFlowControlFailTest (AMQP producers) --------------------------------
AMQP_MAX = MIB
AMQP_REJECT = 2 * MIB
AMQP_SIZE = 50 * KIB


def amqp_block_address(**extra: Any) -> AddressConfig:
    # AmqpFlowControlTest.configureAddressPolicy: BLOCK, 1 MiB, reject threshold 2 MiB.
    return AddressConfig("q", settings(AMQP_MAX, reject_threshold=AMQP_REJECT, **extra))


def test_amqp_flow_control_test_credits_are_not_allocated_when_address_is_full() -> None:
    # AmqpFlowControlTest.testCreditsAreNotAllocatedWhenAddressIsFull: an acceptor granting one
    # credit at a time (amqpCredits=1, refreshed once it is used up), 50 KiB messages sent until
    # the address is full: then no more credit comes, the producer waits with 0 credit, and the
    # address size ends between max-size-bytes and the reject threshold (nothing is rejected).
    server = Server(
        ArtemisConfig(
            addresses=(amqp_block_address(amqp_credits=1, amqp_low_credits=0),),
            producers=(
                ArtemisProducerConfig("sender", "q", protocol="amqp", size=AMQP_SIZE, count=50),
            ),
        )
    ).run(2 * SECOND)
    producer, state = server.producer("sender"), server.state()
    assert isinstance(producer, AmqpProducer)
    assert AMQP_MAX <= state.size <= AMQP_REJECT
    assert state.rejected == 0
    # Each counts 50 KiB + the default AMQP overhead: 20 are still below 1 MiB, the 21st fills it.
    memory = AMQP_SIZE + DEFAULT_AMQP_MESSAGE_OVERHEAD
    assert 20 * memory < AMQP_MAX <= 21 * memory == state.size
    assert state.accepted == 21
    assert producer.sent == 21 and producer.link.credit == 0
    assert producer.blocked_total_us() > SECOND


def test_amqp_flow_control_test_credits_are_allocated_once_on_link_created() -> None:
    # AmqpFlowControlTest.testCreditsAreAllocatedOnceOnLinkCreated: amqpCredits=1 and
    # amqpMinCredits=1: the new sender link is issued exactly one credit. (A low mark equal to the
    # credits is valid: its one message takes the credit to 0 <= 1, so one top-up of 1 follows.)
    server = Server(
        ArtemisConfig(
            addresses=(amqp_block_address(amqp_credits=1, amqp_low_credits=1),),
            producers=(
                ArtemisProducerConfig("sender", "q", protocol="amqp", size=AMQP_SIZE, count=1),
            ),
        )
    ).run(SECOND // 10)
    producer = server.producer("sender")
    assert producer.server_end.grants == [0, 1]
    assert detail(server.events("flow", "sender")[0])["link_credit"] == 1
    assert producer.sent == 1 and producer.link.credit == 1


def _fill(*extra: ArtemisProducerConfig, consumers: tuple[Any, ...] = ()) -> Server:
    # AmqpFlowControlTest.fillAddress: 50 messages of 50 KiB on the default credit until the
    # reject threshold rejects one.
    filler = ArtemisProducerConfig("filler", "q", protocol="amqp", size=AMQP_SIZE, count=50)
    return Server(
        ArtemisConfig(
            addresses=(amqp_block_address(),),
            producers=(filler, *extra),
            consumers=consumers,
        )
    )


def test_amqp_flow_control_test_address_is_blocked_for_other_producers_when_full() -> None:
    # AmqpFlowControlTest.testAddressIsBlockedForOtherProdudersWhenFull: a producer attached (with
    # credit) before another fills the address past the reject threshold: its next send is
    # refused with amqp:resource-limit-exceeded, and the address is at or above the threshold.
    other = ArtemisProducerConfig(
        "other", "q", protocol="amqp", size=AMQP_SIZE, count=2, max_rate=1
    )
    server = _fill(other).run(3 * SECOND)
    filler_rejects = server.events("message_rejected", "filler")
    assert filler_rejects  # fillAddress: "Should receive a rejected error"
    assert server.state().size >= AMQP_REJECT
    rejected = server.events("message_rejected", "other")
    assert len(rejected) == 1 and rejected[0]["ts"] >= SECOND  # the send after the fill
    assert detail(rejected[0])["error"] == "amqp:resource-limit-exceeded"
    assert server.producer("other").refused == 1


def test_amqp_flow_control_test_new_link_attach_gets_no_credit_when_address_is_blocked() -> None:
    # AmqpFlowControlTest.testNewLinkAttachAreNotAllocatedCreditsWhenAddressIsBlocked: a sender
    # link attached after the address filled up is issued no credit at all.
    late = ArtemisProducerConfig(
        "late", "q", protocol="amqp", size=AMQP_SIZE, count=1, start_us=SECOND // 2
    )
    server = _fill(late).run(2 * SECOND)
    producer = server.producer("late")
    assert producer.server_end.grants == []
    assert producer.link.credit == 0 and producer.sent == 0


def test_amqp_flow_control_test_credits_are_refreshed_when_address_is_unblocked() -> None:
    # AmqpFlowControlTest.testCreditsAreRefreshedWhenAddressIsUnblocked: a link attached to the
    # full address has 0 credit; once a consumer empties the address, credit flows to it.
    late = ArtemisProducerConfig(
        "late", "q", protocol="amqp", size=AMQP_SIZE, count=1, start_us=SECOND // 2
    )
    drain = ArtemisConsumerConfig("receiver", "q", window=-1, process_us=100, start_us=SECOND)
    server = _fill(late, consumers=(drain,)).run(3 * SECOND)
    flows = server.events("flow", "late")
    assert flows and min(e["ts"] for e in flows) >= SECOND  # nothing before the drain
    assert server.producer("late").sent == 1


def test_amqp_flow_control_fail_test_messages_not_sent() -> None:
    # AmqpFlowControlFailTest.testMesagesNotSent: FAIL, max-size-bytes 1000: once the address is
    # full the messages are refused and the sender's credit runs down to 0 (no refresh).
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(1000, "FAIL")),),
            producers=(ArtemisProducerConfig("a", "q", protocol="amqp", size=100, count=1000),),
        )
    ).run(2 * SECOND)
    producer = server.producer("a")
    assert server.state().failed > 0
    assert producer.server_end.grants == [0]  # the refresh due at 70 received is withheld
    assert producer.sent == 100 and producer.link.credit == 0


def test_amqp_flow_control_fail_test_address_full_disposition() -> None:
    # AmqpFlowControlFailTest.testAddressFullDisposition (the Rejected parameterizations): the
    # refusal an AMQP producer gets from a full FAIL address names amqp:resource-limit-exceeded.
    server = Server(
        ArtemisConfig(
            addresses=(AddressConfig("q", settings(1000, "FAIL")),),
            producers=(ArtemisProducerConfig("a", "q", protocol="amqp", size=10, count=1000),),
        )
    ).run(2 * SECOND)
    rejected = server.events("message_rejected", "a")
    assert rejected and server.producer("a").refused == len(rejected)
    assert {detail(e)["error"] for e in rejected} == {"amqp:resource-limit-exceeded"}


# -- rabbitmq-java-client MemoryAlarms (AMQP 0.9.1 connection blocking) -------------------------
def test_memory_alarms_overlapping_alarms_flow_control() -> None:
    # rabbitmq-java-client MemoryAlarms.overlappingAlarmsFlowControl: a memory alarm, then a disk
    # alarm; clearing the memory alarm alone leaves the publishing connection blocked; clearing
    # the disk alarm too lets publishes through again. One blocked / unblocked pair in all.
    scheduler = Scheduler(0)
    log = EventCollector()
    bus = EventBus("rabbit-cases", scheduler, validate=True)
    bus.subscribe(log)
    broker = Broker(bus, scheduler)
    queue = broker.declare_queue("Q")
    connection = Amqp091Connection(
        broker, ConnectionConfig("c", AMQP_0_9_1, publishers=(PublisherConfig("pub", "Q"),))
    )
    connection.start()

    def published_during(us: int) -> int:
        before = queue.stats.enqueued
        scheduler.run_until(scheduler.now_us + us)
        return queue.stats.enqueued - before

    assert published_during(10 * MS) > 0
    broker.raise_alarm("memory")
    scheduler.run_until(scheduler.now_us + MS)  # frames already on the wire land
    assert published_during(100 * MS) == 0
    broker.raise_alarm("disk")
    assert published_during(100 * MS) == 0
    broker.clear_alarm("memory")
    assert published_during(100 * MS) == 0  # still blocked by the disk alarm
    broker.clear_alarm("disk")
    assert published_during(100 * MS) > 0
    assert connection.blocked_count == 1
    assert len(log.of_type("connection_blocked")) == len(log.of_type("connection_unblocked")) == 1


def test_consumer_window_config_errors_match_artemis_ranges() -> None:
    # ConsumerWindowSizeTest uses windows -1, 0, 1 and N; anything below -1 is not a window.
    for window in (-1, 0, 1, 5 * KIB):
        ConsumerWindow(window)
    with pytest.raises(ArtemisConfigError):
        ConsumerWindow(-2)
