"""The docs' command lines carry tags `make docs-check` reads (`tools/docs_lines.py`), and its
verdicts: a `cpu` line must succeed within 1.5 × its stated time and leave what it names; a line
that needs what CI lacks must fail fast in one line."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from spanlift.cli import parser
from spanlift.cli.nowcast import result_experiment
from tests.cli_run import ROOT
from tools.docs_check import Ran, cpu_problems, missing_problem, named_paths, slow
from tools.docs_lines import DocLine, doc_lines, seconds


def write_doc(tmp_path: Path, block: str) -> tuple[list[DocLine], list[str]]:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(f"# t\n\n```bash\n{block}\n```\n")
    return doc_lines(tmp_path)


def test_every_command_line_of_the_docs_carries_a_tag():
    lines, errors = doc_lines(ROOT)
    assert not errors, "\n".join(errors)
    assert any(line.kind == "cpu" and line.python for line in lines)  # the README's Python tour
    assert len([line for line in lines if line.kind == "cpu"]) >= 10


def test_a_line_with_no_tag_is_an_error_naming_it(tmp_path):
    lines, errors = write_doc(tmp_path, "spanlift solvers   # every solver\nmake demo  # [cpu]")
    no_tag = "no tag such as `# [cpu · 5 s]` at the end of"
    assert errors == [f"README.md:4: {no_tag}: spanlift solvers"]
    assert [(line.where, line.command, line.kind) for line in lines] == [
        ("README.md:5", "make demo", "cpu")
    ]


def test_a_tag_reads_its_kind_and_stated_time_and_continuations_join(tmp_path):
    block = "time make demo  # a demo [cpu · 2 min 39 s]\nspanlift fit \\\n  --nfe 3  # [long]"
    lines, errors = write_doc(tmp_path, block)
    assert not errors
    assert [(ln.where, ln.kind, ln.stated) for ln in lines] == [
        ("README.md:4", "cpu", 159.0),
        ("README.md:5", "long", None),
    ]
    assert lines[1].command.split() == ["spanlift", "fit", "--nfe", "3"]


@pytest.mark.parametrize(
    ("block", "wrong"),
    [
        ("spanlift solvers  # takes 5 s [cpu]", "a time outside the tag"),
        ("spanlift solvers  # [fast]", "unknown tag [fast]"),
        ("spanlift solvers  # [cpu · soon]", "'soon' is not a time"),
    ],
)
def test_a_time_outside_the_tag_or_an_unknown_tag_is_an_error(tmp_path, block, wrong):
    _, errors = write_doc(tmp_path, block)
    assert len(errors) == 1 and wrong in errors[0]


def test_times_read_as_the_docs_write_them():
    assert seconds("52 s") == 52 and seconds("7 min 48 s") == 468 and seconds("1 h") == 3600
    with pytest.raises(ValueError):
        seconds("~45 min")


def test_a_cpu_line_fails_over_its_stated_time_or_when_what_it_names_is_missing(tmp_path):
    line = DocLine("README.md:1", "spanlift leaderboard --plot out/board.png", "cpu", 10.0)
    assert slow(15.0, 10.0, 1.5) == "" and slow(15.1, 10.0, 1.5) != ""
    ran = Ran(0, 12.0, "", "")
    assert cpu_problems(line, ran, tmp_path, 1.5) == ["out/board.png does not exist after it"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "board.png").write_bytes(b"")
    assert cpu_problems(line, ran, tmp_path, 1.5) == []
    assert cpu_problems(line, Ran(0, 16.0, "", ""), tmp_path, 1.5)[0].startswith("took 16 s")
    assert cpu_problems(line, Ran(2, 1.0, "", "spanlift: error: x\n"), tmp_path, 1.5) == [
        "exit status 2: spanlift: error: x"
    ]


def test_named_paths_are_the_words_that_name_files():
    line = "spanlift export --solver ipndm --nfe 5 --to diffusers schedulers/x --set a=b/c"
    assert named_paths(line) == ["schedulers/x"]
    assert named_paths("spanlift analyze ratio --checkpoint runs/*.pt") == []


def test_a_line_needing_what_ci_lacks_must_fail_fast_in_one_line_naming_it():
    one_line = Ran(2, 3.0, "", "· loading\nspanlift: error: --device cuda: no CUDA device\n")
    assert missing_problem(one_line, "gpu") == ""
    assert missing_problem(Ran(1, 3.0, "FAIL  Ray  no Ray cluster at auto\n", ""), "cluster") == ""
    assert "exit status 0" in missing_problem(Ran(0, 3.0, "", ""), "gpu")
    traceback = "Traceback (most recent call last):\n  File x\nRuntimeError: no driver\n"
    assert "a traceback" in missing_problem(Ran(1, 3.0, "", traceback), "gpu")
    assert "within" in missing_problem(Ran(None, 125.0, "", ""), "weights")
    assert "no error line" in missing_problem(Ran(1, 3.0, "done\n", ""), "weights")
    other = Ran(2, 3.0, "", "spanlift: error: this sweep already ran at runs/sweeps/demo\n")
    assert "does not name the missing cluster" in missing_problem(other, "cluster")


def recorded_experiment(command: str) -> str | None:
    """The experiment a documented `nowcast eval` or `sweep` line records its runs in."""
    words = shlex.split(command)[1:]
    if words[:2] == ["nowcast", "eval"]:
        return result_experiment(parser().parse_args(words))
    if words[:1] == ["sweep"]:
        return yaml.safe_load((ROOT / words[1]).read_text())["experiment"]
    return None


def test_a_nowcast_leaderboard_line_names_an_experiment_a_line_above_it_records():
    lines, _ = doc_lines(ROOT)
    recorded: dict[str, set[str]] = {}
    named = 0
    for line in lines:
        document = line.where.split(":")[0]
        if line.python or not line.command.startswith("spanlift "):
            continue
        found = re.findall(r"--experiment (nowcast\S*)", line.command)
        named_experiment = found[0] if found else None
        if line.command.startswith("spanlift leaderboard") and named_experiment:
            named += 1
            assert named_experiment in recorded.get(document, set()), line.where
        made = recorded_experiment(line.command)
        if made:
            recorded.setdefault(document, set()).add(made)
    assert named >= 2
