"""Tests declared in a TOML file, for `maestro test --file test.toml`:

    kind = "fixed-rate"            # or "unbounded", "request-reply", "incremental", ...
    name = "quorum queue, 1 KiB"
    send_url = "amqp://sut:5672/q"
    rate = 1000                    # per client
    size = 1024
    parallel = 5
    duration = "10m"
    senders = 2
    receivers = 2

    [options]                      # more SET options
    confirm_window = 100

    [fail]
    latency_ms = 50
    max_loss_ratio = 0.0

    [labels]
    instance_type = "m5.large"
    price_per_hour = 0.096

    [incremental]                  # kind = "incremental" only
    initial_rate = 100
    ceiling_rate = 1000
    rate_step = 100

    [search]                       # kind = "search": bisection on the rate under the fail conditions
    low_rate = 100
    high_rate = 5000

    [repeated]                     # kind = "repeated": mean and 95 % confidence interval
    times = 5

    [sweep]                        # kind = "sweep": one test per point of the grid
    grid = { "url.linger_ms" = [0, 5, 20], "url.batch_size" = [16384, 131072] }

    [[flows]]                      # optional: several send/receive paths (then no send_url)
    send_url = "amqp://sut:5672/a"
    senders = 2

A request/reply test (a closed system) names `request_url` instead of `send_url`, with
`reply_url`, `clients`, `outstanding`, `think_time`, `service_time`, `request_timeout` and
`repliers` (`coordinator.definitions.request_reply`); with `kind = "incremental"`, "repeated" or "sweep" it
is the base of the series.

The same names as the Python API (`coordinator.definitions`); an unknown key is refused by name.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.definitions import (
    DefinitionError,
    Fail,
    FixedRateTest,
    Flow,
    IncrementalTest,
    RepeatedTest,
    RequestReplyTest,
    SearchTest,
    SweepTest,
    TestDefinition,
    UnboundedTest,
)

__all__ = ["build_test", "load_test_file"]

KINDS = ("fixed-rate", "unbounded", "request-reply", "incremental", "search", "repeated", "sweep")
_SERIES = KINDS[3:]


def _known(cls: type, table: dict[str, Any], where: str) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise DefinitionError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    return table


def build_test(kind: str, table: Mapping[str, Any]) -> TestDefinition:
    """A test from plain values (a TOML file's, or the command line's)."""
    if kind not in KINDS:
        raise DefinitionError(f"unknown test kind {kind!r} (known: {', '.join(KINDS)})")
    table = dict(table)
    series = table.pop(kind, None) if kind in _SERIES else None
    for other in _SERIES:
        if other in table:
            raise DefinitionError(f"a [{other}] table in a {kind} test")
    if "fail" in table:
        try:
            table["fail"] = Fail(**_known(Fail, table["fail"], "[fail]"))
        except ValueError as exc:  # a value the peers' option parsers refuse
            raise DefinitionError(f"[fail] {exc}") from exc
    if "flows" in table:
        table["flows"] = tuple(Flow(**_known(Flow, f, "[[flows]]")) for f in table["flows"])
    if "profile" in table:
        table["profile"] = tuple(tuple(step) for step in table["profile"])
    for key in ("inspectors", "agents"):
        if key in table:
            table[key] = tuple(table[key])
    if kind == "request-reply" or "request_url" in table:
        base: FixedRateTest = RequestReplyTest(**_known(RequestReplyTest, table, "test"))
        if kind == "request-reply":
            return base
    else:
        base_fields = _known(FixedRateTest, table, "test")
        if kind == "unbounded":
            return UnboundedTest(**base_fields)
        base = FixedRateTest(**base_fields)
        if kind == "fixed-rate":
            return base
    cls = {"incremental": IncrementalTest, "search": SearchTest, "repeated": RepeatedTest, "sweep": SweepTest}[kind]
    if not series:
        raise DefinitionError(f"a {kind} test needs a [{kind}] table")
    return cls(base=base, **_known(cls, series, f"[{kind}]"))


def read_test_file(path: Path) -> tuple[dict[str, Any], str]:
    """The table a test file declares (its `kind` in it), and the file's text."""
    try:
        text = path.read_text()
        return tomllib.loads(text), text
    except OSError as exc:
        raise DefinitionError(f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(f"{path}: not valid TOML: {exc}") from exc


def load_test_file(path: Path, overrides: Mapping[str, Any] | None = None) -> tuple[TestDefinition, str]:
    """The test a file declares, with `overrides` (a table of the same shape: the command
    line's flags) over its values, and the file's text (stored with the results)."""
    table, text = read_test_file(path)
    overrides = overrides or {}
    # A time and a message count are one bound: the command line's replaces the file's.
    for given, other in (("count", "duration"), ("duration", "count")):
        if given in overrides and other not in overrides:
            table.pop(other, None)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            table[key] = table[key] | value  # options, labels, fail, a series' table: key by key
        else:
            table[key] = value
    kind = table.pop("kind", "fixed-rate")
    try:
        return build_test(kind, table), text
    except (DefinitionError, TypeError) as exc:
        raise DefinitionError(f"{path}: {exc}") from exc
