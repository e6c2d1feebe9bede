"""URL passwords are replaced wherever they occur; nothing else changes."""

from __future__ import annotations

from protocol.secrets import redact, redact_text


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
