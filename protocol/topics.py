"""The MQTT topic scheme of Maestro Java 1.5, under a configurable prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass

from protocol.codes import Role

__all__ = ["DEFAULT_PREFIX", "Topics", "check_topic_word"]

DEFAULT_PREFIX = "/mpt"

# A name or host becomes one level of a topic: MQTT wildcards and separators would change
# which peers a note reaches.
_WORD = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


def check_topic_word(value: str, what: str) -> str:
    if not _WORD.match(value):
        raise ValueError(f"{what} {value!r} may only hold letters, digits and . _ : @ - (1 to 128 of them)")
    return value


@dataclass(frozen=True)
class Topics:
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix or self.prefix.endswith("/") or any(c in self.prefix for c in "+#\0"):
            raise ValueError(f"topic prefix {self.prefix!r} must be non-empty, without wildcards or a trailing /")

    @property
    def maestro(self) -> str:
        """Responses to the coordinator."""
        return f"{self.prefix}/maestro"

    @property
    def notifications(self) -> str:
        return f"{self.prefix}/notifications"

    @property
    def coordinator(self) -> str:
        """The coordinator's presence: PEER_ONLINE when it (re)connects, its last will when it
        vanishes; every peer listens."""
        return f"{self.prefix}/coordinator"

    @property
    def everyone(self) -> str:
        return f"{self.prefix}/peer"

    @property
    def workers(self) -> str:
        return f"{self.prefix}/peer/worker"

    def by_id(self, peer_id: str) -> str:
        return f"{self.prefix}/peer/by-id/{check_topic_word(peer_id, 'peer id')}"

    def by_name(self, host: str, name: str) -> str:
        return f"{self.prefix}/peer/by-name/{check_topic_word(host, 'host')}/{check_topic_word(name, 'name')}"

    def by_role(self, role: Role) -> str:
        return f"{self.prefix}/peer/by-role/{role.value}"
