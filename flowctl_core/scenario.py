"""Scenario files: YAML, validated by pydantic, with errors that name the file and the field.

Two forms share one model. A *scripted* scenario runs ordered ``steps`` (declare, send, consume,
set thresholds, advance the clock); a *workload* scenario runs rate-driven producers (with optional
bursts) and consumers for ``duration_s`` seconds from a random ``seed``.

It stays one module although over 500 lines: the format is one pydantic model tree, whose
cross-field checks (:class:`Scenario` and its ``_check_*`` methods) need every part's model and
whose error messages walk that same tree to name the wrong field (``_model_at``); split, the
halves would import each other, and the whole format would no longer read in one place.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from flowctl_core.broker import (
    MAX_COUNT_KEY,
    MAX_SIZE_KEY,
    POLICY_TYPE_KEY,
    QPID_DEFAULT_QUEUE_LIMIT_BYTES,
    Broker,
    BrokerConfig,
)
from flowctl_core.clock import Scheduler
from flowctl_core.errors import ScenarioError as ScenarioError
from flowctl_core.errors import closest_name, did_you_mean, yaml_problem
from flowctl_core.events import PREFILL_LINK, EventBus
from flowctl_core.exchange import Exchange, ExchangeType
from flowctl_core.flowlimit import (
    DEFAULT_FLOW_RESUME_RATIO,
    DEFAULT_FLOW_STOP_RATIO,
    FLOW_KEYS,
    FLOW_STOP_KEYS,
    THRESHOLD_FIELDS,
    FlowConfigError,
    ThresholdChange,
    integer_argument,
)
from flowctl_core.protocols.amqp10 import MIN_MAX_FRAME_SIZE
from flowctl_core.protocols.artemis_flow import (
    AMQP_CREDITS,
    AMQP_LOW_CREDITS,
    DEFAULT_AMQP_MESSAGE_OVERHEAD,
    DEFAULT_CONSUMER_WINDOW,
    DEFAULT_CORE_DELIVERY_OVERHEAD,
    DEFAULT_CORE_ENCODE_OVERHEAD,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    DEFAULT_MAX_SIZE_BYTES,
    DEFAULT_PRODUCER_WINDOW,
    DEFAULT_QUEUE_REFERENCE_OVERHEAD,
    AddressFullPolicy,
    AddressSettings,
)
from flowctl_core.protocols.config import ConnectionConfig, ConsumerConfig, RabbitPolicy
from flowctl_core.queue import LimitPolicy
from flowctl_core.yaml_files import UniqueKeyLoader, utf8_problem
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0
from schemas.model import US_PER_SECOND
from schemas.recommendations import JAVA_INT_MAX, KNOB_HIGHEST, KNOB_LINK_CREDIT, KNOB_PREFETCH

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "conf" / "scenarios"

# The ``qpid.*`` declare arguments the engine reads (Broker.declare_queue, FlowThresholds).
# Other ``qpid.*`` keys are rejected as typos; keys outside ``qpid.`` pass through unread, as a
# broker passes through arguments it does not know (``x-queue-type`` and the like).
QPID_ARGUMENT_PREFIX = "qpid."
QPID_ARGUMENTS: tuple[str, ...] = (MAX_COUNT_KEY, MAX_SIZE_KEY, POLICY_TYPE_KEY, *FLOW_KEYS)
# The numeric ones: an integer or a string of digits, never a bool or a float (integer_argument).
QPID_INTEGER_ARGUMENTS: tuple[str, ...] = (MAX_COUNT_KEY, MAX_SIZE_KEY, *FLOW_KEYS)


def _refuse_bool(value: Any) -> Any:
    """A YAML ``true`` is no number (pydantic's lax float would read it as 1.0)."""
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "Input should be a valid number, not a boolean")
    return value


#: A float of a scenario: a number, or a string of one (PyYAML reads ``1e3`` as a string), never
#: a boolean; finite (the models refuse inf and NaN).
NumberFloat = Annotated[float, BeforeValidator(_refuse_bool)]

#: Every integer of a scenario is an event column's int64 (or a broker's narrower field): a
#: YAML ``true`` or a float is no integer, and a value past int64 would fail at the sink.
INT64_MAX = 2**63 - 1
NonNegInt = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
# A threshold: an integer in the YAML, never a bool or a float pydantic would coerce.
Threshold = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
PosInt = Annotated[StrictInt, Field(ge=1, le=INT64_MAX)]
#: AMQP 1.0's link-credit, delivery-count and session windows are uints: a larger value passed
#: validation and stopped the run midway on the engine's protocol check (an audit).
UINT_MAX = 4_294_967_295
UInt = Annotated[StrictInt, Field(ge=0, le=UINT_MAX)]
PosUInt = Annotated[StrictInt, Field(ge=1, le=UINT_MAX)]
PosFloat = Annotated[NumberFloat, Field(gt=0)]
NonNegFloat = Annotated[NumberFloat, Field(ge=0)]
Ratio = Annotated[NumberFloat, Field(ge=0, le=100)]  # a percentage

#: The longest workload a scenario may run, in virtual seconds (a leap year): beyond it a typo
#: (``1e12``) would start writing an event log no disk holds before saying a word.
MAX_DURATION_S = 366 * 86_400

#: The engine's configs are the one home of their defaults; the scenario format takes them.
_RABBIT = RabbitPolicy()


def _engine_default(config: type, name: str) -> Any:
    """The default of field ``name`` of the engine's dataclass ``config``."""
    (default,) = [f.default for f in dataclasses.fields(config) if f.name == name]
    return default


class FieldError(ValueError):
    """A model validator's error about one of its fields (``start``, ``steps.0.send.producer``,
    relative to the model that raises it): the message is reported at that field, not at the
    model (``(top level)``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _unknown_qpid_arguments(arguments: Mapping[str, object]) -> list[str]:
    """A ``qpid.*`` key the engine does not read, each: silently ignored, it is a lost
    setting."""
    return [
        f"unknown argument {key!r}{did_you_mean(key, QPID_ARGUMENTS)} (known qpid.* "
        f"arguments: {', '.join(QPID_ARGUMENTS)})"
        for key in arguments
        if str(key).startswith(QPID_ARGUMENT_PREFIX) and key not in QPID_ARGUMENTS
    ]


def _check_qpid_arguments(arguments: dict[str, int | str]) -> dict[str, int | str]:
    """Reject a ``qpid.*`` key the engine does not read (:func:`_unknown_qpid_arguments`)."""
    unknown = _unknown_qpid_arguments(arguments)
    if unknown:
        raise ValueError("; ".join(unknown))
    return arguments


def _check_qpid_integers(queue: object, arguments: object) -> object:
    """Refuse a numeric ``qpid.*`` value the engine would refuse, before pydantic coerces it,
    and with it any unknown ``qpid.*`` key of the same mapping (one error naming both: the
    unknown key was reported only once the values were fixed, a README walk-through).

    ``dict[str, int | str]`` alone would turn ``true`` into 1 and ``100.0`` into 100, so the
    engine's own check (:func:`integer_argument`) runs on the raw values here; the error then
    carries the field path (``queues.N.arguments``) and the engine's message.
    """
    if isinstance(arguments, dict):
        problems = []
        for key in QPID_INTEGER_ARGUMENTS:
            if key in arguments:
                try:
                    integer_argument(str(queue), key, arguments[key])
                except FlowConfigError as error:
                    # The engine's own words, as _check_thresholds reports them.
                    problems.append(str(error))
        if problems:
            problems += _unknown_qpid_arguments(arguments)
            raise PydanticCustomError("qpid_integer", "; ".join(problems))
    return arguments


class _Strict(BaseModel):
    # No float is infinite or NaN: a virtual clock cannot advance by either.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BrokerSpec(_Strict):
    name: str = "broker-1"
    default_flow_stop_ratio: Ratio = DEFAULT_FLOW_STOP_RATIO
    default_flow_resume_ratio: Ratio = DEFAULT_FLOW_RESUME_RATIO
    # None: Qpid's 100 MiB for a Qpid queue, none for a RabbitMQ queue (one a connection's link
    # names: Scenario.queue_arguments), which has no Qpid flow thresholds to derive from it.
    default_queue_limit_bytes: NonNegInt | None = None
    default_limit_policy: LimitPolicy = "reject"
    log_immediate_completions: bool = False

    def config(self) -> BrokerConfig:
        """The engine's broker config."""
        limit = self.default_queue_limit_bytes
        if limit is None:
            limit = QPID_DEFAULT_QUEUE_LIMIT_BYTES
        return BrokerConfig(
            name=self.name,
            default_flow_stop_ratio=self.default_flow_stop_ratio,
            default_flow_resume_ratio=self.default_flow_resume_ratio,
            default_queue_limit_bytes=limit,
            default_limit_policy=self.default_limit_policy,
            log_immediate_completions=self.log_immediate_completions,
        )


class PrefillSpec(_Strict):
    """Messages already in the queue when the run starts (seed 004 writes one million first)."""

    count: PosInt
    size: NonNegInt = 1024


class QueueSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    arguments: dict[str, int | str] = {}
    service_time_us: NonNegInt = Field(
        default=0, description="per-message processing before the queue confirms (0: at once)"
    )
    prefill: PrefillSpec | None = None

    _arguments = field_validator("arguments")(_check_qpid_arguments)

    @field_validator("arguments", mode="before")
    @classmethod
    def _integers(cls, arguments: object, info: ValidationInfo) -> object:
        return _check_qpid_integers(info.data.get("name", "?"), arguments)


class RabbitPolicySpec(_Strict):
    """RabbitMQ's internal flow-control limits (seed 004; defaults are RabbitMQ's, from
    :class:`RabbitPolicy`)."""

    max_link_credit: PosUInt = _RABBIT.max_link_credit
    max_incoming_window: PosUInt = _RABBIT.max_incoming_window
    max_queue_credit: PosUInt = _RABBIT.max_queue_credit
    credit_flow_initial: PosInt = _RABBIT.credit_flow_initial
    credit_flow_more: PosInt = _RABBIT.credit_flow_more
    quorum_commands_soft_limit: PosInt = Field(
        default=_RABBIT.quorum_commands_soft_limit,
        description="0.9.1: a quorum queue (arguments x-queue-type: quorum) holds back the "
        "credit it owes a connection while more than this many of its messages wait",
    )
    initial_delivery_count: UInt = Field(
        default=_RABBIT.initial_delivery_count,
        description="1.0: the delivery-count the broker's consumer links start at (RabbitMQ 4.0 "
        "and 4.1: 4294967291, to cross the wrap early)",
    )
    initial_outgoing_id: UInt = Field(
        default=_RABBIT.initial_outgoing_id,
        description="1.0: the transfer-id the broker's sessions start at (RabbitMQ 4.0 and 4.1: "
        "4294967292)",
    )


class LinkPublisherSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    queue: str
    size: NonNegInt = 1024
    batch: PosInt | None = Field(
        default=None, description="publish N, wait for their confirms, repeat; omit: flat out"
    )
    initial_delivery_count: UInt = 0
    reports_available: bool = Field(
        default=True, description="1.0: advertise what it has ready in `available` (false: 0)"
    )


class CreditChangeSpec(_Strict):
    """An AMQP 1.0 consumer's link credit set ``after_s`` seconds after its attach (seed 004:
    "Granting link credit is not cumulative"; 0: "causing the queue to stop sending")."""

    after_s: NonNegFloat
    credit: UInt


class LinkConsumerSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    queue: str
    credit: PosInt = Field(
        default=_engine_default(ConsumerConfig, "credit"),
        description="1.0: link credit granted; 0.9.1: prefetch",
    )
    top_up_below: NonNegInt = Field(
        default=_engine_default(ConsumerConfig, "top_up_below"),
        description="1.0: grant again below this; when not given, the engine's default, or half "
        "the credit when the credit is below that default",
    )
    drain: bool = Field(default=False, description="1.0: every grant asks the sender to drain")
    drain_poll_us: PosInt = Field(
        default=_engine_default(ConsumerConfig, "drain_poll_us"),
        description="1.0, with drain: wait this long to grant again when drained",
    )
    echo: bool = Field(default=False, description="1.0: every grant asks for a flow reply")
    credit_changes: list[CreditChangeSpec] = Field(
        default=[],
        description="1.0: link credit set at these times after the attach (0 stops the queue "
        "sending), topped up to from then on",
    )
    process_us: NonNegInt = Field(
        default=_engine_default(ConsumerConfig, "process_us"),
        description="the application's time per message: it takes the delivered messages one at "
        "a time and acknowledges each once processed (0: as they arrive)",
    )

    @model_validator(mode="after")
    def _top_up_within_the_credit(self) -> LinkConsumerSpec:
        """A consumer granting less credit than the default top-up point (a 0.9.1 prefetch of
        50, say) tops up at half of it unless told otherwise: the default is a 1.0 setting, and
        refusing such a consumer for a value it never gave named no field of its own (an
        audit). Scenarios valid before keep their value. Set as a default, not as given: a
        0.9.1 connection refuses a ``top_up_below`` given (:meth:`ConnectionSpec._amqp10_only`)."""
        default = _engine_default(ConsumerConfig, "top_up_below")
        if "top_up_below" not in self.model_fields_set and 1 <= self.credit < default:
            # Frozen: written into the instance's fields without marking the field set.
            self.__dict__["top_up_below"] = max(1, self.credit // 2)
        return self

    @model_validator(mode="after")
    def _changes_in_order(self) -> LinkConsumerSpec:
        times = [change.after_s for change in self.credit_changes]
        if times != sorted(times):
            raise FieldError("credit_changes", "must be in time order (after_s)")
        return self


#: The most credit a consumer can grant, per protocol: AMQP 1.0's link-credit is a uint, 0.9.1's
#: basic.qos prefetch-count a short.
_MOST_CREDIT = {
    AMQP_1_0: KNOB_HIGHEST[KNOB_LINK_CREDIT],
    AMQP_0_9_1: KNOB_HIGHEST[KNOB_PREFETCH],
}


class ConnectionSpec(_Strict):
    """One client connection with one session (1.0) or channel (0.9.1) and its links."""

    name: Annotated[str, Field(min_length=1)]
    protocol: Literal["amqp-1.0", "amqp-0-9-1"]
    latency_us: NonNegInt = _engine_default(ConnectionConfig, "latency_us")
    frame_cost_us: PosInt = _engine_default(ConnectionConfig, "frame_cost_us")
    socket_buffer_frames: PosInt = _engine_default(ConnectionConfig, "socket_buffer_frames")
    max_frame_size: Annotated[StrictInt, Field(ge=MIN_MAX_FRAME_SIZE)] = _engine_default(
        ConnectionConfig, "max_frame_size"
    )
    client_incoming_window: PosUInt = _engine_default(ConnectionConfig, "client_incoming_window")
    start_s: NonNegFloat = Field(
        default=0,
        description="seconds after the run starts that the client connects: opened during an "
        "alarm, a 0.9.1 publishing connection starts blocked and a 1.0 session begins with its "
        "incoming window closed",
    )
    publishers: list[LinkPublisherSpec] = []
    consumers: list[LinkConsumerSpec] = []

    @model_validator(mode="after")
    def _amqp10_only(self) -> ConnectionSpec:
        """drain, echo and available are AMQP 1.0 link flow fields: 0.9.1 has no such knob."""
        if self.protocol == AMQP_0_9_1:
            for kind, links, field_name, default in (
                ("consumers", self.consumers, "drain", False),
                ("consumers", self.consumers, "echo", False),
                ("consumers", self.consumers, "credit_changes", []),
                ("publishers", self.publishers, "reports_available", True),
            ):
                for index, link in enumerate(links):
                    if getattr(link, field_name) != default:
                        raise FieldError(
                            f"{kind}.{index}.{field_name}",
                            "an AMQP 1.0 link setting; AMQP 0.9.1 has no such knob",
                        )
            # Given but read by no 0.9.1 model: refused rather than ignored (an audit).
            for field_name in ("max_frame_size", "client_incoming_window"):
                if field_name in self.model_fields_set:
                    raise FieldError(
                        field_name, "an AMQP 1.0 connection setting; AMQP 0.9.1 has no such knob"
                    )
            for index, consumer in enumerate(self.consumers):
                if "top_up_below" in consumer.model_fields_set:
                    raise FieldError(
                        f"consumers.{index}.top_up_below",
                        "an AMQP 1.0 link setting (a 0.9.1 consumer is sent up to its prefetch, "
                        "credit, as it acknowledges); AMQP 0.9.1 has no such knob",
                    )
            for index, publisher in enumerate(self.publishers):
                if "initial_delivery_count" in publisher.model_fields_set:
                    raise FieldError(
                        f"publishers.{index}.initial_delivery_count",
                        "an AMQP 1.0 link setting; AMQP 0.9.1 has no such knob",
                    )
        return self


# Artemis (seed 003): -1 switches a window or a rate off.
Window = Annotated[StrictInt, Field(ge=-1, le=JAVA_INT_MAX)]
MaxRate = Annotated[
    StrictInt, Field(ge=-1, le=JAVA_INT_MAX, description="messages per second; -1: no limit")
]


def _check_rate(owner: str, max_rate: int) -> None:
    if max_rate == 0:
        raise FieldError("max_rate", f"{owner}: max_rate must be -1 (off) or a positive integer")


class ArtemisAddressSpec(_Strict):
    """An Artemis address-setting and the queues bound to the address (default: its name)."""

    name: Annotated[str, Field(min_length=1)]
    max_size_bytes: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = DEFAULT_MAX_SIZE_BYTES
    address_full_policy: AddressFullPolicy = "BLOCK"
    max_size_bytes_reject_threshold: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = -1
    amqp_credits: PosInt = AMQP_CREDITS
    amqp_low_credits: NonNegInt = AMQP_LOW_CREDITS
    queues: list[Annotated[str, Field(min_length=1)]] = []
    prefill: PrefillSpec | None = None

    @model_validator(mode="after")
    def _settings(self) -> ArtemisAddressSpec:
        self.settings()  # raises ArtemisConfigError, a ValueError, with the setting's name
        return self

    def settings(self) -> AddressSettings:
        return AddressSettings(
            max_size_bytes=self.max_size_bytes,
            address_full_policy=self.address_full_policy,
            max_size_bytes_reject_threshold=self.max_size_bytes_reject_threshold,
            amqp_credits=self.amqp_credits,
            amqp_low_credits=self.amqp_low_credits,
        )

    @property
    def queue_names(self) -> list[str]:
        return self.queues or [self.name]


class ArtemisProducerSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    address: str
    protocol: Literal["core", "amqp"] = "core"
    window: Window = Field(
        default=DEFAULT_PRODUCER_WINDOW, description="producerWindowSize in bytes (core)"
    )
    size: NonNegInt = 1024
    count: PosInt | None = Field(default=None, description="messages to send; omit: flat out")
    send_cost_us: PosInt = 10
    max_rate: MaxRate = Field(
        default=-1,
        description=(
            "messages/s, -1: off; producerMaxRate (core); an amqp producer's own throttle "
            "(Artemis has no such AMQP setting)"
        ),
    )
    start_s: Annotated[NumberFloat, Field(ge=0)] = 0
    latency_us: NonNegInt | None = None

    @model_validator(mode="after")
    def _rate(self) -> ArtemisProducerSpec:
        _check_rate(f"producer {self.name!r}", self.max_rate)
        return self


class ArtemisConsumerSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    queue: str
    window: Window = Field(
        default=DEFAULT_CONSUMER_WINDOW,
        description="consumerWindowSize in bytes: -1 unbounded, 0 no buffer",
    )
    process_us: NonNegInt = 100
    max_rate: MaxRate = -1
    start_s: Annotated[NumberFloat, Field(ge=0)] = 0
    latency_us: NonNegInt | None = None

    @model_validator(mode="after")
    def _rate(self) -> ArtemisConsumerSpec:
        _check_rate(f"consumer {self.name!r}", self.max_rate)
        return self


class ArtemisSpec(_Strict):
    """An Artemis broker front end (seed 003): addresses, CORE / AMQP producers, CORE consumers."""

    latency_us: NonNegInt = 100
    core_message_overhead_bytes: NonNegInt = Field(
        default=DEFAULT_CORE_MESSAGE_OVERHEAD,
        description="what the broker's memory estimate of a CORE message adds to its body",
    )
    amqp_message_overhead_bytes: NonNegInt = Field(
        default=DEFAULT_AMQP_MESSAGE_OVERHEAD,
        description="what the broker's memory estimate of an AMQP message adds to its body",
    )
    queue_reference_overhead_bytes: NonNegInt = Field(
        default=DEFAULT_QUEUE_REFERENCE_OVERHEAD,
        description="what each queue of an address after the first adds to a message's memory "
        "estimate (a reference per extra queue; 72 B measured on Artemis 2.40)",
    )
    core_delivery_overhead_bytes: NonNegInt = Field(
        default=DEFAULT_CORE_DELIVERY_OVERHEAD,
        description="what a CORE message's delivery to a consumer adds to its body: "
        "consumerWindowSize credits are spent on it",
    )
    core_encode_overhead_bytes: NonNegInt = Field(
        default=DEFAULT_CORE_ENCODE_OVERHEAD,
        description="what a CORE message's encoded size (its producer credit) adds to its body",
    )
    addresses: list[ArtemisAddressSpec] = []
    producers: list[ArtemisProducerSpec] = []
    consumers: list[ArtemisConsumerSpec] = []


class AlarmSpec(_Strict):
    resource: Literal["memory", "disk"]
    raise_s: Annotated[NumberFloat, Field(ge=0)]
    clear_s: Annotated[NumberFloat, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> AlarmSpec:
        if self.clear_s is not None and self.clear_s <= self.raise_s:
            raise FieldError(
                "clear_s", f"clear_s ({self.clear_s}) must be after raise_s ({self.raise_s})"
            )
        return self


class BindingSpec(_Strict):
    queue: str
    key: str = ""


class ExchangeSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    type: ExchangeType
    bindings: list[BindingSpec] = []


class BurstSpec(_Strict):
    every_s: PosFloat
    count: PosInt
    start_s: Annotated[NumberFloat, Field(ge=0)] = 0


class ProducerSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    capacity: PosInt | None = Field(
        default=None, description="window of uncompleted transfers; omit for no flow control"
    )
    exchange: str = ""
    routing_key: str = ""
    size: NonNegInt = 1024
    size_max: NonNegInt | None = Field(
        default=None, description="uniform sizes in [size, size_max]"
    )
    rate: PosFloat | None = Field(default=None, description="messages per second (workload form)")
    arrival: Literal["uniform", "poisson"] = "uniform"
    bursts: BurstSpec | None = None
    start_s: Annotated[NumberFloat, Field(ge=0)] = 0
    stop_s: Annotated[NumberFloat, Field(gt=0)] | None = None
    allow_unroutable: bool = Field(
        default=False,
        description="accept a routing key (its own or a send step's) that reaches no queue; "
        "the broker drops such messages as unroutable",
    )

    @model_validator(mode="after")
    def _sizes(self) -> ProducerSpec:
        if self.size_max is not None and self.size_max < self.size:
            raise FieldError("size_max", f"size_max ({self.size_max}) is below size ({self.size})")
        return self


#: What drives a producer of a workload (kind: workload); a scripted one sends by its steps.
_WORKLOAD_PRODUCER_FIELDS = ("rate", "arrival", "bursts", "start_s", "stop_s")  # in this order


class ConsumerSpec(_Strict):
    name: Annotated[str, Field(min_length=1)]
    queue: str
    rate: PosFloat | None = Field(default=None, description="messages per second; None: by steps")
    start_s: Annotated[NumberFloat, Field(ge=0)] = 0
    stop_s: Annotated[NumberFloat, Field(gt=0)] | None = None


class SendStep(_Strict):
    producer: str
    count: PosInt
    size: NonNegInt = 1024
    routing_key: str | None = None


class ConsumeStep(_Strict):
    consumer: str
    count: PosInt


class SetThresholdsStep(_Strict):
    """Change some of a queue's flow thresholds at run time (seed 000: "allow run-time
    modification"; DESIGN.md §2: "Thresholds can be changed at run time").

    The four fields are optional; give at least one. A field given replaces that threshold, and
    0 switches it off. A field left out keeps the queue's value in force at this step: from its
    declaration (explicit ``qpid.flow_*`` arguments or the broker's default ratios of
    ``qpid.max_count`` / ``qpid.max_size``) or from an earlier ``set_thresholds`` step. So
    ``{queue: q, flow_stop_count: 900}`` leaves the resume count and both byte thresholds as
    they were. The value in force is the one the event log shows: a resume declared as 0 ("resume
    at the stop") is in force as the stop value, so lowering only the stop below it is an error;
    give ``flow_resume_count: 0`` (or a value) with it. The merged thresholds are checked when the
    scenario loads, as a declaration's are: resume <= stop, and stop <= the queue's max.
    """

    queue: str
    flow_stop_count: Threshold | None = None
    flow_resume_count: Threshold | None = None
    flow_stop_size: Threshold | None = None
    flow_resume_size: Threshold | None = None

    @model_validator(mode="after")
    def _some(self) -> SetThresholdsStep:
        if all(getattr(self, f"flow_{name}") is None for name in THRESHOLD_FIELDS):
            raise ValueError(
                "a set_thresholds step needs at least one of "
                + ", ".join(f"flow_{name}" for name in THRESHOLD_FIELDS)
                + " (the others keep the queue's current values)"
            )
        return self

    def thresholds(self) -> ThresholdChange:
        """The change; :meth:`Broker.set_thresholds` merges it with the queue's thresholds."""
        return ThresholdChange(
            self.flow_stop_count, self.flow_resume_count, self.flow_stop_size, self.flow_resume_size
        )


class AdvanceStep(_Strict):
    seconds: Annotated[NumberFloat, Field(ge=0)]


class DeclareStep(_Strict):
    queue: Annotated[str, Field(min_length=1)]
    arguments: dict[str, int | str] = {}

    _arguments = field_validator("arguments")(_check_qpid_arguments)

    @field_validator("arguments", mode="before")
    @classmethod
    def _integers(cls, arguments: object, info: ValidationInfo) -> object:
        return _check_qpid_integers(info.data.get("queue", "?"), arguments)


class Step(_Strict):
    """Exactly one action per step, e.g. ``- send: {producer: p1, count: 10}``."""

    send: SendStep | None = None
    consume: ConsumeStep | None = None
    set_thresholds: SetThresholdsStep | None = None
    advance: AdvanceStep | None = None
    declare: DeclareStep | None = None

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        given = [name for name, value in self if value is not None]
        if len(given) != 1:
            raise ValueError(
                "a step takes exactly one of send, consume, set_thresholds, advance, declare; "
                f"got {given or 'none'}"
            )
        return self

    @property
    def action(self) -> tuple[str, Any]:
        return next((name, value) for name, value in self if value is not None)


class Scenario(_Strict):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str = ""
    kind: Literal["scripted", "workload"]
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    seed: Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)] = 0
    duration_s: PosFloat | None = None
    broker: BrokerSpec = BrokerSpec()
    queues: list[QueueSpec] = []
    exchanges: list[ExchangeSpec] = []
    producers: list[ProducerSpec] = []
    consumers: list[ConsumerSpec] = []
    steps: list[Step] = []
    # Protocol front ends (seed 004): AMQP 1.0 / 0.9.1 client connections, RabbitMQ's policy.
    connections: list[ConnectionSpec] = []
    rabbitmq: RabbitPolicySpec = RabbitPolicySpec()
    alarms: list[AlarmSpec] = []
    # Apache ActiveMQ Artemis front end (seed 003).
    artemis: ArtemisSpec | None = None

    def _check_end_in_range(self) -> None:
        """The run's last event must have a timestamp: past 9999-12-31 none exists (and the
        sink would have written a part of the run before failing)."""
        seconds = self.duration_s or 0.0
        seconds += sum(s.advance.seconds for s in self.steps if s.advance is not None)
        try:
            self.start + timedelta(seconds=seconds)
        except OverflowError:
            field = "duration_s" if self.kind == "workload" else "steps"
            raise FieldError(
                field,
                f"the run would end {seconds:g} s after {self.start.isoformat()}, past "
                "9999-12-31, the last day a timestamp holds",
            ) from None

    def broker_config(self) -> BrokerConfig:
        """The engine's broker; its default queue limit, Qpid's unless the scenario sets one, is
        for Qpid's queues (:meth:`queue_arguments`; Artemis declares its own queues)."""
        return self.broker.config()

    def rabbitmq_queues(self) -> frozenset[str]:
        """The queues a connection's link names: RabbitMQ's (the engine's AMQP 1.0 and 0.9.1
        links are RabbitMQ's clients). Every other queue of ``queues`` is Qpid's, even beside
        connections: a Qpid producer's queue keeps Qpid's default limit and thresholds."""
        publishers = [link.queue for c in self.connections for link in c.publishers]
        return frozenset(
            publishers + [link.queue for c in self.connections for link in c.consumers]
        )

    def queue_arguments(self, queue: QueueSpec) -> dict[str, int | str]:
        """The declare arguments of ``queue``: its own, and for a RabbitMQ queue:

        - no Qpid default flow thresholds (stops 0, flow control off) unless it sets a
          ``qpid.flow_stop_*`` itself: RabbitMQ has no queue flow thresholds (DESIGN §2 gives
          them to Qpid's queues), and its ``x-max-length`` (``qpid.max_count``) got 80 % / 70 %
          of it, holding its publishers' transfers as Qpid does (a review);
        - a limit of none (0) where it sets no ``qpid.max_size``, unless the scenario's broker
          sets a default: RabbitMQ has no Qpid default queue limit."""
        arguments = dict(queue.arguments)
        if queue.name not in self.rabbitmq_queues():
            return arguments
        if self.broker.default_queue_limit_bytes is None:
            arguments.setdefault(MAX_SIZE_KEY, 0)
        # Only where a limit would give the defaults something to take a share of: a queue
        # without one declares as before (its thresholds "defaults", all 0).
        default_limit = self.broker.default_queue_limit_bytes or 0
        limited = integer_argument(queue.name, MAX_COUNT_KEY, arguments.get(MAX_COUNT_KEY, 0)) or (
            integer_argument(queue.name, MAX_SIZE_KEY, arguments.get(MAX_SIZE_KEY, default_limit))
        )
        if limited and not any(key in arguments for key in FLOW_STOP_KEYS):
            arguments.update(dict.fromkeys(FLOW_STOP_KEYS, 0))
        return arguments

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.start.tzinfo is None:
            raise FieldError("start", "needs a time zone, e.g. 2026-01-01T00:00:00Z")
        if self.kind == "workload":
            if self.duration_s is None:
                raise FieldError("duration_s", "a workload scenario needs duration_s")
            if self.duration_s > MAX_DURATION_S:
                raise FieldError(
                    "duration_s",
                    f"{self.duration_s:g} s is {self.duration_s / 86_400:,.0f} days of virtual "
                    f"time; at most {MAX_DURATION_S:,} s ({MAX_DURATION_S // 86_400} days): a day "
                    "of a busy broker is already millions of events",
                )
            if self.steps:
                raise FieldError("steps", "a workload scenario takes no steps (use kind: scripted)")
        else:
            if not self.steps:
                raise FieldError("steps", "a scripted scenario needs steps")
            # Read by no scripted run: refused rather than ignored (an audit).
            if "duration_s" in self.model_fields_set:
                raise FieldError(
                    "duration_s",
                    "a scripted scenario lasts as long as its advance steps; duration_s is the "
                    "workload form (use kind: workload)",
                )
            for index, producer in enumerate(self.producers):
                for name in (
                    f for f in _WORKLOAD_PRODUCER_FIELDS if f in producer.model_fields_set
                ):
                    raise FieldError(
                        f"producers.{index}.{name}",
                        f"producer {producer.name!r}: {name} is the workload form; a scripted "
                        "producer sends by send steps (use kind: workload)",
                    )
        self._check_end_in_range()
        for kind_name, names in (
            ("queue", [q.name for q in self.queues]),
            ("exchange", [e.name for e in self.exchanges]),
            ("producer", [p.name for p in self.producers]),
            ("consumer", [c.name for c in self.consumers]),
        ):
            duplicated = sorted({n for n in names if names.count(n) > 1})
            if duplicated:
                raise FieldError(f"{kind_name}s", f"duplicated {kind_name} names: {duplicated}")
        # A link's events name it: a producer and a consumer of one name would be one link of
        # two roles in the gold link tables (DESIGN §4, one row per link).
        shared = sorted({p.name for p in self.producers} & {c.name for c in self.consumers})
        if shared:
            raise FieldError("consumers", f"names shared by a producer and a consumer: {shared}")
        self._check_reserved_names()
        queues = {q.name for q in self.queues} | {
            s.declare.queue for s in self.steps if s.declare is not None
        }
        exchanges = {e.name for e in self.exchanges} | {""}
        declared_at_start = {q.name for q in self.queues}
        for e_index, exchange in enumerate(self.exchanges):
            for b_index, binding in enumerate(exchange.bindings):
                where = f"exchanges.{e_index}.bindings.{b_index}.queue"
                if binding.queue not in queues:
                    raise FieldError(
                        where, f"exchange {exchange.name!r} binds unknown queue {binding.queue!r}"
                    )
                if binding.queue not in declared_at_start:  # bindings are made at the start
                    raise FieldError(
                        where,
                        f"exchange {exchange.name!r} binds queue {binding.queue!r}, which only a "
                        "declare step adds later; bindings are made when the run starts, so "
                        "list the queue under queues",
                    )
        for index, producer in enumerate(self.producers):
            if producer.exchange not in exchanges:
                raise FieldError(
                    f"producers.{index}.exchange",
                    f"producer {producer.name!r} uses unknown exchange {producer.exchange!r}",
                )
            if self.kind == "workload" and producer.rate is None and producer.bursts is None:
                raise FieldError(
                    f"producers.{index}.rate",
                    f"producer {producer.name!r} needs a rate or bursts in a workload",
                )
        for index, consumer in enumerate(self.consumers):
            if consumer.queue not in queues:
                raise FieldError(
                    f"consumers.{index}.queue",
                    f"consumer {consumer.name!r} reads unknown queue {consumer.queue!r}",
                )
        self._check_connections()
        self._check_artemis(queues)
        producers = {p.name for p in self.producers}
        consumers = {c.name for c in self.consumers}
        for index, step in enumerate(self.steps):
            action, spec = step.action
            if action == "send" and spec.producer not in producers:
                raise FieldError(
                    f"steps.{index}.send.producer",
                    f"unknown producer {spec.producer!r} (producers: {_names(sorted(producers))})",
                )
            if action == "consume" and spec.consumer not in consumers:
                raise FieldError(
                    f"steps.{index}.consume.consumer",
                    f"unknown consumer {spec.consumer!r} (consumers: {_names(sorted(consumers))})",
                )
            if action == "set_thresholds" and spec.queue not in queues:
                raise FieldError(
                    f"steps.{index}.set_thresholds.queue", f"unknown queue {spec.queue!r}"
                )
        self._check_thresholds()
        self._check_routes()
        return self

    def _check_reserved_names(self) -> None:
        """``prefill`` names the producer of the messages put in queues before the run
        (events.PREFILL_LINK): no client may take it."""
        clients = [p.name for p in self.producers] + [c.name for c in self.consumers]
        clients += [p.name for c in self.connections for p in c.publishers]
        clients += [k.name for c in self.connections for k in c.consumers]
        if self.artemis is not None:
            clients += [p.name for p in self.artemis.producers]
            clients += [c.name for c in self.artemis.consumers]
        if PREFILL_LINK in clients:
            raise ValueError(
                f"{PREFILL_LINK!r} is a reserved client name: the event log names it as the "
                "producer of the messages a queue is prefilled with; rename the client"
            )

    def _check_thresholds(self) -> None:
        """Declare the queues and apply the ``set_thresholds`` steps on a scratch broker.

        The engine computes and checks thresholds (explicit ``qpid.flow_*`` arguments, or the
        broker's default ratios of ``qpid.max_count`` / ``qpid.max_size``) when it declares a
        queue; doing it here, with the same code, names the scenario field of a bad one. The
        checks are static: a queue's limits never change after it is declared.
        """
        scheduler = Scheduler(self.start_us)
        try:
            broker = Broker(EventBus("validate", scheduler), scheduler, self.broker_config())
        except FlowConfigError as error:
            raise ValueError(f"broker: {error}") from None

        def declare(where: str, queue: str, arguments: dict[str, int | str]) -> None:
            try:
                broker.declare_queue(queue, arguments)
            except FlowConfigError as error:
                raise FieldError(where, str(error)) from None

        for index, queue in enumerate(self.queues):
            declare(f"queues.{index}.arguments", queue.name, self.queue_arguments(queue))
            prefill = queue.prefill
            if prefill is not None and broker.queues[queue.name].flow.should_stop(
                prefill.count, prefill.count * prefill.size
            ):
                flow = broker.queues[queue.name].flow
                raise FieldError(
                    f"queues.{index}.prefill",
                    f"{prefill.count} messages of {prefill.size} bytes "
                    f"pass the queue's stop threshold (flow_stop_count {flow.stop_count}, "
                    f"flow_stop_size {flow.stop_size}), so its flow would stop before the run "
                    "starts; the prefill's writer has no window to bound that overshoot (its "
                    "enqueues log capacity 0): prefill at most the stop threshold",
                )
        for index, step in enumerate(self.steps):
            if step.declare is not None:
                name = step.declare.queue
                if name in broker.queues:
                    raise FieldError(
                        f"steps.{index}.declare.queue", f"queue {name!r} is already declared"
                    )
                declare(f"steps.{index}.declare.arguments", name, step.declare.arguments)
            elif step.set_thresholds is not None:
                where = f"steps.{index}.set_thresholds"
                name = step.set_thresholds.queue
                if name not in broker.queues:
                    raise FieldError(
                        f"{where}.queue", f"queue {name!r} is declared only by a later declare step"
                    )
                try:
                    broker.set_thresholds(name, step.set_thresholds.thresholds())
                except FlowConfigError as error:
                    raise FieldError(where, str(error)) from None

    def _check_routes(self) -> None:
        """Reject a producer's or a send step's routing key that reaches no queue.

        The broker drops such messages as unroutable, as real brokers do, but in a scenario file it
        is almost always a typo; ``allow_unroutable: true`` on the producer accepts it. Queues that
        ``declare`` steps add later count, and so do the queues of Artemis addresses (the broker
        declares them when the run starts).
        """
        default_queues = [q.name for q in self.queues]
        default_queues += [s.declare.queue for s in self.steps if s.declare is not None]
        if self.artemis is not None:
            default_queues += [q for a in self.artemis.addresses for q in a.queue_names]
        routers = {"": Exchange("", "direct")}
        for queue in default_queues:
            routers[""].bind(queue, queue)
        for spec in self.exchanges:
            routers[spec.name] = Exchange(spec.name, spec.type)
            for binding in spec.bindings:
                routers[spec.name].bind(binding.queue, binding.key)
        specs = {e.name: e for e in self.exchanges}

        def check(where: str, producer: ProducerSpec, key: str) -> None:
            if producer.allow_unroutable or routers[producer.exchange].route(key):
                return
            if producer.exchange:
                exchange = specs[producer.exchange]
                bound = ", ".join(f"key {b.key!r} -> queue {b.queue!r}" for b in exchange.bindings)
                target = (
                    f"exchange {exchange.name!r} ({exchange.type}), which routes it to no queue "
                    f"({'bindings: ' + bound if bound else 'it has no bindings'})"
                )
                if exchange.type == "topic":
                    target += "; in a topic binding * matches one word, # zero or more"
                fix = "the key or the bindings"
            else:
                target = (
                    "the default exchange, which routes a key only to the queue of that name, "
                    f"and no queue is named {key!r} (queues: {_names(default_queues)})"
                )
                fix = "the key, or declare the queue"
            raise FieldError(
                where,
                f"producer {producer.name!r} sends with routing_key {key!r} on {target}. "
                f"Fix {fix}; or set allow_unroutable: true on the producer if its messages may "
                "reach no queue (the broker drops them)",
            )

        producers = {p.name: p for p in self.producers}
        uses_own_key = {
            s.send.producer for s in self.steps if s.send is not None and s.send.routing_key is None
        }
        for index, producer in enumerate(self.producers):
            # A scripted producer's own key matters only if a send step leaves the key to it.
            if self.kind == "workload" or producer.name in uses_own_key:
                check(f"producers.{index}.routing_key", producer, producer.routing_key)
        for index, step in enumerate(self.steps):
            if step.send is not None and step.send.routing_key is not None:
                producer = producers[step.send.producer]
                check(f"steps.{index}.send.routing_key", producer, step.send.routing_key)

    def _check_connections(self) -> None:
        """Names unique, each link's queue one of ``queues`` (declared at the start, not by a
        step: links attach at the start), credits within each protocol's limit."""
        connection_names = [c.name for c in self.connections]
        duplicated = sorted({n for n in connection_names if connection_names.count(n) > 1})
        if duplicated:
            raise FieldError("connections", f"duplicated connection names: {duplicated}")
        link_names: list[str] = []
        known = [q.name for q in self.queues]
        for c_index, connection in enumerate(self.connections):
            roles: list[tuple[str, int, LinkPublisherSpec | LinkConsumerSpec]] = [
                *(("publishers", i, p) for i, p in enumerate(connection.publishers)),
                *(("consumers", i, k) for i, k in enumerate(connection.consumers)),
            ]
            for role, l_index, link in roles:
                link_names.append(link.name)
                if link.queue not in known:
                    raise FieldError(
                        f"connections.{c_index}.{role}.{l_index}.queue",
                        f"connection {connection.name!r}: link {link.name!r} uses unknown "
                        f"queue {link.queue!r} (protocol links need a queue from `queues`)"
                        f"{did_you_mean(link.queue, known)}",
                    )
            for k_index, consumer in enumerate(connection.consumers):
                most, what = _MOST_CREDIT[connection.protocol]
                if consumer.credit > most:
                    raise FieldError(
                        f"connections.{c_index}.consumers.{k_index}.credit",
                        f"consumer {consumer.name!r}: {consumer.credit:,} is past the most it "
                        f"can grant, {most:,} ({what})",
                    )
                if consumer.top_up_below > consumer.credit:
                    raise FieldError(
                        f"connections.{c_index}.consumers.{k_index}.top_up_below",
                        f"consumer {consumer.name!r}: top_up_below ({consumer.top_up_below}) "
                        f"exceeds credit ({consumer.credit})",
                    )
        duplicated = sorted({n for n in link_names if link_names.count(n) > 1})
        if duplicated:
            raise FieldError("connections", f"duplicated link names: {duplicated}")
        if self.connections and self.kind != "workload":
            raise ValueError("connections run for duration_s: use kind: workload")
        for c_index, connection in enumerate(self.connections):
            if self.duration_s is not None and connection.start_s >= self.duration_s:
                raise FieldError(
                    f"connections.{c_index}.start_s",
                    f"connection {connection.name!r} would connect at {connection.start_s:g} s, "
                    f"at or after the run's end ({self.duration_s:g} s)",
                )
        if self.rabbitmq.credit_flow_more > self.rabbitmq.credit_flow_initial:
            raise ValueError("rabbitmq.credit_flow_more must not exceed credit_flow_initial")

    def _check_artemis(self, queues: set[str]) -> None:
        artemis = self.artemis
        if artemis is None:
            return
        if self.kind != "workload":
            raise ValueError("artemis runs for duration_s: use kind: workload")
        addresses = [a.name for a in artemis.addresses]
        address_queues = [q for a in artemis.addresses for q in a.queue_names]
        clients = [p.name for p in artemis.producers] + [c.name for c in artemis.consumers]
        links = [p.name for c in self.connections for p in c.publishers] + [
            k.name for c in self.connections for k in c.consumers
        ]
        for kind_name, names in (
            ("artemis address", addresses),
            ("artemis queue", address_queues),
            ("artemis client", clients + links),
        ):
            duplicated = sorted({n for n in names if names.count(n) > 1})
            if duplicated:
                raise FieldError("artemis", f"duplicated {kind_name} names: {duplicated}")
        clash = sorted(set(address_queues) & queues)
        if clash:
            raise FieldError(
                "queues",
                f"artemis queues {clash} are declared by their address; remove them from `queues`",
            )
        for index, producer in enumerate(artemis.producers):
            if producer.address not in addresses:
                raise FieldError(
                    f"artemis.producers.{index}.address",
                    f"artemis producer {producer.name!r} sends to unknown address "
                    f"{producer.address!r}{did_you_mean(producer.address, addresses)}",
                )
        for index, consumer in enumerate(artemis.consumers):
            if consumer.queue not in address_queues:
                raise FieldError(
                    f"artemis.consumers.{index}.queue",
                    f"artemis consumer {consumer.name!r} reads unknown queue {consumer.queue!r} "
                    "(a queue of an artemis address)"
                    f"{did_you_mean(consumer.queue, address_queues)}",
                )

    @property
    def start_us(self) -> int:
        return int(self.start.timestamp()) * US_PER_SECOND + self.start.microsecond


def _names(names: list[str], limit: int = 20) -> str:
    if not names:
        return "none"
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _model_at(location: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The scenario model that holds the field at ``location`` (``("producers", 0)`` ->
    :class:`ProducerSpec`), or None where the path leaves the models (a mapping's keys)."""
    current: Any = Scenario
    for part in location:
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return None
            current = current.model_fields[part].annotation
        elif typing.get_origin(current) is list and isinstance(part, int):
            current = typing.get_args(current)[0]
        else:
            return None
        # Unwrap ``X | None`` and ``Annotated[X, ...]`` down to the model or list inside.
        while True:
            origin = typing.get_origin(current)
            if origin is Annotated:
                current = typing.get_args(current)[0]
            elif origin in (typing.Union, types.UnionType):
                inner = [arg for arg in typing.get_args(current) if arg is not type(None)]
                if len(inner) != 1:
                    return None
                current = inner[0]
            else:
                break
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


#: pydantic's error types for a value that is no date and time: its wording ("input is too short")
#: says less than an example would.
_NOT_A_DATETIME = frozenset({"datetime_type", "datetime_parsing", "datetime_from_date_parsing"})


#: A file whose timestamps are all dates (``impossible_dates`` of the error formatters).
_NO_IMPOSSIBLE_DATES: Mapping[str, str] = types.MappingProxyType({})


def _error_line(
    item: Any,
    document: yaml.Node | None = None,
    impossible_dates: Mapping[str, str] = _NO_IMPOSSIBLE_DATES,
) -> str:
    """``location: message`` of one pydantic error, located at the field that is wrong, with the
    line of the ``document`` (the composed file) where that field, or the deepest part of its
    path the file has, is written; ``impossible_dates``: the file's timestamps that are no date
    (the loader's, :class:`_ScenarioLoader`), each with why."""
    location: tuple[int | str, ...] = tuple(item["loc"])
    # A validator's ValueError reads "Value error, <its message>": the message says it all.
    message = str(item["msg"]).removeprefix("Value error, ")
    bad_input = item.get("input")
    if isinstance(bad_input, str) and bad_input in impossible_dates:
        message = f"invalid date or time {bad_input!r}: {impossible_dates[bad_input]}"
    elif item["type"] in _NOT_A_DATETIME:
        message = f"expected a date and time such as 2026-03-02T09:00:00Z, got {item['input']!r}"
    elif (
        item["type"] not in ("missing", "extra_forbidden")
        and isinstance(bad_input, str | int | float | bool)
        and _as_written(bad_input) not in message
        and not (isinstance(bad_input, bool) and "boolean" in message)
    ):
        # "Input should be a valid integer" did not say of what (a review: capacity 9.5).
        message = f"{message}, got {_as_written(bad_input)}"
    cause = (item.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        # A model validator's error names its field: locate it there, not at the model.
        location = (*location, *cause.field.split("."))
        message = cause.message
    elif item["type"] == "extra_forbidden" and location:
        model = _model_at(location[:-1])
        if model is not None:
            known = list(model.model_fields)
            close = closest_name(str(location[-1]), known)
            hint = f"did you mean {close!r}? " if close else ""
            message = f"unknown field ({hint}known: {', '.join(known)})"
    line = _line_of(document, location)
    where = f" (line {line})" if line is not None else ""
    return f"{'.'.join(str(part) for part in location) or '(top level)'}: {message}{where}"


def _as_written(value: str | int | float | bool) -> str:
    """A scalar of the file as YAML writes it: ``true``, ``9.5``, ``'abc'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return repr(value) if isinstance(value, str) else str(value)


def _line_of(document: yaml.Node | None, location: tuple[int | str, ...]) -> int | None:
    """The line (from 1) of the node at ``location`` in a composed document, or of the deepest
    node on its way there (a missing field: its parent); None without a document."""
    node = document
    if node is None:
        return None
    for part in location:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if str(k.value) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and str(part).isdigit():
            # pydantic's index is an int, a FieldError's dotted path gives a string
            index = int(part)
            child = node.value[index] if index < len(node.value) else None
        if child is None:
            break
        node = child
    # A field missing from the top level: the document's first line says nothing.
    return None if node is document else node.start_mark.line + 1


def _format_validation_error(
    source: str,
    error: ValidationError,
    document: yaml.Node | None = None,
    impossible_dates: Mapping[str, str] = _NO_IMPOSSIBLE_DATES,
) -> str:
    """One line naming the file and the field; several errors, one indented line each."""
    lines = [_error_line(item, document, impossible_dates) for item in error.errors()]
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return "\n".join(
        [f"{source}: invalid scenario ({len(lines)} errors)"] + [f"  {line}" for line in lines]
    )


def parse_scenario(
    data: Any,
    source: str = "<scenario>",
    text: str | None = None,
    impossible_dates: Mapping[str, str] = _NO_IMPOSSIBLE_DATES,
) -> Scenario:
    """The scenario of a loaded YAML document; ``text``, the file it was loaded from, gives each
    error its line; ``impossible_dates`` says why a timestamp of the file is no date."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping, got {_yaml_kind(data)}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        document = yaml.compose(text, Loader=yaml.SafeLoader) if text is not None else None
        raise ScenarioError(
            _format_validation_error(source, error, document, impossible_dates)
        ) from None


def _yaml_kind(data: Any) -> str:
    """What a YAML document that is no mapping holds, in YAML's words (``NoneType`` told the
    user of an empty file nothing: a review)."""
    if data is None:
        return "an empty document"
    if isinstance(data, list):
        return "a list"
    return f"a single value ({type(data).__name__} {data!r:.40})"


class _ScenarioLoader(UniqueKeyLoader):
    """yaml's safe loader, but a timestamp that is no date (``2026-13-02``) stays the string it is
    written as, its reason kept in ``impossible_dates``, so that validation reports it with the
    file's other errors rather than the constructor's bare ``month must be in 1..12`` alone."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.impossible_dates: dict[str, str] = {}

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as error:
            self.impossible_dates[node.value] = str(error)
            return node.value


_ScenarioLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _ScenarioLoader.construct_yaml_timestamp
)


def load_scenario(path_or_name: str | Path) -> Scenario:
    """Load a scenario file, or a bundled scenario by name (``flowctl scenarios`` lists them)."""
    path = Path(path_or_name)
    by_name = not path.exists() and not path.suffix
    if by_name:
        path = BUNDLED_DIR / f"{path_or_name}.yaml"
    if path.is_dir():
        raise ScenarioError(f"{path_or_name}: is a folder; give a scenario file (.yaml) in it")
    if not path.is_file():
        hint = ""
        if by_name:  # a bundled scenario's name, mistyped?
            names = [bundled.stem for bundled in bundled_scenarios()]
            close = closest_name(str(path_or_name), names)
            hint = f"; did you mean {close!r}?" if close else " (flowctl scenarios lists them)"
        raise ScenarioError(f"{path_or_name}: no such scenario file or bundled scenario{hint}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ScenarioError(f"{path}: {utf8_problem(error)}") from None
    loader = _ScenarioLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        raise ScenarioError(f"{path}: not valid YAML: {yaml_problem(error)}") from None
    finally:
        loader.dispose()
    return parse_scenario(data, str(path), text, loader.impossible_dates)


def bundled_scenarios() -> list[Path]:
    return sorted(BUNDLED_DIR.glob("*.yaml"))
