"""Every `spanlift …` command line in README.md and docs/ names options that exist: the lines in
code blocks parse as they are printed (nothing runs), and each option of an inline one, written in
full, belongs to its command."""

import re
import shlex

import pytest

from spanlift.cli import parser
from spanlift.cli.options import CommandParser
from tests.cli_run import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", flags=re.DOTALL)
INLINE = re.compile(r"`(spanlift [^`]+)`")


STARTS = re.compile(r"^(?:\$ )?(?:.* --\s+)?(spanlift .*)$")
"""A command line of a code block: `spanlift …`, or a launcher's `… -- spanlift …`."""


def block_lines(text: str) -> list[str]:
    """`spanlift …` lines of the code blocks, continuation lines joined."""
    lines = []
    for block in BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            found = STARTS.match(line.strip())
            if found:
                lines.append(found.group(1))
    return lines


def words(line: str) -> list[str]:
    """The arguments of a printed command: a shell substitution, optional brackets and a
    comment left out."""
    line = re.sub(r"\$\([^)]*\)", "", line)
    line = re.sub(r"\[([^\]]*)\]", r"\1", line)
    return shlex.split(line, comments=True)[1:]


def commands() -> list[tuple[str, str, bool]]:
    """(where, command line, printed in a code block) of every documented command line."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        name = path.relative_to(ROOT)
        found += [(f"{name}", line, True) for line in block_lines(text)]
        found += [(f"{name}", " ".join(m.split()), False) for m in INLINE.findall(text)]
    return found


def command_parser(argv: list[str]) -> CommandParser:
    """The parser of the (sub)command `argv` names, its options added."""
    current = parser()
    for word in argv:
        choices = next(
            (a.choices for a in current._actions if a.choices and isinstance(a.choices, dict)),
            None,
        )
        if not choices or word not in choices:
            break
        current = choices[word]
    return current.with_options() if isinstance(current, CommandParser) else current


@pytest.mark.parametrize(("where", "line", "whole"), commands(), ids=lambda v: str(v)[:60])
def test_a_documented_command_line_parses(where, line, whole):
    argv = words(line)
    known = command_parser(argv)._option_string_actions
    unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{where}: {line}: no option {', '.join(unknown)}"
    if whole:
        try:
            parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{where}: {line}: does not parse (status {exc.code})")
