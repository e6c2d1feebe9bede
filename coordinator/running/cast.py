"""Who plays in a test: chosen once per test from the live peers (a series keeps its cast)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.bus.client import MaestroClient
from coordinator.definitions import FixedRateTest
from coordinator.errors import MaestroError
from coordinator.registry import PeerInfo, PeerState
from protocol.codes import Role

__all__ = ["Cast"]


@dataclass
class Cast:
    """Who plays in a test: per flow its senders and receivers; inspectors and agents."""

    flows: list[tuple[list[PeerInfo], list[PeerInfo]]]
    inspectors: list[tuple[PeerInfo, str, str]]  # peer, inspector name, management URL
    agents: list[PeerInfo]

    @property
    def senders(self) -> list[PeerInfo]:
        return [p for senders, _ in self.flows for p in senders]

    @property
    def receivers(self) -> list[PeerInfo]:
        return [p for _, receivers in self.flows for p in receivers]

    @property
    def inspector_peers(self) -> list[PeerInfo]:
        return list({p.peer_id: p for p, _, _ in self.inspectors}.values())

    @property
    def everyone(self) -> list[PeerInfo]:
        return [*self.receivers, *self.senders, *self.inspector_peers, *self.agents]

    @classmethod
    def choose(cls, maestro: MaestroClient, test: FixedRateTest, timeout_s: float = 10.0) -> Cast:
        """Workers that have the role already, then idle workers given it (ROLE_ASSIGN)."""
        flows = test.all_flows()
        wanted_senders = sum(f.senders for f in flows)
        wanted_receivers = sum(f.receivers for f in flows)
        everyone = maestro.registry.live()
        # A worker that runs a test already (another coordinator's, or one left running) is busy.
        busy = [p for p in everyone if p.role.is_worker and p.state == PeerState.RUNNING]
        live = [p for p in everyone if p not in busy]
        pools = {role: [p for p in live if p.role == role] for role in (Role.SENDER, Role.RECEIVER, Role.OTHER)}
        missing_senders = max(0, wanted_senders - len(pools[Role.SENDER]))
        missing_receivers = max(0, wanted_receivers - len(pools[Role.RECEIVER]))
        if missing_senders + missing_receivers > len(pools[Role.OTHER]):
            raise MaestroError(
                f"the test needs {wanted_senders} senders and {wanted_receivers} receivers; live are "
                f"{len(pools[Role.SENDER])} senders, {len(pools[Role.RECEIVER])} receivers and "
                f"{len(pools[Role.OTHER])} role-less workers"
                + (f"; busy with another test: {', '.join(f'{p.label} ({p.test_id})' for p in busy)}" if busy else "")
            )
        if missing_senders or missing_receivers:
            assigned = maestro.assign_roles(missing_senders, missing_receivers, timeout_s)
            pools[Role.SENDER] += assigned[Role.SENDER]
            pools[Role.RECEIVER] += assigned[Role.RECEIVER]
        cast_flows = []
        for flow in flows:
            senders = [pools[Role.SENDER].pop(0) for _ in range(flow.senders)]
            receivers = [pools[Role.RECEIVER].pop(0) for _ in range(flow.receivers)]
            cast_flows.append((senders, receivers))
        inspectors = []
        inspector_peers = [p for p in live if p.role == Role.INSPECTOR]
        for number, spec in enumerate(test.inspectors):
            name, _, url = spec.partition("=")
            if not inspector_peers:
                raise MaestroError(f"inspector {name}: no live inspector peer to run it")
            # Several inspectors share the inspector peers round robin (one peer can run several).
            inspectors.append((inspector_peers[number % len(inspector_peers)], name, url))
        names = dict.fromkeys([*test.agents, *(a.agent for a in test.actions)])
        agents = [maestro.find(name) for name in names]
        return cls(cast_flows, inspectors, agents)
