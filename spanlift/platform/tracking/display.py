"""The names a paper prints for solvers, e.g. `SpanLift (on DyWeight)`, `DPM-Solver++ (3M)`.

A row's name is its solver's title, its order where the configuration sets one (`(3M)` for the
multistep DPM-Solver++, as its authors write it) and its base where it has one. A name the
registry does not know (a sweep entry's own `label`, another library's scheduler) is shown as
recorded. Read from the row's `solver` and `configuration` params only, so the leaderboard
needs no solver code to name its rows.
"""

import re

TITLES = {
    "euler": "Euler",
    "heun": "Heun",
    "ipndm": "iPNDM",
    "dpm_solver_pp": "DPM-Solver++",
    "unipc": "UniPC",
    "deis": "DEIS",
    "dyweight": "DyWeight",
    "spanlift": "SpanLift",
    "ld3": "LD3",
    "amed": "AMED",
    "amed_plugin": "AMED-Plugin",
    "epd": "EPD",
    "epd_plugin": "EPD-Plugin",
    "s4s_alt": "S4S-Alt",
    "dlms": "DLMS",
    "gs": "GS",
    "gits": "GITS",
    "pas": "PAS",
}
MULTISTEP = {"dpm_solver_pp"}
"""Solvers whose order is written `(kM)`: DPM-Solver++(2M), (3M)."""


def setting(configuration: str, name: str) -> str | None:
    """A top-level setting of a configuration label (`SolverSpec.label`, e.g.
    `spanlift[base=dyweight,kernel_size=3]`); a base's own settings are not read."""
    found = re.search(rf"[\[,]{name}=([\w.]+)(?=[,\]])", configuration)
    return found.group(1) if found else None


def display_name(solver: str, configuration: str = "") -> str:
    """`SpanLift (on DyWeight)`, `DPM-Solver++ (3M)`, `UniPC (3)`, `Euler`; `solver` itself where
    it is no registered name."""
    if solver not in TITLES:
        return solver
    name = TITLES[solver]
    order = setting(configuration, "order") if configuration.startswith(solver) else None
    if order:
        name += f" ({order}{'M' if solver in MULTISTEP else ''})"
    base = setting(configuration, "base") if configuration.startswith(solver) else None
    if base:
        name += f" (on {TITLES.get(base, base)})"
    return name
