"""The control broker's URL: `mqtt://[user:password@]host[:port][?ca=FILE&insecure=true]`, or
`@FILE` for the URL in FILE (mode 600), so that a password need not be on a command line or in
an environment file others read."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from protocol.secrets import SecretFileError, read_secret_file, redact_text

__all__ = ["BROKER_ENV", "DEFAULT_BROKER_URL", "BrokerUrl", "BrokerUrlError", "default_broker_url"]

DEFAULT_BROKER_URL = "mqtt://127.0.0.1:1883"
# The control broker, when no --broker says (every daemon and `maestro`).
BROKER_ENV = "MAESTRO_BROKER"
_SCHEMES = {"mqtt": (False, 1883), "mqtts": (True, 8883)}
_QUERY_KEYS = {"ca", "cert", "key", "insecure"}


class BrokerUrlError(ValueError):
    pass


def default_broker_url() -> str:
    return os.environ.get(BROKER_ENV, DEFAULT_BROKER_URL)


@dataclass(frozen=True)
class BrokerUrl:
    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure: bool = False  # TLS without certificate verification, for lab brokers with self-signed certs

    def on_loopback(self) -> bool:
        """Whether the broker is on this host's loopback only, where no other host can publish:
        every address its name resolves to is a loopback one (an unresolvable name is not)."""
        try:
            infos = socket.getaddrinfo(self.host, self.port, proto=socket.IPPROTO_TCP)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)

    @classmethod
    def parse(cls, url: str) -> BrokerUrl:
        if url.startswith("@"):
            return cls.parse(_read_url_file(Path(url[1:])))
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise BrokerUrlError(f"control broker URL {redact_text(url)!r}: scheme must be mqtt:// or mqtts://")
        tls, default_port = _SCHEMES[parts.scheme]
        try:
            port = parts.port or default_port
        except ValueError as exc:
            raise BrokerUrlError(f"control broker URL {redact_text(url)!r}: {exc}") from exc
        if not parts.hostname:
            raise BrokerUrlError(f"control broker URL {redact_text(url)!r} names no host")
        if parts.path not in ("", "/"):
            raise BrokerUrlError(f"control broker URL {redact_text(url)!r}: a path is not allowed")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - _QUERY_KEYS)
        if unknown:
            raise BrokerUrlError(
                f"control broker URL: unknown option {unknown[0]!r} (known: {', '.join(sorted(_QUERY_KEYS))})"
            )
        if not tls and set(query) & _QUERY_KEYS:
            raise BrokerUrlError("control broker URL: ca/cert/key/insecure need mqtts://")

        def one(key: str) -> str | None:
            values = query.get(key)
            return values[-1] if values else None

        insecure = (one("insecure") or "false").lower()
        if insecure not in ("true", "false", "1", "0"):
            raise BrokerUrlError(f"control broker URL: insecure must be true or false, got {insecure!r}")
        return cls(
            host=parts.hostname,
            port=port,
            tls=tls,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            ca_file=one("ca"),
            cert_file=one("cert"),
            key_file=one("key"),
            insecure=insecure in ("true", "1"),
        )

    def __str__(self) -> str:
        """The URL without its password, for logs and tables."""
        user = f"{self.username}:***@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"


def _read_url_file(path: Path) -> str:
    try:
        url = read_secret_file(path, "control broker URL").decode()
    except (SecretFileError, UnicodeDecodeError) as exc:
        raise BrokerUrlError(redact_text(str(exc))) from exc
    if url.startswith("@"):
        raise BrokerUrlError(f"the control broker URL file {path} names another file; it must hold the URL")
    return url
