"""A leaderboard row: one solver's chosen configuration in a group of comparable runs."""

from dataclasses import dataclass, field

from spanlift.platform.tracking.fit_cost import FitCost

ROW_COLUMNS = ("run_id", "configuration")
"""`--columns` a row shows from itself rather than from its runs' metrics: the run id
`spanlift rerun` takes, and the configuration's key (which LaTeX leaves out unless asked)."""


@dataclass(frozen=True)
class Entry:
    backbone: str
    scale: str  # what the value is measured against: "teacher=..., teacher.test_seeds=..." or ""
    nfe: int
    rank: int
    solver: str
    configuration: str
    value: float  # the mean of the chosen configuration's test values over its replicates
    runs: int  # runs of this solver in the group, every configuration and replicate
    run_id: str  # the chosen configuration's first replicate
    ends: str = "σ_min"  # where sampling ended: "σ_min", or "σ=0" (EDM's protocol)
    n: int = 1  # replicates of the chosen configuration
    sd: float = 0.0
    half_width: float | None = None  # 95 % Student t half-width (None: one replicate)
    validation: float | None = None  # the mean validation value that chose the configuration
    chosen_on: str = "validation"  # "val_rmse": the searched metric; "test": runs before
    # validation; "only": the solver's one configuration, recorded without validation values
    vs_next: str = ""  # "≈" (tied with the row below), "<" / ">" (better, by mode), "" untested
    ratio: tuple[float, float] | None = None  # 95 % interval of value / next row's value
    run_ids: tuple[str, ...] = ()
    fit_seeds: tuple[str, ...] = ()  # each replicate's fit seed ("" where none was recorded)
    values: tuple[float, ...] = ()  # the replicates' test values
    columns: dict[str, float] = field(default_factory=dict)  # `--columns`: replicates' means
    protocol: dict[str, str] = field(default_factory=dict)  # the chosen run's PROTOCOL_PARAMS
    fit: FitCost | None = None  # the replicates' mean fit cost (None: nothing fitted)
    overlap: tuple[str, ...] = ()  # ranked or shown metrics measured with a network the fit's
    # loss used (`fit.loss_networks`): marked §
    test_resolves: float | None = None  # relative 95 % half-width of its RMSE over test seeds
    superseded: int = 0  # runs of the configuration left out: older code versions, repeated seeds
