"""What a test script declares: plain dataclasses, checked when made.

    FixedRateTest(send_url="amqp://sut:5672/q", rate=1000, size=256, parallel=5, duration="10m")

A fixed-rate test (`coordinator.definitions.fixed_rate`) is one phase of load; the other kinds
(`coordinator.definitions.series_tests`) are made of phases of one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.definitions.fixed_rate import Action, DefinitionError, Fail, FixedRateTest, Flow, UnboundedTest
from coordinator.definitions.request_reply import RequestReplyTest
from coordinator.definitions.series_tests import IncrementalTest, RepeatedTest, SearchTest, SweepTest

__all__ = [
    "Action",
    "DefinitionError",
    "Fail",
    "FixedRateTest",
    "Flow",
    "IncrementalTest",
    "RepeatedTest",
    "RequestReplyTest",
    "SearchTest",
    "SweepTest",
    "TestDefinition",
    "UnboundedTest",
    "to_dict",
]

TestDefinition = FixedRateTest | IncrementalTest | SearchTest | RepeatedTest | SweepTest


def to_dict(test: TestDefinition) -> dict[str, Any]:
    """The definition as stored with the results (test.json)."""
    return {"kind": test.KIND, **dataclasses.asdict(test)}
