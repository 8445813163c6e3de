"""A solver driven one model call at a time, as a diffusers pipeline's loop drives a scheduler.

A pipeline calls its model once per step and hands the output to `scheduler.step`; a spanlift
solver calls its denoiser D(x, σ) from inside its own rollout. The two meet by replay:

- dry run: the solver rolled out with a stand-in denoiser (D = 0) records the noise level σ_k of
  each of its NFE calls. The σ it asks for never depends on D (its grid and time scalings are
  its state), so these are the pipeline's timesteps;
- replay: after the pipeline's k-th model call, the solver is rolled out again from its start
  with a denoiser that returns the k + 1 outputs kept so far (D_0 … D_k), and stopped at its
  next call: the state x_{k+1} it asks D about at σ_{k+1} is the next model input. After the last
  call the rollout runs to its end, and its endpoint is the sample.

Every solver's arithmetic is replayed (O(NFE²) of it over a sampling run), its model is called
NFE times, and since the replayed rollout is the rollout, the sample is the solver's own.

The first call's state is x_0 = a·x_T for a scalar a the dry run measures (no output of D is
known before it: 1 for a solver starting at σ_max, OSS's rescaling below it).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Solver


@dataclass(frozen=True)
class Query:
    """A model call the solver asks for: state x (σ-form) at noise level σ (0-d)."""

    x: Tensor
    sigma: Tensor


class Stop(Exception):
    """Raised by the replay's denoiser at the first call it has no output for."""

    def __init__(self, query: Query) -> None:
        super().__init__("replay stopped")
        self.query = query


def dry_run(solver: Solver, shape: tuple[int, ...]) -> tuple[list[Query], float]:
    """The solver's calls from x_T = 1 (one sample of `shape`) with D = 0, and the scalar a of the
    first call's state x_0 = a·x_T. A solver whose calls cannot be a pipeline's (several samples
    per call, one σ per sample, a first state not a multiple of x_T) is refused here."""
    queries: list[Query] = []
    x_T = torch.ones(1, *shape)

    def stand_in(x: Tensor, sigma: Tensor) -> Tensor:
        sigma = torch.as_tensor(sigma)
        if len(x) != 1 or sigma.numel() != 1:
            raise SettingsError(
                f"solver {solver.spec.label()} evaluates {len(x)} states at {sigma.numel()} noise "
                f"level(s) in one model call; a diffusers pipeline calls its model on its batch "
                f"at one timestep per step, so this solver cannot be exported"
            )
        queries.append(Query(x.detach().clone(), sigma.detach().reshape(()).clone()))
        return torch.zeros_like(x)

    with torch.no_grad():
        solver(stand_in, x_T)
    if len(queries) != solver.spec.nfe:
        raise SettingsError(
            f"solver {solver.spec.label()} called its model {len(queries)} times in a rollout, "
            f"not its nfe={solver.spec.nfe}"
        )
    first = queries[0].x
    scale = float(first.flatten()[0])
    if not torch.allclose(first, torch.full_like(first, scale), rtol=1e-6, atol=0):
        raise SettingsError(
            f"solver {solver.spec.label()}'s first model call is not at a multiple of its start "
            f"state, so a pipeline's initial latents cannot be its first model input"
        )
    return queries, scale


def replay(solver: Solver, x_T: Tensor, outputs: list[Tensor]) -> Query | Tensor:
    """The solver rolled out from x_T with D's k-th call answered by outputs[k]: the first call
    past them (a `Query`), or the endpoint when every call was answered."""
    answered = iter(outputs)

    def cached(x: Tensor, sigma: Tensor) -> Tensor:
        output = next(answered, None)
        if output is None:
            raise Stop(Query(x, torch.as_tensor(sigma).reshape(())))
        return output

    try:
        with torch.no_grad():
            return solver(cached, x_T)
    except Stop as stop:
        return stop.query
