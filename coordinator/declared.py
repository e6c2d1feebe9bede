"""Tests declared in a TOML file, for `maestro test --file test.toml`:

    kind = "fixed-rate"            # or "unbounded", "incremental"
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

    [[flows]]                      # optional: several send/receive paths (then no send_url)
    send_url = "amqp://sut:5672/a"
    senders = 2

The same names as the Python API (`coordinator.definitions`); an unknown key is refused by name.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from coordinator.definitions import (
    DefinitionError,
    Fail,
    FixedRateTest,
    Flow,
    IncrementalTest,
    TestDefinition,
    UnboundedTest,
)

__all__ = ["build_test", "load_test_file"]

KINDS = ("fixed-rate", "unbounded", "incremental")


def _known(cls: type, table: dict[str, Any], where: str) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise DefinitionError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    return table


def build_test(kind: str, table: dict[str, Any]) -> TestDefinition:
    """A test from plain values (a TOML file's, or the command line's)."""
    if kind not in KINDS:
        raise DefinitionError(f"unknown test kind {kind!r} (known: {', '.join(KINDS)})")
    table = dict(table)
    incremental = table.pop("incremental", None)
    if "fail" in table:
        table["fail"] = Fail(**_known(Fail, table["fail"], "[fail]"))
    if "flows" in table:
        table["flows"] = tuple(Flow(**_known(Flow, f, "[[flows]]")) for f in table["flows"])
    for key in ("inspectors", "agents"):
        if key in table:
            table[key] = tuple(table[key])
    base_fields = _known(FixedRateTest, table, "test")
    if kind == "unbounded":
        return UnboundedTest(**base_fields)
    base = FixedRateTest(**base_fields)
    if kind == "incremental":
        if not incremental:
            raise DefinitionError("an incremental test needs an [incremental] table (initial_rate, ceiling_rate…)")
        steps = _known(IncrementalTest, incremental, "[incremental]")
        return IncrementalTest(base=base, **steps)
    return base


def load_test_file(path: Path) -> tuple[TestDefinition, str]:
    """The test a file declares, and the file's text (stored with the results)."""
    try:
        text = path.read_text()
        table = tomllib.loads(text)
    except OSError as exc:
        raise DefinitionError(f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(f"{path}: not valid TOML: {exc}") from exc
    kind = table.pop("kind", "fixed-rate")
    try:
        return build_test(kind, table), text
    except (DefinitionError, TypeError) as exc:
        raise DefinitionError(f"{path}: {exc}") from exc
