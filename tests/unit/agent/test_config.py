from __future__ import annotations

import signal
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config


def test_a_config_names_what_the_agent_may_touch(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        '[handlers]\ndirectories = ["/opt/h"]\ntimeout_s = 5\n'
        '[services.broker]\nstart = ["mosquitto", "-p", "1884"]\nstop_signal = "int"\n'
        '[services.artemis]\npidfile = "/run/artemis.pid"\n'
    )
    config = load_config(path)
    assert config.handler_dirs == (Path("/opt/h"),) and config.handler_timeout_s == 5
    assert config.services["broker"].start == ("mosquitto", "-p", "1884")
    assert config.services["broker"].stop_signal == signal.SIGINT
    assert config.services["artemis"].pidfile == Path("/run/artemis.pid")
    assert load_config(None).services == {}  # no file: nothing may be touched


def test_proxies_and_networks_are_targets_too(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        '[proxies.sut-proxy]\nlisten = "127.0.0.1:15672"\nupstream = "[::1]:5672"\n'
        '[networks.sut-net]\ninterface = "veth-sut"\nnamespace = "sut"\n'
        '[networks.lan]\ninterface = "eth0"\n'
    )
    config = load_config(path)
    assert config.proxies["sut-proxy"].listen == ("127.0.0.1", 15672)
    assert config.proxies["sut-proxy"].upstream == ("::1", 5672)
    assert (config.networks["sut-net"].interface, config.networks["sut-net"].namespace) == ("veth-sut", "sut")
    assert config.networks["lan"].namespace is None
    assert config.target_names() == ["sut-proxy", "sut-net", "lan"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('[services.b]\nstart = "mosquitto -p 1884"\n', "not a shell line"),
        ("[services.b]\nautostart = true\n", "needs start"),
        ('[services.b]\nstart = ["x"]\ncmd = "y"\n', "unknown key cmd"),
        ('[services.b]\nstart = ["x"]\nstop_signal = "NOPE"\n', "unknown stop_signal"),
        ("[services.b\n", "not valid TOML"),
        ('[proxies.p]\nlisten = "127.0.0.1"\nupstream = "h:1"\n', "expected host:port"),
        ('[proxies.p]\nlisten = "127.0.0.1:1"\n', "needs listen and upstream"),
        ('[networks.n]\ninterface = "eth0; rm -rf /"\n', "not an interface or namespace name"),
        ('[services.s]\nunit = "x.service; reboot"\n', "not a systemd unit name"),
        ('[services.s]\nunit = "--now"\n', "not a systemd unit name"),
        ('[networks.n]\nnamespace = "ns"\n', "needs interface"),
        ('[networks.b]\ninterface = "eth0"\n[services.b]\nstart = ["x"]\n', "b names more than one"),
        ('[network.n]\ninterface = "eth0"\n', "unknown section network"),
    ],
)
def test_bad_configs_are_refused_by_name(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=why):
        load_config(path)
