"""The linear-span limitation on a 3D ODE (the paper's Halvorsen figure and eq. 5–7).

The Halvorsen system (a = 1.89; the paper does not state its value)

    dx/dt = −a x − 4y − 4z − y²,   dy/dt = −a y − 4z − 4x − z²,   dz/dt = −a z − 4x − 4y − x²

is integrated from x(0) = (−1.48, −1.51, 2.04). One solver step from t_i = 1.8 to t_{i+1} = 2.0
(h = 0.2) starts at the reference state x_i = x(1.8) with K = 2 buffered velocities u_i = f(x_i)
and u_{i−1} = f(x(1.6)), spanning V_i. The target is the exact step (eq. one_step_teacher_update)

    Δ* = (Φ*(x_i) − x_i) / h,   Φ* by `solve_ivp` (DOP853, rtol = atol = 1e-12),

and every update Δ splits as (eq. pythagorean_decomposition, with P⊥ = I − Π_V)

    ‖Δ* − Δ‖² = ‖Π_V Δ* − Π_V Δ‖² + ‖P⊥(Δ* − Δ)‖²,

whose second term is ‖r⊥‖² = ‖P⊥Δ*‖² for every in-span Δ: the floor of the scalar updates.
Four updates are compared:

    AB2             1.5 u_i − 0.5 u_{i−1}
    DyWeight-like   w_0 u_i + w_1 u_{i−1}, (w_0, w_1) one pair for every state, fitted by least
                    squares (all three components of every state stacked) on the training states
    best in-span    Π_V Δ*, the per-state optimum of the scalar class
    SpanLift-like   AB2 + R(x, u_i, u_{i−1}), R a one-hidden-layer tanh MLP on the standardised
                    9-vector: hidden weights drawn once (seeded), output layer fitted by ridge
                    least squares on Δ* − AB2 over the training states

Training states are step i of an ensemble of trajectories, as a diffusion solver's step i sees the
states of many seeds: x(0) + spread·ε with ε ~ N(0, I) (seeded), integrated together to t_i ± h.
The reference trajectory (ε = 0) is not among them; a second, held-out ensemble (another seed)
gives each update's mean mismatch beyond the one reference state.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy.integrate import solve_ivp

from spanlift.errors import SettingsError

A = 1.89
INITIAL_POINT = (-1.48, -1.51, 2.04)
T_I, STEP = 1.8, 0.2
TOLERANCE = 1e-12
ENSEMBLE_TOLERANCE = 1e-10
DRAWING_TOLERANCE = 1e-8  # the curves of the figure only
AB2 = (1.5, -0.5)


def velocity(x: np.ndarray, a: float = A) -> np.ndarray:
    """f(x) of the Halvorsen system for states stacked along the first axes (…, 3)."""
    x_, y, z = x[..., 0], x[..., 1], x[..., 2]
    return np.stack(
        [
            -a * x_ - 4 * y - 4 * z - y**2,
            -a * y - 4 * z - 4 * x_ - z**2,
            -a * z - 4 * x_ - 4 * y - x_**2,
        ],
        axis=-1,
    )


def integrate(
    initial: np.ndarray, times: list[float], a: float = A, tolerance: float = TOLERANCE
) -> np.ndarray:
    """States at `times` (from t = 0) of the trajectories from `initial` (M, 3), all integrated as
    one system by DOP853; returns (len(times), M, 3)."""
    initial = np.atleast_2d(np.asarray(initial, dtype=np.float64))
    count = len(initial)

    def rhs(_: float, flat: np.ndarray) -> np.ndarray:
        return velocity(flat.reshape(count, 3), a).reshape(-1)

    solution = solve_ivp(
        rhs,
        (0.0, max(times)),
        initial.reshape(-1),
        t_eval=sorted(times),
        method="DOP853",
        rtol=tolerance,
        atol=tolerance,
    )
    if not solution.success:
        raise SettingsError(
            f"the Halvorsen system with a = {a} cannot be integrated to t = {max(times)} "
            f"from these states ({solution.message})"
        )
    order = np.argsort(np.argsort(times))
    return solution.y.T.reshape(len(times), count, 3)[order]


def exact_step(x: np.ndarray, h: float = STEP, a: float = A) -> np.ndarray:
    """Φ*(x): the exact flow over h from x (the system is autonomous), to `TOLERANCE`."""
    return integrate(x, [h], a)[0]


@dataclass(frozen=True)
class StepStates:
    """Step i of M trajectories: state x_i, velocities u_i, u_{i−1}, target Δ* (each (M, 3))."""

    x: np.ndarray
    u: np.ndarray
    u_previous: np.ndarray
    target: np.ndarray

    def basis(self) -> np.ndarray:
        """The buffer B_i as columns, (M, 3, 2)."""
        return np.stack([self.u, self.u_previous], axis=-1)


def step_states(
    initial: np.ndarray, t_i: float, h: float, a: float = A, tolerance: float = ENSEMBLE_TOLERANCE
) -> StepStates:
    previous, x, following = integrate(initial, [t_i - h, t_i, t_i + h], a, tolerance)
    return StepStates(x, velocity(x, a), velocity(previous, a), (following - x) / h)


@dataclass(frozen=True)
class Decomposition:
    """‖Δ*−Δ‖² = in-span mismatch + out-of-span residual; `update_out_of_span` is ‖P⊥Δ‖²."""

    mismatch: float
    in_span_mismatch: float
    out_of_span_residual: float
    update_out_of_span: float


def span_projector(basis: np.ndarray) -> np.ndarray:
    """Π_V for the columns of `basis` (…, 3, K), through a reduced QR."""
    q, _ = np.linalg.qr(basis)
    return q @ np.swapaxes(q, -1, -2)


def decompose(target: np.ndarray, update: np.ndarray, basis: np.ndarray) -> Decomposition:
    projector = span_projector(basis)
    error = target - update
    inside = projector @ error
    outside = error - inside
    update_outside = update - projector @ update
    return Decomposition(
        float(error @ error),
        float(inside @ inside),
        float(outside @ outside),
        float(update_outside @ update_outside),
    )


def fit_scalar_weights(states: StepStates) -> np.ndarray:
    """(w_0, w_1) minimising Σ_states ‖Δ* − w_0 u_i − w_1 u_{i−1}‖²: one pair for every state."""
    design = np.stack([states.u.reshape(-1), states.u_previous.reshape(-1)], axis=1)
    return np.linalg.lstsq(design, states.target.reshape(-1), rcond=None)[0]


def ab2(states: StepStates) -> np.ndarray:
    return AB2[0] * states.u + AB2[1] * states.u_previous


@dataclass
class ResidualMLP:
    """R(x, u_i, u_{i−1}) = C^T [tanh(W^T z̃ + b); 1], z̃ the standardised 9-vector."""

    hidden: int = 64
    ridge: float = 1e-6
    seed: int = 0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(9))
    scale: np.ndarray = field(default_factory=lambda: np.ones(9))
    weights: np.ndarray = field(default_factory=lambda: np.zeros((9, 0)))
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0))
    head: np.ndarray = field(default_factory=lambda: np.zeros((1, 3)))

    def features(self, states: StepStates) -> np.ndarray:
        z = np.concatenate([states.x, states.u, states.u_previous], axis=-1)
        hidden = np.tanh(((z - self.mean) / self.scale) @ self.weights + self.bias)
        return np.concatenate([hidden, np.ones((*hidden.shape[:-1], 1))], axis=-1)

    def fit(self, states: StepStates) -> "ResidualMLP":
        """Draw the hidden layer, then solve the ridge least squares of the head on Δ* − AB2."""
        z = np.concatenate([states.x, states.u, states.u_previous], axis=-1)
        self.mean, self.scale = z.mean(axis=0), z.std(axis=0)
        rng = np.random.default_rng(self.seed)
        self.weights = rng.normal(size=(9, self.hidden)) / 3.0
        self.bias = rng.normal(size=self.hidden) * 0.5
        features = self.features(states)
        gram = features.T @ features + self.ridge * len(features) * np.eye(features.shape[1])
        self.head = np.linalg.solve(gram, features.T @ (states.target - ab2(states)))
        return self

    def __call__(self, states: StepStates) -> np.ndarray:
        return self.features(states) @ self.head


@dataclass(frozen=True)
class HalvorsenSetup:
    a: float = A
    initial: tuple[float, float, float] = INITIAL_POINT
    t_i: float = T_I
    h: float = STEP
    train_states: int = 2000
    held_out_states: int = 256
    spread: float = 0.5
    hidden: int = 64
    ridge: float = 1e-6
    seed: int = 0


UPDATES = ("AB2", "DyWeight-like", "best in-span", "SpanLift-like")


@dataclass
class HalvorsenResult:
    setup: HalvorsenSetup
    reference: StepStates  # one state: x_i, u_i, u_{i−1}, Δ* (each (1, 3))
    endpoint: np.ndarray  # Φ*(x_i)
    updates: dict[str, np.ndarray]  # name → Δ at the reference state
    rows: dict[str, Decomposition]
    held_out: dict[str, float]  # name → mean ‖Δ* − Δ‖² over the held-out states
    scalar_weights: np.ndarray
    floor: float  # ‖r⊥‖² at the reference state
    held_out_floor: float
    train_distance: float  # from x_i to the nearest training state
    train_fit_rmse: float  # of the SpanLift-like update on the training states

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "update": name,
                    "delta_x": self.updates[name][0],
                    "delta_y": self.updates[name][1],
                    "delta_z": self.updates[name][2],
                    "mismatch": row.mismatch,
                    "in_span_mismatch": row.in_span_mismatch,
                    "out_of_span_residual": row.out_of_span_residual,
                    "update_out_of_span": row.update_out_of_span,
                    "held_out_mismatch": self.held_out[name],
                }
                for name, row in self.rows.items()
            ]
        )


def updates_at(
    states: StepStates, weights: np.ndarray, residual: ResidualMLP
) -> dict[str, np.ndarray]:
    """Each update of UPDATES at every state of `states` (M, 3)."""
    best = (span_projector(states.basis()) @ states.target[..., None])[..., 0]
    return {
        "AB2": ab2(states),
        "DyWeight-like": weights[0] * states.u + weights[1] * states.u_previous,
        "best in-span": best,
        "SpanLift-like": ab2(states) + residual(states),
    }


def ensemble(setup: HalvorsenSetup, count: int, seed: int) -> StepStates:
    rng = np.random.default_rng(seed)
    initial = np.asarray(setup.initial) + setup.spread * rng.normal(size=(count, 3))
    return step_states(initial, setup.t_i, setup.h, setup.a)


def halvorsen_analysis(setup: HalvorsenSetup = HalvorsenSetup()) -> HalvorsenResult:
    """The decomposition of each update at the reference state (see the module docstring)."""
    previous, x_i = integrate(np.asarray(setup.initial), [setup.t_i - setup.h, setup.t_i], setup.a)
    endpoint = exact_step(x_i, setup.h, setup.a)
    reference = StepStates(
        x_i, velocity(x_i, setup.a), velocity(previous, setup.a), (endpoint - x_i) / setup.h
    )
    train = ensemble(setup, setup.train_states, setup.seed)
    held_out = ensemble(setup, setup.held_out_states, setup.seed + 1)
    weights = fit_scalar_weights(train)
    residual = ResidualMLP(setup.hidden, setup.ridge, setup.seed).fit(train)
    at_reference = {k: v[0] for k, v in updates_at(reference, weights, residual).items()}
    target, basis = reference.target[0], reference.basis()[0]
    rows = {name: decompose(target, update, basis) for name, update in at_reference.items()}
    held_updates = updates_at(held_out, weights, residual)
    held_errors = {k: ((held_out.target - v) ** 2).sum(axis=1) for k, v in held_updates.items()}
    residual_fit = train.target - ab2(train) - residual(train)
    return HalvorsenResult(
        setup=setup,
        reference=reference,
        endpoint=endpoint[0],
        updates=at_reference,
        rows=rows,
        held_out={k: float(v.mean()) for k, v in held_errors.items()},
        scalar_weights=weights,
        floor=rows["best in-span"].mismatch,
        held_out_floor=float(held_errors["best in-span"].mean()),
        train_distance=float(np.linalg.norm(train.x - x_i, axis=1).min()),
        train_fit_rmse=float(np.sqrt((residual_fit**2).sum(axis=1).mean())),
    )


COLORS = {
    "AB2": "tab:blue",
    "DyWeight-like": "tab:green",
    "best in-span": "tab:purple",
    "SpanLift-like": "tab:red",
}


def plot_halvorsen(result: HalvorsenResult, path: Path) -> Path:
    """(A) the attractor and the trajectory through the step; (B) the step's vectors as
    displacements h·Δ from x_i, V_i shaded, arrow tips marked; (C) each update's squared mismatch
    and its in-span and out-of-span parts."""
    setup = result.setup
    fig = Figure(figsize=(17, 5.5))
    times = list(np.linspace(0, setup.t_i + setup.h, 400))
    path_states = integrate(np.asarray(setup.initial), times, setup.a, DRAWING_TOLERANCE)[:, 0]
    plot_attractor(fig.add_subplot(1, 3, 1, projection="3d"), result, path_states)
    plot_step(fig.add_subplot(1, 3, 2, projection="3d"), result, path_states)
    plot_mismatch(fig.add_subplot(1, 3, 3), result)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def plot_attractor(whole: Axes, result: HalvorsenResult, path_states: np.ndarray) -> None:
    """(A): the attractor, and the trajectory from x(0) through x_i."""
    setup = result.setup
    attractor = integrate(
        path_states[-1], list(np.linspace(0, 60, 6000)), setup.a, DRAWING_TOLERANCE
    )[:, 0]
    whole.plot(*attractor.T, color="0.75", lw=0.3)
    whole.plot(*path_states.T, color="black", lw=1.2, label="x(t), 0 ≤ t ≤ 2")
    whole.scatter(*path_states[0], color="black", marker="^", s=20, label="x(0)")
    whole.scatter(*result.reference.x[0], color="tab:red", s=30, label="x_i = x(1.8)")
    whole.set(xlabel="x", ylabel="y", zlabel="z", title=f"(A) Halvorsen, a = {setup.a}")
    whole.legend(fontsize=7, loc="upper left")


def plot_step(view: Axes, result: HalvorsenResult, path_states: np.ndarray) -> None:
    """(B): the step's vectors as displacements h·Δ from x_i, arrow tips marked, V_i shaded."""
    x_i, h = result.reference.x[0], result.setup.h
    near = (
        np.linalg.norm(path_states - x_i, axis=1) < 1.5 * h * np.abs(result.reference.target).max()
    )
    view.plot(*path_states[near].T, color="black", lw=1.0, label="x(t)")
    view.scatter(*x_i, color="black", s=25)
    vectors = {
        "h·u_i": (result.reference.u[0], "0.3"),
        "h·u_{i−1}": (result.reference.u_previous[0], "0.6"),
        "h·Δ* (exact step)": (result.reference.target[0], "tab:orange"),
    }
    vectors.update({f"h·Δ {k}": (v, COLORS[k]) for k, v in result.updates.items()})
    for label, (vector, color) in vectors.items():
        view.quiver(*x_i, *(h * vector), color=color, lw=1.5, arrow_length_ratio=0.1, label=label)
        marker = "x" if "SpanLift" in label else "o"
        view.scatter(*(x_i + h * vector), color=color, marker=marker, s=40 if marker == "x" else 14)
    q, _ = np.linalg.qr(result.reference.basis()[0])
    extent = 0.8 * h * np.linalg.norm(result.reference.target[0])
    s, t = np.meshgrid(np.linspace(-extent, extent, 2), np.linspace(-extent, extent, 2))
    plane = x_i[:, None, None] + q[:, 0, None, None] * s + q[:, 1, None, None] * t
    view.plot_surface(*plane, color="tab:blue", alpha=0.12)
    view.set(
        xlabel="x", ylabel="y", zlabel="z", title="(B) step 1.8 → 2.0, V_i = span(u_i, u_{i−1})"
    )
    view.legend(fontsize=7, loc="upper left")


def plot_mismatch(bars: Axes, result: HalvorsenResult) -> None:
    """(C): each update's squared mismatch and its in-span and out-of-span parts."""
    names = list(result.rows)
    positions = np.arange(len(names))
    parts = {
        "update mismatch ‖Δ*−Δ‖²": [r.mismatch for r in result.rows.values()],
        "in-span mismatch ‖Π_VΔ*−Π_VΔ‖²": [r.in_span_mismatch for r in result.rows.values()],
        "out-of-span residual ‖P⊥(Δ*−Δ)‖²": [r.out_of_span_residual for r in result.rows.values()],
    }
    width = 0.26
    for k, (label, values) in enumerate(parts.items()):
        drawn = bars.bar(positions + (k - 1) * width, values, width, label=label)
        labels = [f"{v:.3g}" if v > 1e-12 else "0" for v in values]
        bars.bar_label(drawn, labels=labels, fontsize=7, padding=2)
    bars.axhline(
        result.floor, color="black", ls="--", lw=1, label=f"floor ‖r⊥‖² = {result.floor:.4g}"
    )
    bars.set_yscale("symlog", linthresh=1e-2)
    top = max(max(values) for values in parts.values())
    bars.set_ylim(0, top * 30)
    bars.set_xticks(positions, names)
    bars.set(ylabel="squared norm (symlog)", title="(C) ‖Δ*−Δ‖² = in-span + out-of-span, at x_i")
    bars.legend(fontsize=7, loc="upper right", ncols=2)
    bars.grid(axis="y", alpha=0.3)
