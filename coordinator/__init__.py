"""The coordinator: the Python API for test scripts, test executors, and the `maestro` CLI."""

from coordinator.definitions import Action, Fail, FixedRateTest, Flow, IncrementalTest, UnboundedTest
from coordinator.executor import TestResult
from coordinator.maestro import Maestro, MaestroError, PeerRequestError, Target
from coordinator.registry import PeerInfo, PeerState

__all__ = [
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
    "Target",
    "TestResult",
    "UnboundedTest",
]
