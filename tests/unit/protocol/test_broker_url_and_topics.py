from __future__ import annotations

from pathlib import Path

import pytest

from protocol.broker_url import BrokerUrl, BrokerUrlError
from protocol.codes import Role
from protocol.topics import Topics


def test_plain_url_defaults_the_port() -> None:
    url = BrokerUrl.parse("mqtt://lab-broker")
    assert (url.host, url.port, url.tls, url.username) == ("lab-broker", 1883, False, None)


def test_credentials_and_tls_come_from_the_url() -> None:
    url = BrokerUrl.parse("mqtts://maestro:s%40cret@broker.lab:9883?ca=/etc/ca.pem&insecure=true")
    assert (url.host, url.port, url.tls) == ("broker.lab", 9883, True)
    assert (url.username, url.password) == ("maestro", "s@cret")
    assert url.ca_file == "/etc/ca.pem"
    assert url.insecure
    assert BrokerUrl.parse("mqtts://h").port == 8883


def test_the_password_never_shows() -> None:
    url = BrokerUrl.parse("mqtt://u:hunter2@h:1883")
    assert "hunter2" not in str(url)
    assert "hunter2" not in repr(url)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("http://h:1883", "scheme must be mqtt:// or mqtts://"),
        ("mqtt://:1883", "names no host"),
        ("mqtt://h:99999", "out of range"),
        ("mqtt://h/x", "path is not allowed"),
        ("mqtt://h?ca=/x", "need mqtts://"),
        ("mqtts://h?colour=red", "unknown option 'colour'"),
        ("mqtt://u:hunter2@h:x", "***"),
    ],
)
def test_bad_urls(text: str, fragment: str) -> None:
    with pytest.raises(BrokerUrlError) as caught:
        BrokerUrl.parse(text)
    assert fragment in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_topics_follow_maestro_1_5() -> None:
    t = Topics()
    assert t.maestro == "/mpt/maestro"
    assert t.notifications == "/mpt/notifications"
    assert t.everyone == "/mpt/peer"
    assert t.workers == "/mpt/peer/worker"
    assert t.by_id("abc") == "/mpt/peer/by-id/abc"
    assert t.by_name("node1", "w1") == "/mpt/peer/by-name/node1/w1"
    assert t.by_role(Role.SENDER) == "/mpt/peer/by-role/sender"
    assert Topics("/lab2").by_role(Role.AGENT) == "/lab2/peer/by-role/agent"


@pytest.mark.parametrize("name", ["w/1", "w+", "#", "", "a b"])
def test_names_cannot_change_the_topic_shape(name: str) -> None:
    with pytest.raises(ValueError):
        Topics().by_name("host", name)


@pytest.mark.parametrize("prefix", ["", "/mpt/", "/mpt/#", "/a+b"])
def test_bad_prefixes(prefix: str) -> None:
    with pytest.raises(ValueError):
        Topics(prefix)


def test_an_at_file_holds_the_url_readable_by_its_owner_only(tmp_path: Path) -> None:
    """`@FILE`, as $MAESTRO_BROKER or --broker: the Ansible role's way to give a coordinator the
    control broker's password without an environment file that others read."""
    url_file = tmp_path / "coordinator.broker"
    url_file.write_text("mqtt://maestro:hunter2@broker.lab:1884\n")
    url_file.chmod(0o600)
    url = BrokerUrl.parse(f"@{url_file}")
    assert (url.host, url.port, url.username, url.password) == ("broker.lab", 1884, "maestro", "hunter2")
    url_file.chmod(0o644)
    with pytest.raises(BrokerUrlError, match=r"may be read by others \(mode 0644\)") as caught:
        BrokerUrl.parse(f"@{url_file}")
    assert "hunter2" not in str(caught.value)
    with pytest.raises(BrokerUrlError, match="cannot read"):
        BrokerUrl.parse(f"@{tmp_path / 'missing'}")
    url_file.write_text(f"@{url_file}\n")
    url_file.chmod(0o600)
    with pytest.raises(BrokerUrlError, match="names another file"):
        BrokerUrl.parse(f"@{url_file}")
