"""`spanlift leaderboard --format latex` is a table a paper can print: a `table` float with the
protocol in its caption and a label, booktabs rules, display names, symbols in math mode, and it
fits the text width of a one-column `article`, checked by compiling it with pdflatex."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from spanlift.cli import main
from spanlift.platform.tracking.board_format import latex
from spanlift.platform.tracking.entry import Entry

from .mlflow_store import Store
from .test_rankings import errors_of, log_replicate

SCALE = "teacher=ipndm[order=4] nfe=35, teacher.test_seeds=1000000000..1000000255"
PROTOCOL = {
    "teacher": "ipndm[order=4] nfe=35",
    "teacher.train_seeds": "0..1023 (1024)",
    "teacher.validation_seeds": "1024..1279 (256)",
    "teacher.test_seeds": "1000000000..1000000255",
    "fit.iterations": "150",
    "env.dtype": "float32",
    "env.device": "cpu",
    "env.threads": "2",
    "env.commit": "f77c100e0d1e2a3b4c5d",
    "code.version": "7",
}
SPANLIFT = "spanlift[base=dyweight,hidden_dim=32,kernel_size=3,operator=spatial]"
DEMO = [  # the README headline's rows (sweeps/demo_seeds.yaml): solver, configuration, values
    (3, "spanlift", SPANLIFT, 0.1457, 0.0063, 3, "<", (0.858, 0.898), 0.1126, 0.2363),
    (3, "dyweight", "dyweight", 0.1661, 0.0027, 3, "<", (0.707, 0.782), 0.1288, 0.2626),
    (3, "unipc", "unipc[order=3]", 0.2231, None, 1, "<", (0.996, 0.997), 0.1974, 0.3137),
    (
        3,
        "dpm_solver_pp",
        "dpm_solver_pp[order=3]",
        0.2238,
        None,
        1,
        "<",
        (0.891, 0.909),
        0.1986,
        0.3142,
    ),
    (3, "ipndm", "ipndm[order=3]", 0.2487, None, 1, "≈", (0.979, 1.009), 0.2103, 0.3573),
    (3, "euler", "euler", 0.2501, None, 1, "", None, 0.2376, 0.3342),
    (5, "spanlift", SPANLIFT, 0.0744, 0.0032, 3, "<", (0.887, 0.946), 0.0442, 0.1131),
    (5, "dyweight", "dyweight", 0.0808, 0.0004, 3, "<", (0.609, 0.708), 0.0510, 0.1176),
    (5, "unipc", "unipc[order=3]", 0.1224, None, 1, "≈", (0.965, 1.037), 0.0958, 0.1806),
    (5, "ipndm", "ipndm[order=3]", 0.1226, None, 1, "≈", (0.960, 1.017), 0.0713, 0.2064),
    (
        5,
        "dpm_solver_pp",
        "dpm_solver_pp[order=3]",
        0.1239,
        None,
        1,
        "<",
        (0.722, 0.782),
        0.0920,
        0.1912,
    ),
    (5, "euler", "euler", 0.1645, None, 1, "", None, 0.1352, 0.2539),
]
COLUMNS = ("error_median", "error_p90")


def demo_board() -> list[Entry]:
    """The demo's leaderboard as `spanlift leaderboard --experiment demo-seeds` builds it."""
    entries, rank = [], {}
    for nfe, solver, configuration, value, half, n, vs, ratio, median, p90 in DEMO:
        rank[nfe] = rank.get(nfe, 0) + 1
        seeds = "0, 1, 2" if n == 3 else "0"
        entries.append(
            Entry(
                "digits", SCALE, nfe, rank[nfe], solver, configuration, value, runs=n,
                run_id=f"{solver}{nfe}", n=n, half_width=half, vs_next=vs, ratio=ratio,
                columns={"error_median": median, "error_p90": p90},
                protocol={**PROTOCOL, "fit.seed": seeds},
            )
        )  # fmt: skip
    return entries


def compile_latex(table: str, folder: Path) -> str:
    """pdflatex's log of `table` in a one-column `article` with booktabs; fails if it does not
    compile."""
    preamble = [r"\documentclass{article}", r"\usepackage{booktabs}", r"\begin{document}"]
    document = "\n".join([*preamble, table, r"\end{document}", ""])
    (folder / "table.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "table.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (folder / "table.log").read_text(encoding="latin-1")
    assert done.returncode == 0, log[-3000:]
    assert (folder / "table.pdf").exists()
    return log


def overfull(log: str) -> list[float]:
    """The overfull boxes of a log, in pt past their width."""
    return [float(pt) for pt in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]


needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (Debian: apt-get install texlive-latex-recommended): the "
    "LaTeX table is not compiled",
)


def math_free(text: str) -> str:
    """`text` without its inline math."""
    return re.sub(r"\$[^$]*\$", "", text.replace(r"\$", ""))


def test_the_latex_table_is_a_captioned_labelled_float_with_display_names() -> None:
    table = latex(demo_board(), "rmse", COLUMNS, label="tab:demo-seeds")
    assert table.startswith(r"\begin{table}") and table.rstrip().endswith(r"\end{table}")
    assert r"\caption" in table and r"\label{tab:demo-seeds}" in table
    assert r"\toprule" in table and r"\midrule" in table and r"\bottomrule" in table
    assert "SpanLift (on DyWeight)" in table and "DPM-Solver++ (3M)" in table
    assert "UniPC (3)" in table and "iPNDM (3)" in table and "Euler" in table
    assert "$<$" in table and r"$\approx$" in table and r"$\pm$" in table
    body = math_free(table)
    assert "<" not in body and ">" not in body, "< and > print as ¡ and ¿ outside math"
    assert not re.search(r"[^\x00-\x7f]", table), "every symbol is a LaTeX command"
    assert not re.search(r"(?<!\\)[_#%]", body), "every special character is escaped"
    caption = table[table.index(r"\caption") :]
    assert "test seeds: 1000000000..1000000255" in caption and "fit seeds: 0, 1, 2" in caption
    assert "within noise" in caption  # the notes of the marks used, in the caption
    assert SPANLIFT.replace("_", r"\_") not in table  # configuration keys only on request
    shown = latex(demo_board(), "rmse", ("configuration",))
    assert (
        r"\texttt{spanlift[base=dyweight,hidden\_dim=32,kernel\_size=3,operator=spatial]}" in shown
    )


def test_a_sweep_entrys_own_label_and_unknown_solvers_are_shown_as_recorded() -> None:
    entries = [
        Entry("gmm", "", 3, 1, "SpanLift (pooled)", SPANLIFT, 0.1, runs=1, run_id="a"),
        Entry("gmm", "", 3, 2, "diffusers.dpmsolver_sde", "x_y", 0.2, runs=1, run_id="b"),
    ]
    table = latex(entries, "rmse")
    assert "SpanLift (pooled)" in table and r"diffusers.dpmsolver\_sde" in table


def special_entry() -> Entry:
    """A row whose recorded names and values hold every character LaTeX treats specially."""
    protocol = {"teacher": r"a_b & c % d # e $ f {g} ~h ^i \j", "env.device": "cuda:0 × 2 — ok"}
    return Entry("my_net", "", 3, 1, "x_y<z>", "c", 0.1, runs=1, run_id="a", protocol=protocol)


def test_special_characters_in_recorded_values_are_escaped() -> None:
    table = latex([special_entry()], "my_metric")
    assert r"a\_b \& c \% d \# e \$ f \{g\} \textasciitilde{}h \textasciicircum{}i" in table
    assert r"\textbackslash{}j" in table and r"x\_y$<$z$>$" in table and r"$\times$" in table
    assert not re.search(r"[^\x00-\x7f]", table)


@needs_pdflatex
def test_special_characters_compile(tmp_path: Path) -> None:
    log = compile_latex(latex([special_entry()], "my_metric"), tmp_path)
    assert "Overfull \\hbox" not in log, overfull(log)


@needs_pdflatex
def test_the_demo_table_compiles_and_fits_a_one_column_article(tmp_path: Path) -> None:
    """The README headline's leaderboard with its two extra columns: no overfull box."""
    log = compile_latex(latex(demo_board(), "rmse", COLUMNS, label="tab:demo-seeds"), tmp_path)
    assert "Overfull \\hbox" not in log, overfull(log)
    assert "Missing character" not in log


@needs_pdflatex
def test_the_commands_table_compiles_with_every_mark_and_group(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rows from a real MLflow store, two groups (two teachers), a † row and a tie: what
    `spanlift leaderboard --format latex` prints compiles without an overfull box."""
    for seed in (0, 1):
        log_replicate(store, tmp_path, "spanlift", SPANLIFT, seed, errors_of(0.1, seed), 0.1)
        log_replicate(store, tmp_path, "dyweight", "dyweight", seed, errors_of(0.2, seed), 0.2)
    log_replicate(store, tmp_path, "heun", "heun", 0, errors_of(0.3, 0), None)
    log_replicate(store, tmp_path, "heun", "heun[x=1]", 0, errors_of(0.4, 0), None)
    other = {"teacher": "dpm_solver_pp[order=3] nfe=50"}
    log_replicate(store, tmp_path, "euler", "euler", 0, errors_of(0.5, 0), 0.5, **other)
    assert main(store.command("--format", "latex", "--columns", "error_median")) == 0
    table = capsys.readouterr().out
    assert (
        rf"\label{{tab:{store.experiment}}}" in table.replace("_", "-") or r"\label{tab:" in table
    )
    assert "SpanLift (on DyWeight)" in table and "$^\\dagger$" in table
    folder = tmp_path / "tex"
    folder.mkdir()
    log = compile_latex(table, folder)
    assert "Overfull \\hbox" not in log, overfull(log)


def test_a_solvers_display_name_is_what_its_own_file_declares(monkeypatch) -> None:
    """A new solver's title comes from its class (`Solver.title`, `Solver.order_mark`): nothing
    in the leaderboard names it."""
    from spanlift.platform.tracking import display
    from spanlift.solvers import SOLVERS
    from spanlift.solvers.euler import Euler

    class Toy(Euler):
        title, order_mark = "Toy-Solver", "S"

    monkeypatch.setitem(SOLVERS._items, "toy_titled", Toy)
    display.title_of.cache_clear()
    try:
        assert display.display_name("toy_titled", "toy_titled[order=2]") == "Toy-Solver (2S)"
        assert display.display_name("pas", "pas[base=toy_titled]") == "PAS (on Toy-Solver)"
        assert display.display_name("my label") == "my label"  # not registered: as recorded
    finally:
        display.title_of.cache_clear()
