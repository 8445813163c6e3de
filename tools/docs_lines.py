"""The command lines of README.md and docs/*.md, and the tag each carries.

A command line is a line of a fenced code block whose first word (after `$ ` or `time `) is
`spanlift`, `make` or `python`, continuation lines joined; a ```python block is one command. Each
ends in a shell comment whose last words are its tag (a Python block's first line carries it):

    spanlift solvers          # every registered solver  [cpu · 5 s]

    cpu            runs on a CPU in CI's time: `make docs-check` runs it and checks it
    long           runs on a CPU, longer than CI affords: skipped, the reason printed
    gpu            needs a CUDA device      } run, and checked to fail fast in one line
    weights        needs files not shipped  } naming what is missing (a Python block:
    cluster        needs a cluster or server} skipped)
    after KIND     reads what a line of kind KIND above records: skipped
    sketch         a form to adapt (a synopsis, a template): not run

`· TIME` (`45 s`, `2 min 39 s`, `1 h 5 min`) is the time the docs state for it; a time stated
anywhere else in the line's comment is an error, as is a line with no tag.
"""

import re
from dataclasses import dataclass
from pathlib import Path

NEEDS = ("gpu", "weights", "cluster")
KINDS = ("cpu", "long", *NEEDS, "sketch", *(f"after {k}" for k in ("long", *NEEDS)))
TAG = re.compile(r"\[(?P<kind>[a-z ]+?)(?: · (?P<time>[^\]]+))?\]\s*$")
DURATION = re.compile(r"^(?:(\d+) h)? ?(?:(\d+) min)? ?(?:(\d+) s)?$")
STATED_TIME = re.compile(r"\d\s*(?:s|min|h)\b")
FENCE = re.compile(r"^\s*```(\w*)\s*$")
COMMAND = re.compile(r"^(?:\$ )?(?:time )?(spanlift|make|python)(?:\s|$)")
SHELL_BLOCKS = ("", "bash", "sh", "console")


@dataclass(frozen=True)
class DocLine:
    where: str
    """`README.md:130`: the document and the line the command starts on."""
    command: str
    """The line as a shell runs it (continuations joined), or a Python block's source."""
    kind: str
    stated: float | None
    """Seconds the docs state it takes, or None."""
    python: bool = False


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def seconds(text: str) -> float:
    """`2 min 39 s` → 159.0; a ValueError for anything else."""
    found = DURATION.match(text.strip())
    if not text.strip() or not found:
        raise ValueError(f"{text!r} is not a time such as `45 s` or `2 min 39 s`")
    hours, minutes, secs = (int(g or 0) for g in found.groups())
    return 3600.0 * hours + 60.0 * minutes + secs


def split_comment(line: str) -> tuple[str, str]:
    """(`line` before its shell comment, the comment): a `#` at the start or after a space,
    outside quotes, begins it."""
    quote = ""
    for i, char in enumerate(line):
        if char in "'\"" and not quote:
            quote = char
        elif char == quote:
            quote = ""
        elif char == "#" and not quote and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :]
    return line.rstrip(), ""


def tagged(where: str, command: str, comment: str, python: bool = False) -> DocLine:
    """The DocLine of `command` from its comment; a ValueError naming `where` when the tag is
    missing or wrong, or a time is stated outside it."""
    found = TAG.search(comment)
    if not found:
        first = command.splitlines()[0] if command else ""
        raise ValueError(f"{where}: no tag such as `# [cpu · 5 s]` at the end of: {first}")
    kind, time = found.group("kind"), found.group("time")
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown tag [{kind}]; the tags are {', '.join(KINDS)}")
    if STATED_TIME.search(comment[: found.start()]):
        raise ValueError(f"{where}: a time outside the tag; state it as [{kind} · TIME]")
    try:
        stated = seconds(time) if time else None
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return DocLine(where, command, kind, stated, python)


def joined(lines: list[str], start: int) -> list[tuple[int, str]]:
    """(number of its first line, the line) of each shell line, continuations joined."""
    found, pending, first = [], "", start
    for number, line in enumerate(lines, start):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        found.append((first, (pending + line).strip()))
        pending = ""
    return found


def block_commands(name: str, lines: list[str], start: int) -> tuple[list[DocLine], list[str]]:
    """The command lines of the shell block whose first line is line `start` of `name`, and the
    errors of those not tagged right."""
    found, errors = [], []
    for number, line in joined(lines, start):
        if COMMAND.match(line):
            try:
                found.append(tagged(f"{name}:{number}", *split_comment(line)))
            except ValueError as error:
                errors.append(str(error))
    return found, errors


def python_command(name: str, lines: list[str], start: int) -> DocLine:
    """A ```python block as one command: its first line carries the tag."""
    source = "\n".join(lines) + "\n"
    comment = split_comment(lines[0])[1] if lines else ""
    return tagged(f"{name}:{start}", source, comment, python=True)


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, number of the block's first line, its lines) of every fenced block."""
    blocks, language, opened, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, opened, body = fence.group(1), number + 1, []
        elif line.strip() == "```" and language is not None:
            blocks.append((language, opened, body))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def doc_lines(root: Path) -> tuple[list[DocLine], list[str]]:
    """Every tagged command of the docs, in order, and the errors of those not tagged right."""
    found, errors = [], []
    for path in documents(root):
        name = str(path.relative_to(root))
        for language, start, body in fenced_blocks(path.read_text()):
            if language in SHELL_BLOCKS:
                commands, wrong = block_commands(name, body, start)
                found, errors = found + commands, errors + wrong
            elif language == "python":
                try:
                    found.append(python_command(name, body, start))
                except ValueError as error:
                    errors.append(str(error))
    return found, errors
