"""A real broker to try a collector on, on this machine: one scratch Artemis with a small BLOCK
address, and the commands that collect it, fill it and drain it.

    .venv/bin/python -m conformance.sandbox    # Ctrl-C stops the broker, removes its folder

Artemis comes from ``scripts/setup_brokers.sh`` (``.jvm/brokers/``); the instance, its log and
its ports are those of :class:`~conformance.brokers.ArtemisBroker` (loopback only, free ports, a
temporary folder). The address ``orders`` holds 100 KiB (``max-size-bytes`` 102400, BLOCK), so a
producer of 200 messages of 1 KiB blocks in it: the collector writes its ``flow_stopped``, and a
consumer that drains it the ``flow_resumed``; ``flowctl probe publish`` fills it over AMQP and
says how long the broker left it without credit.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

from conformance.brokers import (
    ARTEMIS_USER,
    LOOPBACK,
    ArtemisAddress,
    ArtemisBroker,
    BrokerUnavailable,
    artemis_installed,
)

#: The sandbox's address: small enough that 200 messages of 1 KiB block a producer in it.
ADDRESS = ArtemisAddress("orders", max_size_bytes=102_400, policy="BLOCK")


def commands(broker: ArtemisBroker, raw: Path) -> dict[str, str]:
    """What to run beside the broker, each in a shell of its own: the collector, a producer that
    blocks at the address's limit, a consumer that drains it, then the pipeline over the log."""
    artemis = shlex.quote(str(artemis_installed()))
    client = (
        f"--url {broker.core_url} --destination queue://{ADDRESS.name} "
        f"--user {ARTEMIS_USER} --password {ARTEMIS_USER}"
    )
    log = broker.instance / "log" / "artemis.log"
    jolokia = f"http://{LOOPBACK}:{broker.http_port}/console/jolokia"
    return {
        "collect": (
            f".venv/bin/flowctl collect artemis --log {shlex.quote(str(log))} "
            f"--raw {shlex.quote(str(raw))} --broker sandbox --jolokia {jolokia} "
            f"--user {ARTEMIS_USER} --password {ARTEMIS_USER}"
        ),
        "fill (blocks at 100 KiB; Ctrl-C it)": (
            f"{artemis} producer {client} --message-count 200 --message-size 1024"
        ),
        "drain (stops 2 s after the last message)": (
            f"{artemis} consumer {client} --receive-timeout 2000 --break-on-null"
        ),
        "or, after the drain: an AMQP publisher of flowctl's own, recording its link": (
            f".venv/bin/flowctl probe publish {broker.amqp_url} {ADDRESS.name} "
            f"--raw {shlex.quote(str(raw))} --broker sandbox --product artemis --count 300"
        ),
        "then": (
            f".venv/bin/flowctl pipeline --from TODAY --raw {shlex.quote(str(raw))} "
            f"--warehouse {shlex.quote(str(raw.parent / 'warehouse'))}"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--raw",
        type=Path,
        default=Path("var/sandbox/raw"),
        help="the raw folder the printed collect command writes (default var/sandbox/raw)",
    )
    args = parser.parse_args(argv)
    try:
        broker = ArtemisBroker([ADDRESS]).start()
    except BrokerUnavailable as unavailable:
        print(f"error: {unavailable}", file=sys.stderr)
        return 2
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    try:
        print(f"Artemis is running (CORE and AMQP on {broker.core_url}); in other shells:")
        for what, command in commands(broker, args.raw.resolve()).items():
            print(f"\n# {what}\n{command}")
        print("\nCtrl-C stops the broker and removes its folder.", flush=True)
        while not stopping:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
