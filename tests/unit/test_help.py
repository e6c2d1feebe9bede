"""#40: every flag of every command has help text that says what it is and, where it has one,
its default; `maestro demo --help` named a --local it does not have."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence

import pytest

import agent.main
import inspector.main
import reports.cli
import worker.main
from coordinator.cli.main import build_parser


class _ParsedError(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(main: Callable[[Sequence[str]], int], monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser a command's main builds: caught where it would read the command line."""

    def caught(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _ParsedError(self)

    with monkeypatch.context() as patched:
        patched.setattr(argparse.ArgumentParser, "parse_known_args", caught)
        patched.setattr(argparse.ArgumentParser, "parse_args", caught)
        with pytest.raises(_ParsedError) as parsed:
            main([])
    return parsed.value.parser


def _actions(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield path, action


def _unsaid(parser: argparse.ArgumentParser, path: str) -> list[str]:
    found = []
    for where, action in _actions(parser, path):
        name = f"{where} {'/'.join(action.option_strings) or action.dest}"
        text = (action.help or "").strip()
        if not text or text.startswith("(default"):
            found.append(f"{name}: no help text")
        elif action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
            found.append(f"{name}: its default {action.default!r} is not said")
    return found


@pytest.mark.parametrize(
    "command, main",
    [
        ("maestro", lambda argv: build_parser().parse_args(argv)),
        ("maestro (reports)", reports.cli.main),
        ("maestro-worker", worker.main.main),
        ("maestro-inspector", inspector.main.main),
        ("maestro-agent", agent.main.main),
    ],
)
def test_every_flag_says_what_it_is_and_its_default(
    command: str, main: Callable[[Sequence[str]], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _unsaid(_parser_of(main, monkeypatch), command) == []


def test_demo_help_names_no_flag_it_does_not_have() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    demo = commands.choices["demo"]
    flags = {flag for action in demo._actions for flag in action.option_strings}
    said = demo.format_help()
    named = {word.strip("(),.;:") for word in said.split() if word.startswith("--")}
    assert named <= flags, named - flags
