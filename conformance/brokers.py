"""Real brokers as plain processes on 127.0.0.1, all state in a temporary folder (DESIGN.md §6).

:class:`ArtemisBroker` creates an ActiveMQ Artemis 2.40 instance (``artemis create --silent``)
from the distribution ``scripts/setup_brokers.sh`` unpacks into ``.jvm/brokers/``, writes its
acceptor, web port, addresses and address settings, and runs it (``artemis run``).
:class:`RabbitBroker` runs Debian's RabbitMQ 3.10 (``/usr/lib/rabbitmq/bin/rabbitmq-server``),
or the RabbitMQ 4.0 that scripts/setup_rabbitmq4.sh unpacks from Debian 13's packages into
``.jvm/brokers/rabbitmq-4.0/`` (:func:`rabbitmq4`), with its own epmd, both on free ports. Each
waits until its broker is ready and stops it by the PIDs it started (never by name), whatever
happened in between; an ``atexit`` hook is the last resort. A broker that is not installed or
does not start raises :class:`BrokerUnavailable`, whose message names what is missing and how
to install it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from xml.sax.saxutils import escape

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ARTEMIS_VERSION = "2.40.0"
ARTEMIS_HOME = PROJECT_ROOT / ".jvm" / "brokers" / f"apache-artemis-{ARTEMIS_VERSION}"
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
SETUP_HINT = "run `bash scripts/setup_brokers.sh` (as root)"
LOOPBACK = "127.0.0.1"
ARTEMIS_USER = "admin"
#: Seed 003: "Artemis will issue 100 credits to a client at a time and refresh them when the
#: clients credits reaches 30" (the generated acceptors say 1000 / 300: set them per acceptor).
ARTEMIS_AMQP_CREDITS = 100
ARTEMIS_AMQP_LOW_CREDITS = 30
ARTEMIS_READY_LINE = "AMQ221007"  # Server is now active
ARTEMIS_START_TIMEOUT_S = 90.0
RABBITMQ_START_TIMEOUT_S = 120.0
#: How long apart two reads of an address's counts must agree to be taken as settled, and the
#: longest :meth:`ArtemisBroker.address_stats` and :meth:`ArtemisBroker.multicast_counts` wait
#: for that.
SETTLE_S = 0.2
SETTLE_TIMEOUT_S = 10.0


T = TypeVar("T")


def held_still(
    read: Callable[[], T],
    *,
    agreeing: int,
    every_s: float,
    for_s: float,
    key: Callable[[T], Any] = lambda value: value,
) -> tuple[T, bool]:
    """``read()`` repeated ``every_s`` apart until its last ``agreeing`` reads agree on
    ``key``, or ``for_s`` passed: the last read, and whether it held still. A broker's counts
    lag what it was told (a queue's executor, a process's mailbox), so one read right after can
    be short."""
    reads = [read()]
    deadline = time.monotonic() + for_s
    # Compared with ==, not hashed: a Jolokia read is lists and dicts.
    while len(reads) < agreeing or any(key(r) != key(reads[-1]) for r in reads[-agreeing:]):
        if time.monotonic() > deadline:
            return reads[-1], False
        time.sleep(every_s)
        reads.append(read())
    return reads[-1], True


class BrokerUnavailable(RuntimeError):
    """A real broker that is not installed or did not start; the message says which and why."""


class BrokerNotAsExpected(RuntimeError):
    """A running broker that did not reach the state a case reads (its counts still moving, or
    fewer messages than were sent): the case fails, naming what it read."""


# -- processes and ports ---------------------------------------------------------------------
_LIVE: dict[int, str] = {}  # PIDs this process started and has not reaped yet: what they are
#: The threads copying a stamped process's output into its log (:func:`spawn`), by PID.
_COPIERS: dict[int, threading.Thread] = {}


def _forget(pid: int) -> None:
    """``pid`` was reaped: no longer ours to stop, and its log holds all it wrote (a stamped
    process's last lines may still be in the copier's hands when it ends)."""
    _LIVE.pop(pid, None)
    copier = _COPIERS.pop(pid, None)
    if copier is not None:
        copier.join(timeout=5.0)


def stop_pid(pid: int, *, grace_s: float = 10.0) -> None:
    """SIGTERM to ``pid`` (the leader of its own process group), SIGKILL to that group if it is
    still there after ``grace_s``; then reap it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            if sig == signal.SIGKILL:
                os.killpg(pid, sig)  # the group: a child the leader left behind goes too
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (or reaped): poll for its end
                done = 0 if _alive(pid) else pid
            if done:
                _forget(pid)
                return
            time.sleep(0.05)
    _forget(pid)


def reaped(pid: int) -> bool:
    """Whether ``pid`` (a child this process spawned) has ended; reaps it if so."""
    try:
        done = os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        done = True
    if done:
        _forget(pid)
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@atexit.register
def _stop_leftovers() -> None:
    for pid in list(_LIVE):
        stop_pid(pid, grace_s=3.0)


def spawn(
    command: Sequence[str],
    *,
    env: dict[str, str],
    log: Path,
    what: str,
    stamp: tuple[str, list[float]] | None = None,
) -> int:
    """Start ``command`` in its own process group with stdout and stderr in ``log``; its PID,
    remembered until :func:`stop_pid` reaps it.

    ``stamp`` (a phrase and a list): the output goes to ``log`` line by line as it comes, and the
    monotonic time at which each line holding the phrase arrived is appended to the list (when a
    client did something, not only how often: e.g. each message a consumer received)."""
    with contextlib.ExitStack() as files:
        process = subprocess.Popen(
            list(command),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stamp else files.enter_context(log.open("ab")),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _LIVE[process.pid] = what
    if stamp:
        phrase, times = stamp
        copier = threading.Thread(
            target=_copy_stamped, args=(process, log, phrase.encode(), times), daemon=True
        )
        copier.start()
        _COPIERS[process.pid] = copier
    return process.pid


def _copy_stamped(
    process: subprocess.Popen[bytes], log: Path, phrase: bytes, times: list[float]
) -> None:
    """:func:`spawn`'s reader of a stamped process: each line into ``log`` as it comes (Java's
    ``System.out`` flushes at every line), the time of those holding ``phrase`` into ``times``."""
    assert process.stdout is not None
    with process.stdout, log.open("ab") as out:
        for line in process.stdout:
            if phrase in line:
                times.append(time.monotonic())
            out.write(line)
            out.flush()


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_range(count: int, *, low: int = 20_000, high: int = 32_000) -> int:
    """The first of ``count`` consecutive free ports below the kernel's ephemeral range."""
    start = low + (os.getpid() * 37) % (high - low - count)
    for offset in range(0, high - low, count):
        base = low + (start - low + offset) % (high - low - count)
        if all(_bindable(port) for port in range(base, base + count)):
            return base
    raise BrokerUnavailable(f"no {count} consecutive free ports on {LOOPBACK}")


def wait_for_port(port: int, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((LOOPBACK, port)) == 0:
                return True
        time.sleep(0.1)
    return False


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:])[:800]


# -- ActiveMQ Artemis ------------------------------------------------------------------------
@dataclass(frozen=True)
class ArtemisAddress:
    """An address and its ``<address-setting>``: anycast with a queue of the same name, or,
    with ``multicast_queues``, multicast with those queues (a message routed to each)."""

    name: str
    max_size_bytes: int = -1
    policy: str = "BLOCK"
    reject_threshold: int = -1
    multicast_queues: tuple[str, ...] = ()

    def setting_xml(self) -> str:
        lines = [
            f'<address-setting match="{escape(self.name)}">',
            f"<max-size-bytes>{self.max_size_bytes}</max-size-bytes>",
            f"<address-full-policy>{self.policy}</address-full-policy>",
        ]
        if self.reject_threshold != -1:
            lines.append(
                "<max-size-bytes-reject-threshold>"
                f"{self.reject_threshold}</max-size-bytes-reject-threshold>"
            )
        lines.append("</address-setting>")
        return "\n".join(lines)

    def address_xml(self) -> str:
        name = escape(self.name)
        if not self.multicast_queues:
            return f'<address name="{name}"><anycast><queue name="{name}"/></anycast></address>'
        queues = "".join(f'<queue name="{escape(queue)}"/>' for queue in self.multicast_queues)
        return f'<address name="{name}"><multicast>{queues}</multicast></address>'


def artemis_installed() -> Path:
    """The Artemis distribution's ``bin/artemis``; :class:`BrokerUnavailable` when missing."""
    launcher = ARTEMIS_HOME / "bin" / "artemis"
    if not os.access(launcher, os.X_OK):
        raise BrokerUnavailable(
            f"ActiveMQ Artemis {ARTEMIS_VERSION} is not installed ({launcher} missing): "
            f"{SETUP_HINT}"
        )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise BrokerUnavailable("ActiveMQ Artemis needs a Java runtime: no `java` on PATH")
    return launcher


class _ScratchBroker:
    """What both brokers share: a process started by :meth:`start` with its state in a scratch
    folder, stopped (and the folder removed) by :meth:`stop`, whatever happened, as a context
    manager."""

    _scratch: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop_process(self) -> None:
        raise NotImplementedError

    def _wait_ready(self, log: Path) -> None:
        raise NotImplementedError

    def _started(self, log: Path) -> Self:
        """The broker once ready; stopped (its folder removed) if it never gets there."""
        try:
            self._wait_ready(log)
        except BrokerUnavailable:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.stop_process()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ArtemisBroker(_ScratchBroker):
    """One Artemis instance in a temporary folder: a CORE + AMQP acceptor and a web console
    (Jolokia) on free loopback ports, the given addresses declared with their settings."""

    def __init__(
        self,
        addresses: Sequence[ArtemisAddress],
        *,
        java_memory: str = "512M",
        core_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.addresses = tuple(addresses)
        self.java_memory = java_memory
        # broker.xml's <core> elements to set (e.g. min-disk-free, disk-scan-period). Usage of
        # the host's disk is not watched unless asked for: Artemis's default (block every
        # producer above 90 % used) would make an address test on a full host fail as an
        # unseen block line rather than say why.
        self.core_settings = {"max-disk-usage": "-1", **(core_settings or {})}
        self.port = 0
        self.http_port = 0
        self.pid: int | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self.instance = Path()
        self._ready_lines = 1  # the "now active" lines its log holds once this start is ready

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> Self:
        launcher = artemis_installed()
        self._scratch = tempfile.TemporaryDirectory(prefix="flowctl-artemis-")
        self.instance = Path(self._scratch.name) / "instance"
        created = subprocess.run(
            [
                str(launcher),
                "create",
                str(self.instance),
                "--user",
                ARTEMIS_USER,
                "--password",
                ARTEMIS_USER,
                "--allow-anonymous",
                "--silent",
                "--host",
                LOOPBACK,
                "--http-host",
                LOOPBACK,
                "--java-memory",
                self.java_memory,
                "--nio",
                "--no-autotune",
                "--relax-jolokia",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if created.returncode != 0:
            self.stop()
            raise BrokerUnavailable(
                "`artemis create` failed: " + (created.stdout + created.stderr).strip()[-600:]
            )
        self.port, self.http_port = free_port(), free_port()
        try:
            self._configure()
        except (OSError, BrokerUnavailable):
            self.stop()
            raise
        return self._run_instance()

    def _run_instance(self) -> Self:
        """``artemis run`` of the instance; the broker once it says it is active once more."""
        log = self.instance / "log" / "console.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self._ready_lines = self.log_text().count(ARTEMIS_READY_LINE) + 1
        self.pid = spawn(
            [str(self.instance / "bin" / "artemis"), "run"],
            env=dict(os.environ),
            log=log,
            what="artemis",
        )
        return self._started(log)

    def restart_process(self, *, crash: bool = False) -> None:
        """Stop the broker (SIGTERM; with ``crash``, SIGKILL: its log has no stop line) and run
        the same instance again, its configuration and log kept; back once it is active."""
        if self.pid is not None:
            if crash:
                os.killpg(self.pid, signal.SIGKILL)
            self.stop_process()
        self._run_instance()

    def _configure(self) -> None:
        etc = self.instance / "etc"
        broker_xml = (etc / "broker.xml").read_text()
        acceptor = (
            f'<acceptor name="artemis">tcp://{LOOPBACK}:{self.port}?protocols=CORE,AMQP;'
            f"amqpCredits={ARTEMIS_AMQP_CREDITS};amqpLowCredits={ARTEMIS_AMQP_LOW_CREDITS};"
            "amqpMinLargeMessageSize=102400;amqpDuplicateDetection=true;useEpoll=true"
            "</acceptor>"
        )
        broker_xml, acceptors = re.subn(
            r"<acceptors>.*?</acceptors>",
            f"<acceptors>{acceptor}</acceptors>",
            broker_xml,
            flags=re.DOTALL,
        )
        # The journal need not reach the disk: the workloads send non-durable messages.
        broker_xml = broker_xml.replace(
            "<journal-datasync>true</journal-datasync>",
            "<journal-datasync>false</journal-datasync>",
        )
        settings = "\n".join(address.setting_xml() for address in self.addresses)
        broker_xml, with_settings = re.subn(
            r"<address-settings>", f"<address-settings>\n{settings}", broker_xml, count=1
        )
        declared = "\n".join(address.address_xml() for address in self.addresses)
        broker_xml, with_addresses = re.subn(
            r"</addresses>", f"{declared}\n</addresses>", broker_xml, count=1
        )
        for name, value in self.core_settings.items():
            element = f"<{name}>{value}</{name}>"
            broker_xml, replaced = re.subn(
                rf"<{re.escape(name)}>.*?</{re.escape(name)}>", element, broker_xml, flags=re.DOTALL
            )
            if not replaced:  # <core>'s elements come in any order (xsd:all)
                broker_xml = broker_xml.replace("</core>", f"{element}\n</core>", 1)
        if (acceptors, with_settings, with_addresses) != (1, 1, 1):
            raise BrokerUnavailable(
                f"{etc / 'broker.xml'} has not the layout this Artemis {ARTEMIS_VERSION} "
                "configuration expects (acceptors, address-settings, addresses)"
            )
        (etc / "broker.xml").write_text(broker_xml)
        bootstrap = (etc / "bootstrap.xml").read_text()
        bootstrap, web = re.subn(
            rf"http://{re.escape(LOOPBACK)}:\d+", f"http://{LOOPBACK}:{self.http_port}", bootstrap
        )
        if web != 1:
            raise BrokerUnavailable(f"{etc / 'bootstrap.xml'}: no web binding on {LOOPBACK}")
        (etc / "bootstrap.xml").write_text(bootstrap)

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + ARTEMIS_START_TIMEOUT_S
        while self.log_text().count(ARTEMIS_READY_LINE) < self._ready_lines:
            if self.pid is None or not _alive(self.pid) or time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"Artemis did not start within {ARTEMIS_START_TIMEOUT_S:.0f} s: {_tail(log)}"
                )
            time.sleep(0.1)
        while True:
            try:
                self.jolokia([{"type": "version"}])
                return
            except (OSError, BrokerUnavailable) as error:
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(f"Artemis's Jolokia did not answer: {error}") from None
                time.sleep(0.2)

    def stop_process(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid, grace_s=15.0)
            self.pid = None

    # -- addresses and observation ---------------------------------------------------------------
    @property
    def core_url(self) -> str:
        return f"tcp://{LOOPBACK}:{self.port}"

    @property
    def amqp_url(self) -> str:
        return f"amqp://{LOOPBACK}:{self.port}"

    def log_text(self) -> str:
        path = self.instance / "log" / "artemis.log"
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def jolokia(self, requests: list[dict[str, Any]], timeout_s: float = 10.0) -> list[Any]:
        """One bulk Jolokia POST; each request's ``value`` (an error raises)."""
        auth = base64.b64encode(f"{ARTEMIS_USER}:{ARTEMIS_USER}".encode()).decode()
        request = urllib.request.Request(
            f"http://{LOOPBACK}:{self.http_port}/console/jolokia/",
            data=json.dumps(requests).encode(),
            headers={
                "Authorization": f"Basic {auth}",
                "Origin": f"http://{LOOPBACK}",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answers = json.loads(response.read())
        values = []
        for answer in answers:
            if answer.get("status") != 200:
                raise BrokerUnavailable(f"Jolokia: {answer.get('error', answer)}")
            values.append(answer["value"])
        return values

    def address_mbean(self, address: str) -> str:
        return (
            f'org.apache.activemq.artemis:broker="{LOOPBACK}",component=addresses,'
            f'address="{address}"'
        )

    def queue_mbean(self, address: str, queue: str | None = None, routing: str = "anycast") -> str:
        return (
            f'{self.address_mbean(address)},subcomponent=queues,routing-type="{routing}",'
            f'queue="{queue or address}"'
        )

    def flush_queues(self, queue_mbeans: Sequence[str]) -> None:
        """Each queue's executor run through what it holds now (QueueControl's
        ``flushExecutor``, "useful if you need the exact number of counts on a message"): a
        queue adds a routed message on its executor, after the send is answered."""
        self.jolokia(
            [
                {"type": "exec", "mbean": mbean, "operation": "flushExecutor()"}
                for mbean in queue_mbeans
            ],
            # The broker waits up to 10 s per queue for its executor: longer than one read.
            timeout_s=10.0 * len(queue_mbeans) + 10.0,
        )

    def settled(self, reads: list[dict[str, Any]], queue_mbeans: Sequence[str]) -> list[Any]:
        """``reads`` (one bulk Jolokia read) once the queues' executors are flushed
        (:meth:`flush_queues`) and two reads :data:`SETTLE_S` apart agree (up to
        :data:`SETTLE_TIMEOUT_S`, then :class:`BrokerNotAsExpected`): a read right after a
        send could miss some of its messages (a CI run read a MessageCount of 17 for 21)."""
        self.flush_queues(queue_mbeans)
        values, still = held_still(
            lambda: self.jolokia(reads), agreeing=2, every_s=SETTLE_S, for_s=SETTLE_TIMEOUT_S
        )
        if not still:
            moving = f"counts still moving after {SETTLE_TIMEOUT_S:.0f} s: {values}"
            raise BrokerNotAsExpected(moving)
        return values

    def multicast_counts(self, address: ArtemisAddress) -> tuple[int, list[int]]:
        """A multicast address's size and each of its queues' MessageCount, once settled
        (:meth:`settled`: each queue adds its copy on its own executor)."""
        queues = [
            self.queue_mbean(address.name, queue, "multicast") for queue in address.multicast_queues
        ]
        reads = [
            {"type": "read", "mbean": self.address_mbean(address.name), "attribute": "AddressSize"},
            *({"type": "read", "mbean": queue, "attribute": "MessageCount"} for queue in queues),
        ]
        size, *counts = self.settled(reads, queues)
        return int(size), [int(count) for count in counts]

    def address_stats(self, address: str) -> dict[str, Any]:
        """The address's size and paging state and its queue's message counts, once settled
        (:meth:`settled`). Not for a count sampled as it moves (a rate): the settling takes
        0.2 s or more, and till the count holds still."""
        address_attrs = ["AddressSize", "NumberOfPages", "Paging", "MessageCount"]
        queue_attrs = ["MessageCount", "MessagesAdded", "PersistentSize", "DurableMessageCount"]
        queue = self.queue_mbean(address)
        reads = [
            {"type": "read", "mbean": self.address_mbean(address), "attribute": address_attrs},
            {"type": "read", "mbean": queue, "attribute": queue_attrs},
        ]
        address_values, queue_values = self.settled(reads, [queue])
        stats = {f"address.{key}": value for key, value in address_values.items()}
        stats.update({f"queue.{key}": value for key, value in queue_values.items()})
        return stats

    def queue_attribute(self, address: str, attribute: str) -> int:
        """An integer attribute of the address's queue of the same name (e.g. ConsumerCount)."""
        (value,) = self.jolokia(
            [{"type": "read", "mbean": self.queue_mbean(address), "attribute": attribute}]
        )
        return int(value)

    def address_size(self, address: str) -> int:
        (value,) = self.jolokia(
            [{"type": "read", "mbean": self.address_mbean(address), "attribute": "AddressSize"}]
        )
        return int(value)

    def run_cli(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``artemis ARGS`` from the distribution (a client command such as ``producer``)."""
        return subprocess.run(
            [str(artemis_installed()), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def start_cli(self, *args: str) -> subprocess.Popen[bytes]:
        """:meth:`run_cli`'s command started and left running, its output discarded (a
        producer the caller stops once it has seen what it waits for)."""
        return subprocess.Popen(
            [str(artemis_installed()), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


# -- RabbitMQ ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RabbitInstallation:
    """A RabbitMQ on this machine: the folder of its scripts (``rabbitmq-server``,
    ``rabbitmqctl``), its Erlang's epmd and what its scripts need in their environment."""

    name: str
    sbin: Path
    epmd: Path
    env: Mapping[str, str]


def _first(pattern: str, root: Path) -> Path | None:
    return next(iter(sorted(root.glob(pattern))), None)


def debian_rabbitmq() -> RabbitInstallation:
    """Debian 12's RabbitMQ 3.10 (``apt-get install rabbitmq-server``), on the system's Erlang."""
    epmd = shutil.which("epmd") or _first("erts-*/bin/epmd", Path("/usr/lib/erlang"))
    return RabbitInstallation("RabbitMQ 3.10", RABBITMQ_BIN, Path(epmd or "epmd"), {})


#: Where scripts/setup_rabbitmq4.sh puts Debian 13's RabbitMQ 4.0 and its own Erlang 27.
RABBITMQ4_HOME = PROJECT_ROOT / ".jvm" / "brokers" / "rabbitmq-4.0"


def rabbitmq4() -> RabbitInstallation:
    """RabbitMQ 4.0 with its Erlang 27 (both from Debian 13's packages, in their own folder:
    scripts/setup_rabbitmq4.sh); its scripts find that Erlang first on the PATH."""
    server = _first("usr/lib/rabbitmq/lib/rabbitmq_server-*", RABBITMQ4_HOME)
    erlang = RABBITMQ4_HOME / "usr" / "lib" / "erlang"
    epmd = _first("erts-*/bin/epmd", erlang)
    if server is None or epmd is None:
        return RabbitInstallation("RabbitMQ 4.0", RABBITMQ4_HOME / "missing", Path("epmd"), {})
    env = {
        "RABBITMQ_HOME": str(server),
        "RABBITMQ_PLUGINS_DIR": str(server / "plugins"),
        "PATH": f"{erlang / 'bin'}:{server / 'sbin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    return RabbitInstallation("RabbitMQ 4.0", server / "sbin", epmd, env)


def rabbitmq_installed(installation: RabbitInstallation | None = None) -> Path:
    found = installation or debian_rabbitmq()
    server = found.sbin / "rabbitmq-server"
    if not os.access(server, os.X_OK):
        raise BrokerUnavailable(f"{found.name} is not installed ({server} missing): {SETUP_HINT}")
    if not os.access(found.epmd, os.X_OK) and shutil.which(str(found.epmd)) is None:
        raise BrokerUnavailable(f"{found.name}'s Erlang has no epmd: {SETUP_HINT}")
    return server


class RabbitBroker(_ScratchBroker):
    """One RabbitMQ node (``rabbit@localhost``) as a plain process with its own epmd, its AMQP
    listener, distribution and CLI ports free loopback ports, its state in a temporary folder.

    ``config`` is extra ``rabbitmq.conf`` text (e.g. ``raft.wal_max_batch_size = 16``);
    ``advanced`` is an ``advanced.config`` (Erlang terms), for settings whose ``rabbitmq.conf``
    form refuses the value wanted. ``amqp_1_0`` enables 3.10's AMQP 1.0 plugin
    (``rabbitmq_amqp1_0``, on the same listener as AMQP 0.9.1; 4.0 speaks AMQP 1.0 without it).
    ``installation``: Debian's 3.10 when not given, or :func:`rabbitmq4`.
    """

    def __init__(
        self,
        config: str = "",
        advanced: str = "[].",
        *,
        management: bool = False,
        amqp_1_0: bool = False,
        installation: RabbitInstallation | None = None,
    ) -> None:
        self.installation = installation or debian_rabbitmq()
        self.config = config
        self.advanced = advanced
        self.management = management  # the management plugin, its HTTP API on a loopback port
        self.amqp_1_0 = amqp_1_0
        self.port = 0
        self.management_port = 0
        self.pid: int | None = None
        self.epmd_pid: int | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self.home = Path()
        self.env: dict[str, str] = {}

    def start(self) -> Self:
        rabbitmq_installed(self.installation)  # refuses before anything is created
        self._scratch = tempfile.TemporaryDirectory(prefix="flowctl-rabbitmq-")
        self.home = Path(self._scratch.name)
        base = free_port_range(15)
        self.port, epmd_port, dist_port = base, base + 1, base + 2
        self.management_port = base + 14
        management = (
            f"management.tcp.ip = {LOOPBACK}\nmanagement.tcp.port = {self.management_port}\n"
            if self.management
            else ""
        )
        (self.home / "log").mkdir()
        (self.home / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {LOOPBACK}:{self.port}\n"
            "loopback_users = none\n"
            "disk_free_limit.absolute = 1MB\n"
            "vm_memory_high_watermark.relative = 0.4\n"
            f"{management}{self.config}\n"
        )
        (self.home / "advanced.config").write_text(f"{self.advanced}\n")
        plugins = ",".join(
            name
            for name, wanted in (
                ("rabbitmq_management", self.management),
                ("rabbitmq_amqp1_0", self.amqp_1_0),
            )
            if wanted
        )
        (self.home / "enabled_plugins").write_text(f"[{plugins}].\n")
        loopback_dist = "-kernel inet_dist_use_interface {127,0,0,1}"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": "rabbit@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CTL_DIST_PORT_MIN": str(base + 3),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(base + 13),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_CONFIG_FILE": str(self.home / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.home / "advanced.config"),
            "RABBITMQ_MNESIA_BASE": str(self.home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.home / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.home / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.home / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(self.home / "rabbit.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": loopback_dist,
            "RABBITMQ_CTL_ERL_ARGS": loopback_dist,
            **self.installation.env,
        }
        # Our own epmd, in the foreground: its PID is ours to stop (the node would otherwise
        # start a daemonised one that outlives it).
        self.epmd_pid = spawn(
            [str(self.installation.epmd), "-port", str(epmd_port), "-address", LOOPBACK],
            env=self.env,
            log=self.home / "log" / "epmd.log",
            what="epmd",
        )
        if not wait_for_port(epmd_port, timeout_s=10):
            self.stop()
            raise BrokerUnavailable(f"epmd did not listen on {LOOPBACK}:{epmd_port}")
        return self._run_node()

    def _run_node(self) -> Self:
        log = self.home / "log" / "console.log"
        Path(self.env["RABBITMQ_PID_FILE"]).unlink(missing_ok=True)
        server = rabbitmq_installed(self.installation)
        self.pid = spawn([str(server)], env=self.env, log=log, what="rabbitmq-server")
        return self._started(log)

    def restart_process(self, *, crash: bool = False) -> None:
        """Stop the node (``rabbitmqctl stop``; with ``crash``, SIGKILL: its log has no stop
        line) and start it again with its state, its epmd kept; back once it has booted."""
        if self.pid is not None:
            if crash:
                os.killpg(self.pid, signal.SIGKILL)
            elif _alive(self.pid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.ctl("stop", timeout_s=30)
            stop_pid(self.pid, grace_s=10.0)
            self.pid = None
        self._run_node()

    @property
    def log_path(self) -> Path:
        """The node's log (``RABBITMQ_LOG_BASE/NODENAME.log``)."""
        return self.home / "log" / f"{self.env['RABBITMQ_NODENAME']}.log"

    @property
    def management_url(self) -> str:
        return f"http://{LOOPBACK}:{self.management_port}"

    def _wait_ready(self, log: Path) -> None:
        """The PID file appears once the Erlang VM runs; ``rabbitmqctl wait`` then waits for the
        node to boot. A server that dies on the way fails at once, with its log's last lines."""
        pid_file = Path(self.env["RABBITMQ_PID_FILE"])
        deadline = time.monotonic() + RABBITMQ_START_TIMEOUT_S
        while not pid_file.exists():
            if self.pid is None or not _alive(self.pid) or time.monotonic() > deadline:
                raise BrokerUnavailable(f"RabbitMQ did not start: {_tail(log)}")
            time.sleep(0.1)
        left = max(5, int(deadline - time.monotonic()))
        waited = self.ctl("wait", "--timeout", str(left), str(pid_file))
        if waited.returncode != 0 or not wait_for_port(self.port, timeout_s=10):
            detail = (waited.stdout + waited.stderr).strip()[-300:]
            raise BrokerUnavailable(f"RabbitMQ did not start: {detail} {_tail(log)}")

    def ctl(self, *args: str, timeout_s: float = RABBITMQ_START_TIMEOUT_S + 10) -> Any:
        """``rabbitmqctl ARGS`` against this node (about 0.8 s a call)."""
        return subprocess.run(
            [str(self.installation.sbin / "rabbitmqctl"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def ctl_ok(self, *args: str) -> str:
        result = self.ctl(*args)
        if result.returncode != 0:
            raise BrokerUnavailable(
                f"rabbitmqctl {' '.join(args)}: {(result.stdout + result.stderr).strip()[-400:]}"
            )
        return str(result.stdout)

    def stop_process(self) -> None:
        if self.pid is not None:
            if _alive(self.pid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.ctl("stop", timeout_s=30)
            stop_pid(self.pid, grace_s=10.0)
            self.pid = None
        if self.epmd_pid is not None:
            stop_pid(self.epmd_pid, grace_s=3.0)
            self.epmd_pid = None
