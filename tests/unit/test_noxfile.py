"""noxfile.py's command sessions against the CLI: one per command, each named as it is used."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from sparkbake import __main__ as cli

NOXFILE = Path(__file__).parents[2] / "noxfile.py"


def commands() -> dict[str, tuple[str, str]]:
    """noxfile.COMMANDS, read without importing nox."""
    tree = ast.parse(NOXFILE.read_text())
    [value] = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "COMMANDS" for t in node.targets)]
    found: dict[str, tuple[str, str]] = ast.literal_eval(value)
    return found


def subparsers() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_has_a_session_and_every_session_a_command() -> None:
    assert list(commands()) == list(subparsers())


def test_a_session_names_the_arguments_its_command_takes() -> None:
    for name, parser in subparsers().items():
        arguments, what = commands()[name]
        for action in parser._actions:
            if action.option_strings:
                if action.required:
                    assert action.option_strings[0] in arguments, (name, action.dest)
            elif action.choices:
                assert any(str(choice) in arguments for choice in action.choices), name
            else:
                assert str(action.metavar or action.dest).lower() in arguments.lower(), \
                    (name, action.dest)
        assert what and not what.endswith("."), name
