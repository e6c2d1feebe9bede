"""The coordinator: the Python API for test scripts, test executors, and the `maestro` CLI."""

from coordinator.maestro import Maestro, MaestroError, PeerRequestError, Target
from coordinator.registry import PeerInfo, PeerState

__all__ = ["Maestro", "MaestroError", "PeerInfo", "PeerRequestError", "PeerState", "Target"]
