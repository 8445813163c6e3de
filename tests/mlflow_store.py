"""An experiment in a real MLflow sqlite store that tests log finished runs into."""

from dataclasses import dataclass

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.leaderboard import leaderboard


@dataclass
class Store:
    """One experiment in a real MLflow sqlite store."""

    client: MlflowClient
    uri: str
    experiment: str

    def log(self, solver: str, metrics: dict[str, float], **params: object) -> None:
        """A finished run of `solver` at NFE 3 on gmm; `a__b=v` logs the param `a.b`."""
        experiment = self.client.get_experiment_by_name(self.experiment).experiment_id
        run_id = self.client.create_run(experiment, run_name=solver).info.run_id
        params = {"backbone": "gmm", "nfe": 3, "solver": solver, "configuration": solver, **params}
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
            params=[Param(k.replace("__", "."), str(v)) for k, v in params.items()],
        )
        self.client.set_terminated(run_id, "FINISHED")

    def log_rows(self, rows: list[dict], metric: str = "rmse") -> None:
        for row in rows:
            params = {k: v for k, v in row.items() if k not in ("solver", "value")}
            self.log(row["solver"], {metric: row["value"]}, **params)

    def board(self, metric: str = "rmse", mode: str = "min", by_fit: bool = False) -> list[Entry]:
        return leaderboard(self.client, self.experiment, metric, mode, by_fit=by_fit)

    def command(self, *argv: str) -> list[str]:
        return ["leaderboard", "--experiment", self.experiment, "--tracking-uri", self.uri, *argv]
