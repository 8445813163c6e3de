"""The names a paper prints for solvers, e.g. `SpanLift (on DyWeight)`, `DPM-Solver++ (3M)`.

A row's name is its solver's title, its order where the configuration sets one (`(3M)` for the
multistep DPM-Solver++, as its authors write it) and its base where it has one. A name the
registry does not know (a sweep entry's own `label`, another library's scheduler) is shown as
recorded. Each solver declares its title (`Solver.title`), so a new solver's file is all it takes.
"""

import re
from functools import cache


@cache
def title_of(solver: str) -> tuple[str, str] | None:
    """(title, order mark) the registered solver `solver` declares (`Solver.title`,
    `Solver.order_mark`); None for a name the registry does not hold. The solvers are imported
    here, when a table is written with display names, not when the leaderboard loads."""
    from spanlift.solvers import SOLVERS

    if solver not in SOLVERS:
        return None
    cls = SOLVERS.get(solver)
    return getattr(cls, "title", "") or solver, getattr(cls, "order_mark", "")


def setting(configuration: str, name: str) -> str | None:
    """A top-level setting of a configuration label (`SolverSpec.label`, e.g.
    `spanlift[base=dyweight,kernel_size=3]`); a base's own settings are not read."""
    found = re.search(rf"[\[,]{name}=([\w.]+)(?=[,\]])", configuration)
    return found.group(1) if found else None


def display_name(solver: str, configuration: str = "") -> str:
    """`SpanLift (on DyWeight)`, `DPM-Solver++ (3M)`, `UniPC (3)`, `Euler`; `solver` itself where
    it is no registered name."""
    titled = title_of(solver)
    if titled is None:
        return solver
    name, mark = titled
    order = setting(configuration, "order") if configuration.startswith(solver) else None
    if order:
        name += f" ({order}{mark})"
    base = setting(configuration, "base") if configuration.startswith(solver) else None
    if base:
        name += f" (on {(title_of(base) or (base,))[0]})"
    return name
