"""The leaderboard as text, Markdown, LaTeX or CSV, with the protocol it was measured under.

Every format shows a row's mean over its replicates with the 95 % interval (± half-width, or
nothing for a single run), n, its marks († chosen on test values, § measured with a network the
fit's loss used), and its comparison with the row below (≈: within noise; `<`/`>`:
better, with the interval of the ratio of the two where it is a paired bootstrap) and its fit cost
(`fit_cost`: iterations, seconds, device-hours where several devices fitted it, ↗ where its cap
stopped it still improving, a dash where nothing was fitted). Markdown and
LaTeX set the best value of each NFE in bold and give the protocol (Markdown under the table,
LaTeX in the caption of a table float that fits a one-column article): what the rows share
(teacher, schedule, seeds of each role, detector, dtype, device, code), or, where rows differ,
each value.
"""

import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import asdict
from itertools import groupby
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from spanlift.platform.statistics import t_quantile
from spanlift.platform.tracking.display import display_name
from spanlift.platform.tracking.entry import ROW_COLUMNS, Entry
from spanlift.platform.tracking.fit_cost import NOTE, STILL_IMPROVING_NOTE, cost_cell, cost_parts

CHOSEN_ON_TEST = (
    "† chosen on test values among its configurations: their runs record no validation values "
    "(recorded before validation seeds existed); run the sweep again to choose on validation seeds"
)
ONLY_CONFIGURATION = (
    "rows without validation values are their solver's only configuration here: nothing was chosen"
)
SELF_MEASURED = "§ measured with a network the fit's loss used: partly optimised against itself"


def self_measured_note(entries: list[Entry]) -> str:
    """The § note, naming the metrics it applies to and the networks in question."""
    metrics = list(dict.fromkeys(name for e in entries for name in e.overlap))
    return f"{SELF_MEASURED} ({', '.join(metrics)}; the run param fit.loss_networks)"


TIES = (
    "≈ within noise of the row below (95 % bootstrap interval of the value ratio over test "
    "seeds and fit seeds contains 1, or a Welch interval over replicates contains 0); "
    "< / > better than it"
)
PROTOCOL_LABELS = {
    "teacher": "teacher",
    "schedule": "schedule",
    "teacher.train_seeds": "training seeds",
    "teacher.validation_seeds": "validation seeds",
    "teacher.test_seeds": "test seeds",
    "fid.detector": "FID detector",
    "fid.reference": "FID reference",
    "fid.samples": "FID samples",
    "fid.validation_seeds": "FID validation seeds",
    "eval.samples": "samples",
    "fit.iterations": "fit iterations",
    "fit.seed": "fit seeds",
    "env.dtype": "dtype",
    "env.device": "device",
    "env.gpus": "GPUs",
    "env.threads": "threads",
    "env.commit": "code",
    "code.version": "result code version",
}


def interval(e: Entry, digits: int = 4) -> str:
    """`0.0965 ± 0.0012`, or the value alone for a single run."""
    value = f"{e.value:.{digits}f}"
    return value if e.half_width is None else f"{value} ± {e.half_width:.{digits}f}"


def comparison(e: Entry) -> str:
    """`≈ [0.97, 1.02]`, `< [0.81, 0.88]`, `≈`, or "" (the last row, or untested)."""
    if not e.vs_next:
        return ""
    ratio = f" [{e.ratio[0]:.3f}, {e.ratio[1]:.3f}]" if e.ratio else ""
    return e.vs_next + ratio


def marks(e: Entry) -> str:
    """† chosen on test values; § measured with a network the fit's loss used."""
    return ("†" if e.chosen_on == "test" else "") + ("§" if e.overlap else "")


def column_cell(e: Entry, name: str) -> str:
    """A `--columns` cell: the row's own field (its run id), or its replicates' mean of a metric."""
    if name in ROW_COLUMNS:
        return str(getattr(e, name))
    return f"{e.columns.get(name, math.nan):.4g}"


def group_header(metric: str, scale: str) -> str:
    """E.g. `rmse against teacher=ipndm[order=4] nfe=35, teacher.test_seeds=0..255:`."""
    return f"{metric} against {scale or '(not recorded)'}:"


def groups(entries: list[Entry]) -> list[tuple[tuple[str, str], list[Entry]]]:
    """The entries by (backbone, scale), in the order they come."""
    return [
        (key, list(part)) for key, part in groupby(entries, key=lambda e: (e.backbone, e.scale))
    ]


def format_leaderboard(entries: list[Entry], metric: str, columns: tuple[str, ...] = ()) -> str:
    """The text table; each group of rows is headed by what its values are measured against (when
    any run recorded that), and notes follow for the marks used."""
    width = max(len("configuration"), *(len(e.configuration) for e in entries))
    widths = {c: max(12, len(c), *(len(column_cell(e, c)) for e in entries)) for c in columns}
    extra = "".join(f" {name:>{widths[name]}}" for name in columns)
    fit = max(len("fit"), *(len(cost_cell(e.fit)) for e in entries))
    header = (
        f"{'backbone':<9} {'NFE':>3} {'#':>2} {'solver':<14} {'configuration':<{width}} "
        f"{'ends':<5} {metric:>10} {'± 95%':>8} {'n':>3} {'runs':>4} {'vs next':<18} "
        f"{'fit':<{fit}}{extra}"
    )
    lines = [header, "-" * len(header)]
    headed = any(e.scale for e in entries)
    for (_, scale), part in groups(entries):
        if headed:
            lines.append(group_header(metric, scale))
        for e in part:
            spread = f"{e.half_width:.4f}" if e.half_width is not None else "-"
            values = "".join(f" {column_cell(e, name):>{widths[name]}}" for name in columns)
            lines.append(
                f"{e.backbone:<9} {e.nfe:>3} {e.rank:>2} {e.solver:<14} "
                f"{e.configuration:<{width}} {e.ends:<5} {e.value:>10.4f} {spread:>8} {e.n:>3} "
                f"{e.runs:>4} {comparison(e):<18} {cost_cell(e.fit):<{fit}}{values}{marks(e)}"
            )
    return "\n".join(lines + notes(entries))


def interval_note(entries: list[Entry]) -> str:
    """How wide the ± of the rows' replicate counts is: t_{0.975, n−1} standard errors."""
    counts = sorted({e.n for e in entries if e.half_width is not None})
    widths = ", ".join(f"{t_quantile(n - 1):.2f} at n = {n}" for n in counts)
    return (
        f"± is the 95 % Student t interval over the row's n replicates (fit seeds): t·s/√n with "
        f"t = {widths}; rows of few replicates have wide intervals by construction"
    )


def notes(entries: list[Entry]) -> list[str]:
    """The footnotes the marks of `entries` need."""
    shown = []
    if any(e.vs_next for e in entries):
        shown.append(TIES)
    if any(e.fit for e in entries):
        shown.append(NOTE)
    if any(e.fit and e.fit.still_improving for e in entries):
        shown.append(STILL_IMPROVING_NOTE)
    if any(e.chosen_on == "test" for e in entries):
        shown.append(CHOSEN_ON_TEST)
    if any(e.overlap for e in entries):
        shown.append(self_measured_note(entries))
    if any(e.chosen_on == "only" for e in entries):
        shown.append(ONLY_CONFIGURATION)
    left_out = sum(e.superseded for e in entries)
    if left_out:
        shown.append(
            f"{left_out} runs left out: a configuration's runs by an older result code version, or "
            "a fit seed's older run; each row counts the newest version's newest run of each seed"
        )
    if any(e.half_width is not None for e in entries):
        shown.append(interval_note(entries))
    resolved = [e.test_resolves for e in entries if e.test_resolves is not None]
    if resolved:
        shown.append(
            f"test seeds resolve differences of about {float(np.median(resolved)):.1%} (the median "
            "row's 95 % half-width of its RMSE over its test seeds); closer rows are told apart "
            "only where their errors go together seed by seed"
        )
    for searched in sorted({e.chosen_on for e in entries if e.chosen_on.startswith("val_")}):
        shown.append(
            f"configurations chosen on {searched}, the metric their sweep searched on (on "
            "validation seeds); this metric was measured on test samples only"
        )
    return shown


def protocol(entries: list[Entry]) -> list[str]:
    """`label: value` for each protocol param the rows recorded: one value when they agree, each
    value otherwise."""
    lines = []
    for name, label in PROTOCOL_LABELS.items():
        values = sorted({e.protocol[name] for e in entries if name in e.protocol})
        if name == "fit.seed":  # each row lists its replicates' seeds: each seed once
            values = sorted({s for v in values for s in v.split(", ")}, key=int)
        if name == "env.commit":
            values = [commit_label(e) for e in entries if "env.commit" in e.protocol]
            values = sorted(set(values))
        if values:
            lines.append(f"{label}: {', '.join(values)}")
    return lines


def commit_label(e: Entry) -> str:
    commit = e.protocol["env.commit"][:12]
    return commit + (" (modified)" if e.protocol.get("env.modified") == "true" else "")


def bold_best(
    part: list[Entry], cell: Callable[[Entry], str], bold: Callable[[str], str]
) -> list[str]:
    """Each row's cell, the first row of each NFE (its best) in bold."""
    firsts = {e.nfe: e for e in sorted(part, key=lambda e: (e.nfe, e.rank)) if e.rank == 1}
    return [bold(cell(e)) if firsts.get(e.nfe) is e else cell(e) for e in part]


def markdown(entries: list[Entry], metric: str, columns: tuple[str, ...] = ()) -> str:
    """A Markdown table per group (mean ± 95 % interval, n, the comparison with the next row,
    the best of each NFE in bold), then the notes and the protocol."""
    out = []
    for (backbone, scale), part in groups(entries):
        out.append(f"**{backbone}**, {group_header(metric, scale)}\n")
        head = ["NFE", "solver", "configuration", f"{metric} (mean ± 95 % CI)", "n", "vs next"]
        head.append("fit")
        out.append("| " + " | ".join([*head, *columns]) + " |")
        out.append("|" + "|".join(["---"] * (len(head) + len(columns))) + "|")
        values = bold_best(part, interval, lambda text: f"**{text}**")
        for e, value in zip(part, values, strict=True):
            extra = [column_cell(e, name) for name in columns]
            cells = [str(e.nfe), e.solver + marks(e), f"`{e.configuration}`", value, str(e.n)]
            out.append("| " + " | ".join([*cells, comparison(e), cost_cell(e.fit), *extra]) + " |")
        out.append("")
    footer = [*notes(entries), *(f"{line}" for line in protocol(entries))]
    return "\n".join(out + [f"- {line}" for line in footer])


LATEX_CHARACTERS = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": "$<$",  # in text, LaTeX's default font encoding prints < and > as ¡ and ¿
    ">": "$>$",
    "|": "$|$",
    "±": r"$\pm$",
    "≈": r"$\approx$",
    "†": r"$^\dagger$",
    "§": r"$^{\S}$",
    "σ": r"$\sigma$",
    "×": r"$\times$",
    "−": "$-$",
    "≤": r"$\le$",
    "≥": r"$\ge$",
    "→": r"$\to$",
    "µ": r"$\mu$",
    "μ": r"$\mu$",
    "–": "--",
    "—": "---",
    "…": r"\dots{}",
    "·": r"$\cdot$",
    "↗": r"$\nearrow$",
    "\u2009": r"\,",
}
"""Each character LaTeX would not print as itself, and how it is written instead."""


def tex(text: str) -> str:
    """`text` with every LaTeX special character escaped and ≈ / ± / † / § / σ / < / > as math; any
    other non-ASCII character as its closest ASCII (`10⁹` as `109`), or `?`."""
    return "".join(LATEX_CHARACTERS.get(c) or (c if c.isascii() else ascii_of(c)) for c in text)


def ascii_of(character: str) -> str:
    plain = unicodedata.normalize("NFKD", character).encode("ascii", "ignore").decode()
    return tex(plain) if plain else "?"


def tex_label(name: str) -> str:
    """A `\\label` key from `name`: what LaTeX takes in a key, other characters as `-`."""
    return re.sub(r"[^A-Za-z0-9:.+-]", "-", name)


def latex_head(name: str) -> str:
    """A `--columns` header, broken after each `_` (`error_` over `median`): a metric's name is
    wider than its values."""
    if "_" not in name:
        return tex(name)
    lines = [tex(part) for part in name.split("_")]
    return r"\begin{tabular}[b]{@{}r@{}}" + "\\_\\\\".join(lines) + r"\end{tabular}"


def latex_cell(e: Entry, name: str) -> str:
    """A `--columns` cell in LaTeX: ids and configuration keys in typewriter type."""
    cell = tex(column_cell(e, name))
    return rf"\texttt{{{cell}}}" if name in ROW_COLUMNS else cell


def latex_cost(e: Entry) -> str:
    r"""The fit cell in LaTeX: its parts one above the other (iterations over time), narrower
    than on one line, ↗ as a superscript of the first (`$^\nearrow$`); `--` where nothing was
    fitted."""
    parts = [tex(part) for part in cost_parts(e.fit)]
    if not parts:
        return "--"
    if e.fit and e.fit.still_improving:
        parts[0] += r"$^\nearrow$"
    if len(parts) == 1:
        return parts[0]
    return r"\begin{tabular}[t]{@{}r@{}}" + r"\\".join(parts) + r"\end{tabular}"


def latex_bold(text: str) -> str:
    return rf"\textbf{{{text}}}" if text else text


def latex_spread(e: Entry) -> str:
    r"""`$\pm$ 0.0012`, the half-width of the 95 % interval; "" for a single run."""
    return "" if e.half_width is None else rf"$\pm$ {e.half_width:.4f}"


def latex_caption(
    entries: list[Entry],
    metric: str,
    parts: list[tuple[tuple[str, str], list[Entry]]],
    heading: str = "",
) -> str:
    """What the table shows and how it was measured: `heading` (what the ranking is, where it is
    not the usual one), each group's reference, the notes for the marks used and the protocol."""
    against = [
        f"{'(' + chr(ord('a') + i) + ') ' if len(parts) > 1 else ''}backbone {backbone}: {metric} "
        f"against {scale or '(not recorded)'}"
        for i, ((backbone, scale), _) in enumerate(parts)
    ]
    sentences = [
        heading,
        "; ".join(against),
        f"each solver's configuration chosen on validation seeds, ranked by its {metric} on test "
        "seeds: mean ± 95 % interval over its n replicates (the value alone for one run), the "
        "best of each NFE in bold; vs next: the row against the one below it, with the 95 % "
        "interval of their ratio",
        *notes(entries),
        "; ".join(protocol(entries)),
    ]
    text = " ".join(tex(s[:1].upper() + s[1:]) + "." for s in sentences if s)
    return text.replace(" its n replicates", " its $n$ replicates")


def latex(
    entries: list[Entry],
    metric: str,
    columns: tuple[str, ...] = (),
    label: str = "tab:leaderboard",
    heading: str = "",
) -> str:
    """A `table` float a paper can print: one booktabs `tabular` per group (display names, the
    best of each NFE in bold) that fits the text width of a one-column article, and `heading`,
    the groups' references, the notes and the protocol in its caption. The configuration keys are a
    `--columns configuration` column, on request."""
    parts = groups(entries)
    out = [r"\begin{table}[tbp]", r"\centering", r"\footnotesize", r"\setlength{\tabcolsep}{2.5pt}"]
    for i, ((backbone, _), part) in enumerate(parts):
        width = 6 + len(columns)
        out.append(r"\begin{tabular}{lr@{\,}lrlr" + "r" * len(columns) + "}")
        out.append(r"\toprule")
        if len(parts) > 1:
            group = f"({chr(ord('a') + i)}) {tex(backbone)}"
            out.append(rf"\multicolumn{{{width}}}{{@{{}}l}}{{{group}}} \\")
            out.append(r"\midrule")
        head = ["solver", rf"\multicolumn{{2}}{{c}}{{{tex(metric)}}}", "$n$", "vs next", "fit"]
        out.append(" & ".join([*head, *map(latex_head, columns)]) + r" \\")
        values = bold_best(part, lambda e: f"{e.value:.4f}", latex_bold)
        spreads = bold_best(part, latex_spread, latex_bold)
        for nfe, rows in groupby(zip(part, values, spreads, strict=True), key=lambda r: r[0].nfe):
            out.append(r"\midrule" if nfe == part[0].nfe else r"\addlinespace")
            out.append(rf"\multicolumn{{{width}}}{{@{{}}l}}{{\textit{{NFE {nfe}}}}} \\")
            for e, value, spread in rows:
                name = tex(display_name(e.solver, e.configuration) + marks(e))
                extra = [latex_cell(e, column) for column in columns]
                cost = latex_cost(e)
                cells = [name, value, spread, str(e.n), tex(comparison(e)), cost, *extra]
                out.append(" & ".join(cells) + r" \\")
        out.append(r"\bottomrule")
        out.append(r"\end{tabular}")
        if i < len(parts) - 1:
            out.append(r"\par\medskip")
    out.append(
        rf"\caption[{tex(metric)} by NFE]{{{latex_caption(entries, metric, parts, heading)}}}"
    )
    out.append(rf"\label{{{tex_label(label)}}}")
    out.append(r"\end{table}")
    return "\n".join(out)


def write_csv(entries: list[Entry], path: Path | TextIO) -> Path | TextIO:
    """Every field of every row (intervals, comparison, replicates' run ids) as CSV; a list
    (`run_ids`, `fit_seeds`, `overlap`) is one cell, its items separated by spaces."""
    rows = []
    for e in entries:
        row = asdict(e)
        row.pop("protocol")
        row.pop("values")
        row.pop("fit")
        columns = row.pop("columns")
        row["run_ids"] = " ".join(e.run_ids)
        row["fit_seeds"] = " ".join(e.fit_seeds)
        row["overlap"] = " ".join(e.overlap)
        row["ratio_low"], row["ratio_high"] = e.ratio or (None, None)
        row.pop("ratio")
        row.update(fit_fields(e))
        rows.append({**row, **columns})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def fit_fields(e: Entry) -> dict[str, object]:
    """A row's fit cost as CSV fields (`fit_iterations`, `fit_seconds`, `fit_device_hours`,
    `fit_devices`, `fit_device`, `fit_still_improving`), empty where nothing was fitted."""
    names = ("iterations", "seconds", "device_hours", "devices", "device", "still_improving")
    return {f"fit_{name}": getattr(e.fit, name) if e.fit else None for name in names}


FORMATS = {"text": format_leaderboard, "markdown": markdown, "latex": latex}
"""The formats printed to the console (`--format`); csv is written to a file or printed."""
