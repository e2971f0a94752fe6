"""A transfer routed to one queue is that queue's message; fanned out, each queue gets its own."""

from __future__ import annotations

import gc

import pytest

from flowctl_core.queue import Message, Transfer
from tests.engine.helpers import Rig


def test_a_single_destination_transfer_is_its_own_message() -> None:
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 10})
    producer = rig.producer("p", capacity=5, routing_key="q")
    producer.send(100)
    (message,) = queue.messages
    assert isinstance(message, Transfer) and message.transfer is message
    assert message.held is False and message.size == 100
    with pytest.raises(AttributeError):
        message.transfer = None  # type: ignore[misc]


def test_a_fanned_out_transfer_gets_one_message_per_queue() -> None:
    rig = Rig()
    queues = [rig.queue(name, {"qpid.max_count": 10}) for name in ("a", "b")]
    rig.broker.declare_exchange("fan", "fanout")
    for queue in queues:
        rig.broker.bind("fan", queue.name)
    rig.producer("p", capacity=5, routing_key="", exchange="fan").send(100)
    (first,), (second,) = (queue.messages for queue in queues)
    assert type(first) is type(second) is Message and first is not second
    assert first.transfer is second.transfer and isinstance(first.transfer, Transfer)


def test_a_transfer_does_not_refer_to_itself() -> None:
    # transfer.transfer is a property, not a self-reference in the slot: reference counting
    # frees a completed transfer at once, without waiting for the cyclic GC.
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 10})
    rig.producer("p", capacity=5, routing_key="q").send(100)
    transfer = queue.messages[0]
    assert transfer.transfer is transfer
    assert not any(referent is transfer for referent in gc.get_referents(transfer))
