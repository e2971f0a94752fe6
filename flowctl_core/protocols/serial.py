"""RFC-1982 serial-number arithmetic on 32 bits: AMQP 1.0's ``sequence-no`` and ``transfer-number``.

Seed 004: "These are 32-bit RFC-1982 serial numbers that range from [0 .. 4,294,967,295] and wrap
around: Adding 1 to 4,294,967,295 results in 0." Two serial numbers can only be *compared* when
they are less than 2**31 apart; exactly 2**31 apart the order is undefined (RFC 1982 §3.2).
"""

from __future__ import annotations

SERIAL_BITS = 32
SERIAL_MODULUS = 1 << SERIAL_BITS
SERIAL_MAX = SERIAL_MODULUS - 1  # 4,294,967,295
_HALF = 1 << (SERIAL_BITS - 1)


class SerialError(ValueError):
    """A value out of range, or a comparison RFC 1982 leaves undefined."""


def _check(number: int) -> None:
    if not 0 <= number <= SERIAL_MAX:
        raise SerialError(f"{number} is not a 32-bit serial number (0..{SERIAL_MAX})")


def serial_add(number: int, count: int) -> int:
    """``number`` advanced by ``count``, wrapping at 2**32.

    ``count`` may be any uint (a drain advances delivery-count by the whole remaining credit, which
    can be up to 2**32 - 1); only comparisons are limited to distances below 2**31.
    """
    _check(number)
    if not 0 <= count <= SERIAL_MAX:
        raise SerialError(f"cannot advance a serial number by {count}")
    return (number + count) & SERIAL_MAX


def serial_distance(a: int, b: int) -> int:
    """How far ``a`` is past ``b`` counting forward, modulo 2**32: a count in [0, 2**32).

    The inverse of :func:`serial_add` (``serial_add(b, serial_distance(a, b)) == a``). Unlike
    :func:`serial_diff` it does not order the two: it is for distances known to run forward,
    such as the transfers and drained credit a sender sent since a delivery-count the receiver
    reported, which can be anything up to a link-credit (a uint, up to 2**32 - 1).
    """
    _check(a)
    _check(b)
    return (a - b) & SERIAL_MAX


def serial_diff(a: int, b: int) -> int:
    """The signed distance ``a - b`` in (-2**31, 2**31): how far ``a`` is ahead of ``b``."""
    _check(a)
    _check(b)
    distance = (a - b) & SERIAL_MAX
    if distance == _HALF:
        raise SerialError(f"{a} and {b} are 2**31 apart: their order is undefined")
    return distance - SERIAL_MODULUS if distance > _HALF else distance


def serial_lt(a: int, b: int) -> bool:
    return serial_diff(a, b) < 0


def serial_gt(a: int, b: int) -> bool:
    return serial_diff(a, b) > 0
