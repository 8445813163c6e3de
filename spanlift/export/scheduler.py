"""`SpanLiftScheduler`: any spanlift solver, analytic or fitted, as a diffusers scheduler.

    spanlift export RUN_ID --to diffusers DIR            # or a checkpoint, or --solver … --nfe …
    pipe.scheduler = SpanLiftScheduler.from_pretrained(DIR)
    pipe(prompt, num_inference_steps=NFE)                # exactly the solver's NFE model calls

DIR holds `scheduler_config.json` (diffusers' ConfigMixin: the solver's spec, the backbone it was
made for and how that backbone's model is called in a pipeline, `PipelineForm`; σ range; the
folder's format version) and `solver.safetensors` (the solver's parameters and buffers).

Each pipeline step is one model call of the solver, driven by replay (replay.py); the pipeline's
tensors are converted to and from σ-form by the backbone's own functions (conversion.py).

- The pipeline's initial latents are the solver's first model input (SANA's and FLUX's pipelines
  call their model on them without `scale_model_input`): x_T = latents / a, where a is the first
  call's input per unit of x_T (1/(1 + σ_max)·σ_max… see `init_noise_sigma`). Latents drawn as
  randn·init_noise_sigma start exactly where spanlift's prior σ_max·noise does; SANA's and FLUX's
  pipelines draw them at scale 1 (flow schedulers start at s = 1), which for a solver starting
  at σ_max = T − 1 is σ_max/(1 + σ_max) (0.999 of) spanlift's start.
- The last step returns the solver's endpoint x̃_N, the clean latent spanlift decodes.
- The solver runs in float32 on the pipeline's device; `prev_sample` has the latents' dtype.
- The timesteps are the solver's own: `sigmas` and `mu` (FluxPipeline passes its default
  schedule) are read only for their count; explicit `timesteps` must be this scheduler's own.
"""

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones.base import PARAMETERISATIONS, PipelineForm
from spanlift.errors import CheckpointError, SettingsError
from spanlift.export.conversion import (
    denoised,
    from_pipeline,
    model_input,
    pipeline_shape,
    timestep,
    to_pipeline,
)
from spanlift.export.replay import Query, dry_run, replay
from spanlift.files import atomic_write
from spanlift.solvers.base import Solver
from spanlift.solvers.checkpoint import as_text_paths
from spanlift.solvers.spec import SolverSpec, build_solver

try:
    from diffusers.configuration_utils import ConfigMixin, register_to_config
    from diffusers.schedulers.scheduling_utils import SchedulerMixin, SchedulerOutput
    from safetensors.torch import load_file, save_file
except ImportError as exc:
    raise SettingsError(
        f"a spanlift solver as a diffusers scheduler needs diffusers and safetensors ({exc}); "
        f"install them with pip install 'spanlift[diffusers]'"
    ) from None

FORMAT_VERSION = 1
"""The folder's format: `spanlift_format` in scheduler_config.json."""
CONFIG_FILE = "scheduler_config.json"
STATE_FILE = "solver.safetensors"
TOLERANCE = 1e-5
"""Relative difference within which a timestep or replayed σ counts as the expected one."""


def has_spatial_operator(solver: Solver) -> bool:
    """Whether the solver convolves its states over more than one pixel (SpanLift's spatial
    operator): it was fitted at one latent size and is refused at another."""
    return any(
        isinstance(m, torch.nn.modules.conv._ConvNd) and max(m.kernel_size) > 1
        for m in solver.modules()
    )


class SpanLiftScheduler(SchedulerMixin, ConfigMixin):
    """A spanlift solver as a diffusers scheduler: one model call per step, NFE steps."""

    config_name = CONFIG_FILE
    order = 1

    @register_to_config
    def __init__(
        self,
        solver: dict[str, Any],
        backbone: str,
        parameterisation: str,
        latent_shape: list[int],
        sigma_min: float,
        sigma_max: float,
        num_train_timesteps: int | None = None,
        packed: bool = False,
        backbone_identity: str = "",
        spanlift_format: int = FORMAT_VERSION,
    ) -> None:
        if parameterisation not in PARAMETERISATIONS:
            raise SettingsError(
                f"parameterisation must be one of {', '.join(PARAMETERISATIONS)}, "
                f"got {parameterisation!r}"
            )
        self.spec = SolverSpec.from_dict(solver)
        self.form = PipelineForm(
            parameterisation, tuple(latent_shape), num_train_timesteps, bool(packed)
        )
        self.solver = build_solver(self.spec, sigma_min, sigma_max, self.form.shape[0]).eval()
        self.solver.spec = self.spec
        self._queries: list[Query] | None = None
        self._scale = 1.0
        self.timesteps: Tensor | None = None
        self._step_index: int | None = None
        self._outputs: list[Tensor] = []

    # -- the solver and its calls --------------------------------------------------------------

    def load_solver_state(self, state: dict[str, Tensor]) -> None:
        """The solver's parameters and buffers (a fitted solver's state)."""
        self.solver.load_state_dict(state)
        self._queries = None

    @property
    def calls(self) -> list[Query]:
        """The solver's NFE calls from the dry run (replay.py), each state per unit of x_T."""
        if self._queries is None:
            self._queries, self._scale = dry_run(self.solver.cpu(), self.form.shape)
        return self._queries

    @property
    def input_scale(self) -> float:
        """The first model input per unit of x_T: a (replay.py) in the denoiser form, a/(1 + σ_0)
        in the flow form (σ_0: the first call's σ)."""
        first = self.calls[0]
        return float(model_input(self.form, torch.tensor(self._scale), first.sigma))

    @property
    def init_noise_sigma(self) -> float:
        """The scale of the first model input for x_T = σ_max·noise, so that latents drawn as
        randn·init_noise_sigma start at spanlift's prior."""
        return self.input_scale * float(self.config.sigma_max)

    @property
    def nfe(self) -> int:
        return self.spec.nfe

    # -- what a pipeline calls -----------------------------------------------------------------

    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        device: str | torch.device | None = None,
        sigmas: Any = None,
        mu: float | None = None,
        timesteps: Any = None,
    ) -> None:
        """The solver's NFE timesteps. `num_inference_steps` (or the count of `sigmas` or
        `timesteps`, as `retrieve_timesteps` passes them) must be the solver's NFE; the values
        of `sigmas` and `mu` are not read (the solver's grid is its own); `timesteps`, when
        given, must be this scheduler's."""
        given = [len(v) for v in (sigmas, timesteps) if v is not None]
        steps = num_inference_steps if num_inference_steps is not None else next(iter(given), None)
        if steps != self.nfe:
            raise SettingsError(
                f"this {self.spec.label()} scheduler was made for num_inference_steps="
                f"{self.nfe} (its NFE), got {steps}; call the pipeline with "
                f"num_inference_steps={self.nfe} or export the solver at that NFE"
            )
        own = torch.stack([timestep(self.form, q.sigma) for q in self.calls]).float()
        if timesteps is not None:
            asked = torch.as_tensor(timesteps, dtype=torch.float32).cpu()
            if not torch.allclose(asked, own, rtol=TOLERANCE, atol=0):
                raise SettingsError(
                    f"this scheduler steps on its solver's own timesteps "
                    f"{[round(t, 6) for t in own.tolist()]}; leave out timesteps= "
                    f"(got {asked.tolist()})"
                )
        self.timesteps = own.to(device) if device is not None else own
        self._step_index = 0
        self._outputs = []
        self._pending: Query | None = None
        self._start: Tensor | None = None

    def set_begin_index(self, begin_index: int = 0) -> None:
        """Sampling starts at the solver's first call: only 0 is accepted."""
        if begin_index != 0:
            raise SettingsError(
                f"a spanlift solver samples from its start: begin_index must be 0, got "
                f"{begin_index} (image-to-image strength < 1 is not supported)"
            )

    @property
    def step_index(self) -> int | None:
        return self._step_index

    @property
    def begin_index(self) -> int:
        return 0

    def scale_model_input(self, sample: Tensor, timestep: Any = None) -> Tensor:
        """The model's input is the sample itself (the conversion is in `step`)."""
        return sample

    def step(
        self,
        model_output: Tensor,
        timestep: Any,
        sample: Tensor,
        return_dict: bool = True,
        **unused: Any,
    ) -> SchedulerOutput | tuple[Tensor]:
        """The next model input (or, after the last call, the solver's endpoint) from the model's
        output on `sample` at `timestep` (module docstring). `unused`: the keywords pipelines
        pass to stochastic schedulers (generator, eta); a solver is deterministic."""
        k = self._checked_step(timestep, sample)
        x_s = from_pipeline(self.form, sample).float()
        if k == 0:
            self.solver.to(sample.device)
            self._start = x_s / self.input_scale
            self._pending = self._replayed(k, self._start, [])
        query = self._pending
        output = from_pipeline(self.form, model_output).float()
        self._outputs.append(denoised(self.form, x_s, query.sigma, output))
        if k + 1 < self.nfe:
            self._pending = self._replayed(k + 1, self._start, self._outputs)
            following = model_input(self.form, self._pending.x, self._pending.sigma)
        else:
            following = replay(self.solver, self._start, self._outputs)
        self._step_index = k + 1
        prev_sample = to_pipeline(self.form, following).to(sample.dtype)
        return SchedulerOutput(prev_sample=prev_sample) if return_dict else (prev_sample,)

    # -- checks ----------------------------------------------------------------------------------

    def _replayed(self, k: int, start: Tensor, outputs: list[Tensor]) -> Query:
        """The solver's k-th call by replay, its σ checked against the dry run's."""
        query = replay(self.solver, start, outputs)
        expected = self.calls[k].sigma
        if not isinstance(query, Query) or not torch.isclose(
            query.sigma.cpu().double(), expected.double(), rtol=TOLERANCE, atol=0
        ):
            raise RuntimeError(
                f"solver {self.spec.label()} asked for σ={getattr(query, 'sigma', None)} at its "
                f"call {k}, not the σ={float(expected):g} of its dry run: its calls depend on "
                f"the model's outputs, which a pipeline's fixed timesteps cannot follow"
            )
        return query

    def _checked_step(self, timestep_value: Any, sample: Tensor) -> int:
        """The step's index; a step past the NFE, before set_timesteps, at another timestep or on
        latents of another shape is refused."""
        if self._step_index is None or self.timesteps is None:
            raise SettingsError("call set_timesteps(num_inference_steps=NFE) before step")
        k = self._step_index
        if k >= self.nfe:
            raise SettingsError(
                f"step called {k + 1} times; this scheduler takes num_inference_steps={self.nfe} "
                f"steps (call set_timesteps again to sample anew)"
            )
        self.check_latents(sample)
        expected = self.timesteps[k].cpu().double()
        got = torch.as_tensor(timestep_value).reshape(-1)[0].cpu().double()
        if not torch.isclose(got, expected, rtol=TOLERANCE, atol=1e-9):
            raise SettingsError(
                f"step {k} got timestep {float(got):g}, expected {float(expected):g}: this "
                f"scheduler steps on its own timesteps, in order"
            )
        return k

    def check_latents(self, sample: Tensor) -> None:
        """The pipeline's latents have the shape the solver was exported for: the same backbone
        family (dimensions and channels); the same size where it matters (FLUX's packing, a
        spatial operator)."""
        expected, got = pipeline_shape(self.form), tuple(sample.shape[1:])
        if got == expected:
            return
        channels = -1 if self.form.packed else 0
        same_family = len(got) == len(expected) and got[channels] == expected[channels]
        where = (
            f"this scheduler was exported for {self.config.backbone} latents of shape "
            f"{tuple(expected)} per sample, the pipeline's are {got}"
        )
        if not same_family:
            raise SettingsError(
                f"{where}: a pipeline of another model family; export the solver from a fit on "
                f"this pipeline's model"
            )
        if self.form.packed or has_spatial_operator(self.solver):
            raise SettingsError(
                f"{where}: its solver was fitted at latent size {tuple(self.form.shape)}; call "
                f"the pipeline at that resolution"
            )

    # -- folders ---------------------------------------------------------------------------------

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> None:
        """scheduler_config.json (ConfigMixin) and solver.safetensors beside it."""
        super().save_pretrained(save_directory, **kwargs)
        state = {
            k: v.detach().cpu().contiguous().clone() for k, v in self.solver.state_dict().items()
        }
        with atomic_write(Path(save_directory) / STATE_FILE) as partial:
            save_file(state, str(partial), metadata={"format": "spanlift"})

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | Path,
        subfolder: str | None = None,
        **kwargs: Any,
    ) -> "SpanLiftScheduler":
        """The scheduler saved in a local folder (`spanlift export` or `save_pretrained`);
        nothing is downloaded. A missing file or another format version is a CheckpointError."""
        folder = Path(pretrained_model_name_or_path).expanduser() / (subfolder or "")
        config = read_config(folder)
        scheduler = cls.from_config(config, **kwargs)
        try:
            state = load_file(str(folder / STATE_FILE))
        except Exception as exc:
            raise CheckpointError(
                f"scheduler folder {folder}: {STATE_FILE} is missing or unreadable "
                f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); export it "
                f"again with spanlift export"
            ) from None
        scheduler.load_solver_state(state)
        return scheduler


def read_config(folder: Path) -> dict[str, Any]:
    """scheduler_config.json of a spanlift scheduler folder, of this format version."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(
            f"scheduler folder {folder} has no {CONFIG_FILE}; write one with "
            f"spanlift export RUN_ID --to diffusers {folder}"
        )
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise CheckpointError(f"{path} is not JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("_class_name") != SpanLiftScheduler.__name__:
        raise CheckpointError(f"{path} is not a {SpanLiftScheduler.__name__} configuration")
    version = config.get("spanlift_format")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {version!r}; this spanlift reads version "
            f"{FORMAT_VERSION}: export the solver again with this spanlift"
        )
    return config


def scheduler_for(solver: Solver, backbone: Any) -> SpanLiftScheduler:
    """The scheduler of a solver built or fitted for `backbone`, its state the solver's."""
    form: PipelineForm = backbone.pipeline_form()
    settings = {k: v for k, v in solver.spec.settings.items() if k != "base_checkpoint"}
    spec = SolverSpec(solver.spec.name, solver.spec.nfe, solver.spec.schedule, settings)
    scheduler = SpanLiftScheduler(
        solver=as_text_paths(spec.to_dict()),
        backbone=backbone.name,
        parameterisation=form.parameterisation,
        latent_shape=list(form.shape),
        sigma_min=float(backbone.sigma_min),
        sigma_max=float(backbone.sigma_max),
        num_train_timesteps=form.train_timesteps,
        packed=form.packed,
        backbone_identity=backbone.identity(),
    )
    scheduler.load_solver_state({k: v.detach().cpu() for k, v in solver.state_dict().items()})
    scheduler.calls  # noqa: B018  (a solver no pipeline can drive is refused here)
    return scheduler


def export_diffusers(solver: Solver, backbone: Any, folder: Path) -> SpanLiftScheduler:
    """`folder` as `SpanLiftScheduler.from_pretrained` reads it, for `solver` on `backbone`."""
    scheduler = scheduler_for(solver, backbone)
    scheduler.save_pretrained(folder)
    return scheduler
