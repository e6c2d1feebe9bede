"""The coordinator: the Python API for test scripts, test executors, and the `maestro` CLI."""

from coordinator.bus.client import Target
from coordinator.definitions import (
    AbaTest,
    Action,
    Fail,
    FixedRateTest,
    Flow,
    IncrementalTest,
    RequestReplyTest,
    UnboundedTest,
)
from coordinator.errors import MaestroError, PeerRequestError
from coordinator.outcome.results import TestResult
from coordinator.registry import PeerInfo, PeerState
from coordinator.running.maestro import Maestro

__all__ = [
    "AbaTest",
    "Action",
    "Fail",
    "FixedRateTest",
    "Flow",
    "IncrementalTest",
    "Maestro",
    "MaestroError",
    "PeerInfo",
    "PeerRequestError",
    "PeerState",
    "RequestReplyTest",
    "Target",
    "TestResult",
    "UnboundedTest",
]
