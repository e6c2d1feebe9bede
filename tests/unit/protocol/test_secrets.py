"""URL passwords are replaced wherever they occur; nothing else changes."""

from __future__ import annotations

from pathlib import Path

from protocol.secrets import exposed, redact, redact_text


def test_passwords_in_urls_are_replaced_and_the_rest_kept() -> None:
    assert (
        redact_text("amqp://guest:s3cr%40t@host:5672/q?confirms=true") == "amqp://guest:***@host:5672/q?confirms=true"
    )
    assert redact_text("amqp10s://u:p@h//queue/q") == "amqp10s://u:***@h//queue/q"
    # Several in one string (a URL list, a log line, an inspector spec), and a user without one.
    text = "rabbitmq=http://admin:pw1@a:15672,kafka://b:9092/t mqtt://u:pw2@c mqtt://only-user@d"
    assert redact_text(text) == "rabbitmq=http://admin:***@a:15672,kafka://b:9092/t mqtt://u:***@c mqtt://only-user@d"
    assert redact_text("no url here: a:b@c") == "no url here: a:b@c"
    # A literal @ in a password (it should be %40): the whole of it goes, as urlsplit reads it.
    assert redact_text("mqtt://u:p@ss@host:1883") == "mqtt://u:***@host:1883"
    assert redact_text("amqp://u:p@1@h1,amqp://u:p2@h2") == "amqp://u:***@h1,amqp://u:***@h2"


def test_structures_are_walked_whole() -> None:
    options = {"send_url": ["amqp://u:pw@h/q"], "inspectors": ("rabbitmq=http://u:pw@h:15672",), "rate": 5}
    assert redact(options) == {
        "send_url": ["amqp://u:***@h/q"],
        "inspectors": ("rabbitmq=http://u:***@h:15672",),
        "rate": 5,
    }
    assert redact({"nested": {"deeper": [{"url": "kafkas://a:b@c/t"}]}}) == {
        "nested": {"deeper": [{"url": "kafkas://a:***@c/t"}]}
    }


def test_a_secret_is_exposed_on_a_command_line_or_in_a_file_others_read(tmp_path: Path) -> None:
    assert exposed("pw", ["--broker", "mqtt://u:pw@h", "--name", "w1"]) == (
        "is on the command line, where ps shows it to every user of this host"
    )
    assert exposed("pw", ["--broker=mqtt://u:pw@h"]) is not None
    args = tmp_path / "w1.args"
    args.write_text("--broker\nmqtt://u:pw@h\n")
    args.chmod(0o644)
    assert (
        exposed("pw", [f"@{args}", "--name", "w1"])
        == f"is in {args}, which others may read (mode 0644): chmod 600 {args}"
    )
    args.chmod(0o600)
    assert exposed("pw", [f"@{args}", "--name", "w1"]) is None
    other = tmp_path / "other.args"
    other.write_text("--name\nw1\n")
    other.chmod(0o644)  # holds no secret: its mode is its owner's business
    assert exposed("pw", [f"@{other}", "--log-level", "info"]) is None
    assert exposed("pw", ["@/no/such/file"]) is None  # argparse says what is wrong with it


def test_a_secret_is_exposed_in_an_at_file_that_an_at_file_names(tmp_path: Path) -> None:
    """The Ansible role's NAME.args says `--broker @NAME.broker`, and argparse reads both."""
    args, url_file = tmp_path / "w1.args", tmp_path / "w1.broker"
    args.write_text(f"--broker\n@{url_file}\n--name\nw1\n")
    url_file.write_text("mqtt://u:pw@h\n")
    args.chmod(0o600)
    url_file.chmod(0o640)
    assert exposed("pw", [f"@{args}"]) == f"is in {url_file}, which others may read (mode 0640): chmod 600 {url_file}"
    url_file.chmod(0o600)
    assert exposed("pw", [f"@{args}"]) is None
    args.write_text(f"@{args}\n")  # a file naming itself: argparse refuses it; this must still end
    assert exposed("pw", [f"@{args}"]) is None
