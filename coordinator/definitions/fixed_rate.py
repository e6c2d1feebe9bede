"""A fixed-rate test, the unit every other kind is made of: plain dataclasses, checked when made.

    FixedRateTest(send_url="amqp://sut:5672/q", rate=1000, size=256, parallel=5, duration="10m")

`rate` is messages per second per client (as PerfTest's --rate per producer); a sender runs
`parallel` clients, so one sender's target is rate x parallel. `rate=0` is unbounded: as fast
as the SUT takes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from protocol.fail import FailConditions
from protocol.json_value import JsonObject
from protocol.options import (
    OptionError,
    TestOptions,
    parse_duration,
    parse_message_size,
    parse_options,
    parse_profile,
    parse_seconds,
)
from protocol.secrets import redact_text
from protocol.sut_url import parse_sut_url, split_urls

__all__ = ["Action", "DefinitionError", "Fail", "FixedRateTest", "Flow", "UnboundedTest"]


class DefinitionError(ValueError):
    pass


# The fail conditions are one type with the peers that check them (protocol/fail.py).
Fail = FailConditions

# A script's names for the SET options a test sets on its own, and their defaults: the SET
# options' own (protocol.options.TestOptions). Anything else goes in `options` by its SET name.
SCRIPT_NAMES = {
    "rate": "rate_per_s",
    "size": "message_size",
    "parallel": "parallel_count",
    "duration": "duration",  # or `count`: messages per sender
    "warm_up": "warm_up_s",
}
_DEFAULTS = TestOptions()


def span_text(value: str | float) -> str:
    """A duration as a test gives it ("30s"); a number is seconds, and says so."""
    return f"{value:g}s" if isinstance(value, int | float) else value


@dataclass(frozen=True)
class Flow:
    """One path through the SUT: `senders` workers publish to send_url, `receivers` workers
    consume from receive_url (the same URL when not given). A test may hold several flows,
    e.g. two queues, one fed by two senders and one by five (seed 004 §7.4)."""

    send_url: str | list[str]
    receive_url: str | list[str] = ""
    senders: int = 1
    receivers: int = 1
    parallel: int = 1  # clients per sender and per receiver
    rate: float | None = None  # per client; None: the test's

    def urls(self, test_id: str = "{test_id}") -> tuple[list[str], list[str]]:
        """Send and receive URLs; `{test_id}` in one becomes `test_id`: a fresh queue or topic per
        phase."""
        send = split_urls(self.send_url)
        receive = split_urls(self.receive_url) or send
        return [u.replace("{test_id}", test_id) for u in send], [u.replace("{test_id}", test_id) for u in receive]


@dataclass(frozen=True)
class Action:
    """At `at` into the load (a time, "3m"), ask agent `agent` to run `command` with `args`:
    a built-in action on a configured service (`Action("30s", "a1", "restart", ("broker",))`,
    `("broker", "duration_s=10")` to undo it after 10 s) or a handler by name."""

    at: str | float
    agent: str
    command: str
    args: tuple[str, ...] = ()

    @property
    def at_s(self) -> float:
        return parse_seconds(self.at)


@dataclass(frozen=True)
class FixedRateTest:
    """Fixed rate for a time or a message count, through one flow or several."""

    send_url: str | list[str] = ""
    receive_url: str | list[str] = ""
    rate: float = _DEFAULTS.rate_per_s
    size: int | str = _DEFAULTS.message_size.min_bytes
    parallel: int = _DEFAULTS.parallel_count
    duration: str | float = str(_DEFAULTS.duration)  # a number is seconds; `count` bounds by messages instead
    count: int | None = None  # messages per sender
    warm_up: str | float = _DEFAULTS.warm_up_s
    senders: int = 1
    receivers: int = 1
    flows: tuple[Flow, ...] = ()
    fail: Fail = field(default_factory=Fail)
    options: JsonObject = field(default_factory=dict)  # more SET options: confirm_window, processes…
    # A test profile (seed 004 §3.1): (at, rate per client, clients) steps changing the load
    # during the run, e.g. ((0, 100, 2), ("30s", 200, 4)); the first at 0. Overrides rate/parallel
    # for senders.
    profile: tuple[tuple[str | float, float, int], ...] = ()
    inspectors: tuple[str, ...] = ()  # "name" or "name=management-url"
    agents: tuple[str, ...] = ()  # agent peer names that join the test (those named in actions do too)
    actions: tuple[Action, ...] = ()  # fault actions on a schedule
    labels: JsonObject = field(default_factory=dict)
    name: str = ""
    drain_timeout_s: float = 60.0

    KIND = "fixed-rate"

    def __post_init__(self) -> None:
        if not self.flows and not self.send_url:
            raise DefinitionError("a test needs send_url (or flows)")
        try:
            self.duration_option()
            parse_message_size(self.size)
            parse_seconds(self.warm_up)
            parse_options(self.options)
            # A URL no driver would take is refused now, before any daemon is started.
            for flow in self.all_flows():
                for url in {*flow.urls()[0], *flow.urls()[1]}:
                    parse_sut_url(url)
        except (ValueError, OptionError) as exc:
            raise DefinitionError(str(exc)) from exc
        if self.profile:
            try:
                parse_profile([list(step) for step in self.profile])
            except ValueError as exc:
                raise DefinitionError(f"profile: {exc}") from exc
        for action in self.actions:
            try:
                action.at_s  # noqa: B018 - parses the time
            except ValueError as exc:
                raise DefinitionError(f"action {action.command}: {exc}") from exc
        if self.rate < 0 or self.parallel < 1 or self.senders < 0 or self.receivers < 0:
            raise DefinitionError("rate must be >= 0, parallel >= 1, senders and receivers >= 0")
        self._each_url_has_a_client()
        # A warm-up the whole run long leaves nothing to measure: every figure would read 0.
        seconds, warm_up_s = self.expected_seconds(), parse_seconds(self.warm_up)
        if seconds is not None and warm_up_s >= seconds:
            raise DefinitionError(
                f"the warm-up ({warm_up_s:g} s) is as long as the run ({seconds:g} s) or longer: nothing would be "
                "measured; give a shorter warm-up or a longer duration"
            )

    def _each_url_has_a_client(self) -> None:
        """Each worker's clients take its URLs round robin: a URL past the clients' number got no
        load, or was never read, while the workload line named it."""
        clients = max((int(step[2]) for step in self.profile), default=0)  # a profile's most, else the flow's
        for flow in self.all_flows():
            for side, urls in zip(("send", "receive"), flow.urls(), strict=True):
                most = clients or flow.parallel
                if len(urls) > most:
                    unused = ", ".join(redact_text(url) for url in urls[most:])
                    raise DefinitionError(
                        f"{len(urls)} {side} URLs for {most} client(s) a worker: each client takes one, round robin, "
                        f"so {unused} would be {'sent nothing' if side == 'send' else 'read by no one'}; "
                        f"give parallel={len(urls)} or more"
                    )

    def duration_option(self) -> str | int:
        if self.count is not None:
            # Both given: one would be dropped without a word (the count won, and a 10 s test ran for minutes).
            if span_text(self.duration) != str(_DEFAULTS.duration):
                raise DefinitionError(f"duration {self.duration!r} and count {self.count!r}: give one of them")
            return parse_duration(int(self.count)).messages or 0
        value = span_text(self.duration)
        if parse_duration(value).messages is not None:
            raise DefinitionError(f"duration {self.duration!r}: give a time; a message count goes in count=")
        return value

    def all_flows(self) -> tuple[Flow, ...]:
        if self.flows:
            return self.flows
        return (Flow(self.send_url, self.receive_url, self.senders, self.receivers, self.parallel),)

    def sender_options(self, flow: Flow, test_id: str) -> JsonObject:
        send, _ = flow.urls(test_id)
        profile: JsonObject = {}
        if self.profile:
            steps = [list(step) for step in self.profile]
            profile = {"profile": steps, "parallel_count": max(int(step[2]) for step in self.profile)}
        script = {
            "rate": self.rate if flow.rate is None else flow.rate,
            "size": self.size,
            "parallel": flow.parallel,
            "duration": self.duration_option(),
            "warm_up": parse_seconds(self.warm_up),
        }
        return {
            **self.options,
            "send_url": send,
            **{SCRIPT_NAMES[name]: value for name, value in script.items()},
            **self.fail.options(),
            **profile,
        }

    def receiver_options(self, flow: Flow, test_id: str) -> JsonObject:
        _, receive = flow.urls(test_id)
        return {
            **{k: v for k, v in self.options.items() if k not in ("duration",)},
            "receive_url": receive,
            SCRIPT_NAMES["parallel"]: flow.parallel,
            SCRIPT_NAMES["warm_up"]: parse_seconds(self.warm_up),
            **self.fail.options(),
        }

    def target_rate(self) -> float:
        """All senders' clients together, msg/s (0 = unbounded); a profile's peak."""
        if self.profile:
            peak = max(float(rate) * int(parallel) for _, rate, parallel in self.profile)
            return peak * sum(f.senders for f in self.all_flows())
        return sum((self.rate if f.rate is None else f.rate) * f.parallel * f.senders for f in self.all_flows())

    def expected_seconds(self) -> float | None:
        return parse_seconds(self.duration) if self.count is None else None

    def with_load(self, rate: float, parallel: int) -> FixedRateTest:
        flows = tuple(dataclasses.replace(f, rate=None, parallel=parallel) for f in self.flows)
        return dataclasses.replace(self, rate=rate, parallel=parallel, flows=flows)


def UnboundedTest(**fields: Any) -> FixedRateTest:  # noqa: N802 - reads as a test kind, like the others
    """As fast as the SUT takes it (rate 0), for a time or a message count (seed 004 Table 6.2)."""
    return FixedRateTest(**{"rate": 0.0, **fields})
