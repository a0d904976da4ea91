"""noxfile.py's command sessions: made from the table of commands, one per command, each
named as it is used, and each described with the arguments its parser requires."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from sparkbake.__main__ import parser
from sparkbake.command_table import COMMANDS

ROOT = Path(__file__).parents[2]
LISTED = re.compile(r"^[*-] (\S+) -> (.*)$")


def sessions() -> dict[str, str]:
    """Each session `nox -l` lists, with its description: what a user sees."""
    ran = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return {match.group(1): match.group(2) for line in ran.stdout.splitlines()
            if (match := LISTED.match(line))}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_is_a_session_described_with_its_help() -> None:
    listed = sessions()
    for command in COMMANDS:
        assert listed[command.name].startswith(f"sparkbake {command.name}"), command.name
        assert listed[command.name].endswith(f": {command.help}"), command.name
    assert [name for name in listed if name in subparsers()] == list(subparsers())


def test_a_session_names_the_arguments_its_command_requires() -> None:
    listed = sessions()
    for name, sub in subparsers().items():
        usage = listed[name].removeprefix(f"sparkbake {name}").partition(": ")[0]
        for action in sub._actions:
            if action.option_strings:
                if action.required:
                    assert action.option_strings[0] in usage, (name, action.dest)
            elif action.choices:
                assert any(str(choice) in usage for choice in action.choices), name
            else:
                assert str(action.metavar or action.dest).lower() in usage.lower(), \
                    (name, action.dest)
