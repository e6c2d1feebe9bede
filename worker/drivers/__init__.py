"""Messaging clients behind one interface (`base.Driver`), chosen by URL scheme.

Drivers import their client library only when chosen, so a worker that sends over MQTT never
loads librdkafka or proton.
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from protocol.options import OptionError
from protocol.schemes import SUT_SCHEMES
from worker.drivers.base import Driver, Endpoint

__all__ = ["driver_class", "driver_for_client", "parse_endpoint"]


def driver_class(url: str, option_name: str = "url") -> type[Driver]:
    scheme = urlsplit(url).scheme
    known = SUT_SCHEMES.get(scheme)
    if known is None:
        raise OptionError(
            option_name, f"{scheme or 'a URL without a scheme'}: no driver (known: {', '.join(SUT_SCHEMES)})"
        )
    module, name = known.driver.split(":")
    cls: type[Driver] = getattr(importlib.import_module(module), name)
    return cls


def parse_endpoint(url: str, option_name: str = "url") -> tuple[type[Driver], Endpoint]:
    cls = driver_class(url, option_name)
    return cls, cls.parse(url, option_name)


def driver_for_client(urls: list[str], option_name: str, client: int) -> Driver:
    """Client number `client`'s driver: the URLs taken round robin (a cluster's nodes)."""
    cls, endpoint = parse_endpoint(urls[client % len(urls)], option_name)
    return cls(endpoint, client)
