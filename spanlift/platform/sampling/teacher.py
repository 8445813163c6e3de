"""Teacher endpoints: noise (and conditioning) → teacher rollout endpoint, cached by content hash.

A cache entry is a folder `teacher-<key>/`, where `key` hashes everything that determines the
endpoints: the backbone's identity, the teacher solver spec, the seeds and the format version.
Noise for seed s is `randn(shape, Generator(s))`, so any subset of seeds can be generated anywhere
and in any batch. A conditional backbone's conditioning of each seed (past radar frames) is stored
beside its noise, and so are its observations (the frames that really followed), the target of
fits supervised by what was observed instead of by the teacher.

Trajectory-supervised solvers (AMED, EPD) match the teacher at their own grid σ_1 … σ_N too. An
entry may therefore also hold the teacher's states at requested σ values: the teacher then runs on
the union of its own grid and the requested σ (so it passes through each of them exactly; an
iPNDM teacher spends one more evaluation per added point), and the requested σ enter the key.

The folder holds two files (the layout `arrow-ipc`):

    teacher.arrow   an uncompressed Arrow IPC file (Feather v2) of ONE record batch, one row per
                    seed: `seed` int64, then `noise`, `endpoint` and, when the entry has them,
                    `cond`, `observed`, `states`, each a FixedSizeList of float32 (the sample
                    flattened; `states` is (S, *shape) per seed). Each column's values are
                    therefore one contiguous buffer of the file.
    manifest.json   {"format", "layout": "arrow-ipc", "key", "count", "shape" (noise and
                    endpoint), "shapes" (of the optional columns), "files" ({name: SHA-256}),
                    "state_sigmas", "teacher" (the solver spec), and the writer's metadata}

Entries are written to a temporary folder and renamed, so a crash never leaves a partial entry.
Reading verifies the file's SHA-256 (streamed), then maps it copy-on-write: the TeacherSet's
tensors are views of the mapping, so a read costs no copy, pages are loaded as they are used, and
processes of one node share them through the page cache. A tensor written in place gets private
pages of its process; the file never changes. Entries written before this layout (a manifest
without `layout`: Parquet shards `part-NNNNN.parquet` of the same columns) are still read, by
copying their shards into memory. The layout is not part of the key, which names the content.
"""

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import CacheError, SettingsError
from spanlift.files import file_sha256
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.solvers import SOLVERS, Solver, SolverSpec, build_solver

FORMAT = "spanlift-teacher/2"
DEFAULT_TEACHER = SolverSpec("ipndm", nfe=35, schedule="edm", settings={"order": 4})
LAYOUT = "arrow-ipc"
"""The manifest's `layout` of entries written now (module docstring); absent: Parquet shards."""
ENTRY_FILE = "teacher.arrow"


OPTIONAL = ("cond", "observed", "states")
"""Columns only some entries have: conditioning and observations (conditional backbones), and
the teacher's states at requested σ (trajectory entries), one row per seed."""


@dataclass
class TeacherSet:
    """Seeds, the noise they give and the teacher's endpoints, as float32 tensors (N, *shape);
    for conditional backbones also each seed's conditioning and observations."""

    seeds: Tensor
    noise: Tensor
    endpoints: Tensor
    key: str = ""
    cond: Tensor | None = None
    observed: Tensor | None = None
    states: Tensor | None = None
    """(N, S, *shape): the teacher's state at each of `state_sigmas` (trajectory entries)."""
    state_sigmas: tuple[float, ...] = ()
    teacher: SolverSpec = DEFAULT_TEACHER
    folder: Path | None = None
    """The cache entry it was read from (None: generated in memory), beside which entries derived
    from it (model statistics) are kept."""

    def __len__(self) -> int:
        return len(self.seeds)

    def subset(self, index: slice | Tensor) -> "TeacherSet":
        def part(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[index]

        return replace(
            self,
            seeds=self.seeds[index],
            noise=self.noise[index],
            endpoints=self.endpoints[index],
            cond=part(self.cond),
            observed=part(self.observed),
            states=part(self.states),
        )

    def states_at(self, sigmas: Sequence[float]) -> Tensor:
        """(N, S, *shape) teacher states at `sigmas` (the last may be the endpoint's σ_min)."""
        stored = {round(s, SIGMA_DIGITS): j for j, s in enumerate(self.state_sigmas)}
        missing = [s for s in sigmas if round(float(s), SIGMA_DIGITS) not in stored]
        if self.states is None or missing:
            have = ", ".join(f"{s:.6g}" for s in self.state_sigmas) or "none"
            raise CacheError(
                f"teacher set {self.key or '(unsaved)'} has no states at σ = "
                f"{', '.join(f'{float(s):.6g}' for s in missing or sigmas)} (it has: {have}); "
                "generate a trajectory entry for this solver's grid (`trajectory_teacher`)"
            )
        return self.states[:, [stored[round(float(s), SIGMA_DIGITS)] for s in sigmas]]

    def target(self, supervision: str) -> Tensor:
        """What a fit matches: the teacher's endpoints, or the observations ("observed")."""
        if supervision == "teacher":
            return self.endpoints
        if self.observed is None:
            raise SettingsError(
                "fit target 'observed' needs a backbone with observations (nowcasting); "
                "this teacher set has none"
            )
        return self.observed


SIGMA_DIGITS = 9
"""Requested σ are matched and hashed rounded to this many decimals."""


def requested_sigmas(sigmas: Sequence[float] | Tensor) -> tuple[float, ...]:
    """The σ a trajectory entry stores: rounded, each once, in decreasing order."""
    return tuple(sorted({round(float(s), SIGMA_DIGITS) for s in sigmas}, reverse=True))


def teacher_key(
    backbone: Backbone,
    teacher: SolverSpec,
    seeds: Sequence[int],
    state_sigmas: Sequence[float] = (),
) -> str:
    seed_digest = hashlib.sha256(np.asarray(seeds, dtype=np.int64).tobytes()).hexdigest()
    content = {
        "format": FORMAT,
        "backbone": backbone.identity(),
        "teacher": teacher.to_dict(),
        "seeds": seed_digest,
    }
    if state_sigmas:  # endpoint-only entries keep their keys
        content["state_sigmas"] = list(requested_sigmas(state_sigmas))
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:24]


def teacher_solver(
    backbone: Backbone, teacher: SolverSpec, state_sigmas: Sequence[float] = ()
) -> tuple[Solver, list[int]]:
    """The teacher solver, on its own grid merged with `state_sigmas`, and the grid indices of
    the requested σ. A σ outside the teacher's [σ_end, σ_max] cannot be served."""
    solver = build_solver(teacher, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    if not state_sigmas:
        return solver, []
    wanted = requested_sigmas(state_sigmas)
    own = solver.sigmas
    low, high = float(own[-1]), float(own[0])
    outside = [s for s in wanted if not low - 1e-9 <= s <= high + 1e-9]
    if outside:
        raise CacheError(
            f"the teacher {teacher.label()} runs from σ = {high:.6g} to {low:.6g}; it cannot "
            f"give states at σ = {', '.join(f'{s:.6g}' for s in outside)}; run the teacher on "
            "the student's schedule (a sweep's `teacher.schedule`)"
        )
    own_rounded = {round(s, SIGMA_DIGITS) for s in own.tolist()}
    grid = sorted([*own.tolist(), *(s for s in wanted if s not in own_rounded)], reverse=True)
    merged = SOLVERS.get(teacher.name).build(
        torch.tensor(grid, dtype=torch.float64), backbone.shape[0], **teacher.settings
    )
    merged.spec = teacher
    position = {round(s, SIGMA_DIGITS): j for j, s in enumerate(grid)}
    return merged, [position[s] for s in wanted]


@torch.no_grad()
def generate_teacher(
    backbone: Backbone,
    seeds: Sequence[int],
    teacher: SolverSpec = DEFAULT_TEACHER,
    batch_size: int | None = None,
    progress: bool = True,
    device: str | torch.device | None = None,
    state_sigmas: Sequence[float] = (),
) -> TeacherSet:
    """Run the teacher solver from every seed's noise on `device` (default: where the backbone
    is, which it then stays on), `batch_size` seeds at a time (default: the backbone's
    `sampling_batch()` there); returns CPU float32 tensors. With `state_sigmas`, also the
    teacher's states there (see the module docstring)."""
    if device is None:
        device = backbone.device
    else:
        backbone = backbone.to(device)
    batch_size = batch_size or backbone.sampling_batch()
    solver, picks = teacher_solver(backbone, teacher, state_sigmas)
    solver = solver.to(device)
    noise, endpoints, states = seed_noise(seeds, backbone.shape), [], []
    cond, observed = backbone.conditioning(seeds), backbone.observations(seeds)
    bar = tqdm(
        total=len(seeds), desc=f"teacher {teacher.label()} nfe={solver.nfe}", disable=not progress
    )
    for start in range(0, len(seeds), batch_size):
        batch = noise[start : start + batch_size].to(device)
        batch_cond = None if cond is None else cond[start : start + batch_size].to(device)
        endpoint, kept = rollout_keeping(
            solver, conditioned(backbone, batch_cond), backbone.prior(batch), picks
        )
        endpoints.append(endpoint.cpu())
        if picks:
            states.append(torch.stack([kept[j] for j in picks], dim=1).cpu())
        bar.update(len(batch))
    bar.close()
    seeds_t = torch.as_tensor(list(seeds), dtype=torch.int64)
    return TeacherSet(
        seeds_t,
        noise,
        torch.cat(endpoints).float(),
        teacher_key(backbone, teacher, seeds, state_sigmas),
        None if cond is None else cond.float(),
        None if observed is None else observed.float(),
        torch.cat(states).float() if picks else None,
        requested_sigmas(state_sigmas),
        teacher,
    )


def rollout_keeping(
    solver: Solver, denoiser: Callable[[Tensor, Tensor], Tensor], x: Tensor, picks: Sequence[int]
) -> tuple[Tensor, dict[int, Tensor]]:
    """The endpoint of a rollout from x and the states at grid positions `picks` (0: x itself);
    the other states are dropped as the rollout goes, so a batch never holds its whole path."""
    wanted = set(picks)
    kept = {0: x} if 0 in wanted else {}
    for position, step in enumerate(solver.steps(denoiser, x), start=1):
        x = step.x_next
        if position in wanted:
            kept[position] = x
    return x, kept


def entry_batch(teacher: TeacherSet) -> pa.RecordBatch:
    """`teacher` as the entry file's one record batch (module docstring), without copying
    float32 tensors that are contiguous."""

    def column(t: Tensor) -> pa.Array:
        flat = np.ascontiguousarray(t.reshape(len(t), -1).numpy(), dtype=np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])

    columns = {
        "seed": pa.array(teacher.seeds.numpy().astype(np.int64, copy=False)),
        "noise": column(teacher.noise),
        "endpoint": column(teacher.endpoints),
    }
    for name in OPTIONAL:
        if getattr(teacher, name) is not None:
            columns[name] = column(getattr(teacher, name))
    return pa.record_batch(columns)


def write_entry_file(path: Path, batch: pa.RecordBatch) -> None:
    """`batch` as an uncompressed Arrow IPC file at `path`."""
    options = pa.ipc.IpcWriteOptions(compression=None)
    with pa.ipc.new_file(str(path), batch.schema, options=options) as writer:
        writer.write_batch(batch)


@contextmanager
def atomic_folder(folder: Path) -> Iterator[Path]:
    """A temporary folder beside `folder`, renamed to it when the block ends (removed if the
    block fails); when another writer finished the same entry first, theirs is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        yield tmp
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "manifest.json").exists():
                raise
            shutil.rmtree(tmp)  # another writer finished the same entry first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_teacher(folder: Path, teacher: TeacherSet, metadata: dict) -> Path:
    """Write `teacher` as `teacher.arrow` + `manifest.json` (module docstring) into `folder`
    atomically (`atomic_folder`); `metadata` joins the manifest."""
    with atomic_folder(folder) as tmp:
        write_entry_file(tmp / ENTRY_FILE, entry_batch(teacher))
        manifest = {
            "format": FORMAT,
            "layout": LAYOUT,
            "key": teacher.key,
            "count": len(teacher),
            "shape": list(teacher.noise.shape[1:]),
            "shapes": {
                name: list(getattr(teacher, name).shape[1:])
                for name in OPTIONAL
                if getattr(teacher, name) is not None
            },
            "files": {ENTRY_FILE: file_sha256(tmp / ENTRY_FILE)},
            "state_sigmas": list(teacher.state_sigmas),
            "teacher": teacher.teacher.to_dict(),
        }
        (tmp / "manifest.json").write_text(json.dumps({**manifest, **metadata}, indent=2))
    return folder


def read_teacher(folder: Path) -> TeacherSet:
    """Read a cache entry, verifying its files' SHA-256 against the manifest; the tensors of an
    `arrow-ipc` entry are copy-on-write views of its mapped file (module docstring)."""
    manifest = read_manifest(folder)
    layout = manifest.get("layout")
    if layout not in (None, LAYOUT):
        raise CacheError(
            f"teacher cache {folder} has the layout {layout!r}, which this version of spanlift "
            f"cannot read (it reads {LAYOUT!r} and Parquet shards); delete the folder"
        )
    verify_files(folder, manifest["files"])
    try:
        if layout == LAYOUT:
            columns = mapped_columns(folder / ENTRY_FILE)
        else:
            columns = parquet_columns(folder, sorted(manifest["files"]))
    except (pa.ArrowException, ValueError, KeyError) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CacheError(
            f"teacher cache {folder} cannot be read ({why}); delete the folder"
        ) from None
    return replace(teacher_set(manifest, columns), folder=Path(folder))


def read_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        missing = [field for field in ("key", "files", "shape", "shapes") if field not in manifest]
        if missing:
            raise KeyError(", ".join(missing))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(
            f"teacher cache {folder} has no readable manifest ({exc}); delete the folder"
        ) from None
    return manifest


def verify_files(folder: Path, files: dict[str, str]) -> None:
    """Each file's SHA-256 (read in blocks, never held whole) is the manifest's."""
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            raise CacheError(f"teacher cache file {path} is missing; delete {folder}")
        if file_sha256(path) != expected:
            raise CacheError(
                f"teacher cache file {path} is corrupt (checksum mismatch); delete {folder}"
            )


def mapped_columns(path: Path) -> dict[str, np.ndarray]:
    """Each column of the entry file as a flat writable view of one private copy-on-write
    mapping of it (`seed` int64, the others float32 values)."""
    mapping = np.memmap(path, mode="c")
    reader = pa.ipc.open_file(pa.py_buffer(mapping))
    if reader.num_record_batches != 1:
        raise ValueError(f"{reader.num_record_batches} record batches, expected 1")
    batch = reader.get_batch(0)
    return {name: mapped_view(mapping, batch.column(name)) for name in batch.schema.names}


def mapped_view(mapping: np.memmap, column: pa.Array) -> np.ndarray:
    """The values of `column` (read from `mapping` without copying) as a view of `mapping`."""
    if pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    located = column.to_numpy(zero_copy_only=True)
    if not located.nbytes:
        return located.copy()
    start = located.ctypes.data - mapping.ctypes.data
    if start < 0 or start + located.nbytes > len(mapping):
        raise ValueError(f"column of type {column.type} is not a buffer of the file")
    return mapping[start : start + located.nbytes].view(dtype=located.dtype, type=np.ndarray)


def parquet_columns(folder: Path, names: list[str]) -> dict[str, np.ndarray]:
    """The columns of an entry in the earlier layout (Parquet shards), concatenated in memory."""
    import pyarrow.parquet as pq

    tables = [pq.read_table(folder / name) for name in names]

    def values(chunks: pa.ChunkedArray) -> np.ndarray:
        array = chunks.combine_chunks()
        return (array.flatten() if pa.types.is_fixed_size_list(array.type) else array).to_numpy()

    return {
        column: np.concatenate([values(table[column]) for table in tables])
        for column in tables[0].column_names
    }


def teacher_set(manifest: dict, columns: dict[str, np.ndarray]) -> TeacherSet:
    """The TeacherSet of an entry's flat columns, shaped as the manifest says (views)."""
    shapes = {"noise": manifest["shape"], "endpoint": manifest["shape"], **manifest["shapes"]}
    tensors = {
        name: torch.from_numpy(columns[name]).reshape(-1, *shape) for name, shape in shapes.items()
    }
    spec = manifest.get("teacher")
    return TeacherSet(
        torch.from_numpy(columns["seed"]),
        tensors["noise"],
        tensors["endpoint"],
        manifest["key"],
        tensors.get("cond"),
        tensors.get("observed"),
        tensors.get("states"),
        tuple(manifest.get("state_sigmas", ())),
        SolverSpec.from_dict(spec) if spec else DEFAULT_TEACHER,
    )


def teacher_folder(
    cache_dir: Path,
    backbone: Backbone,
    teacher: SolverSpec,
    seeds: Sequence[int],
    state_sigmas: Sequence[float] = (),
) -> Path:
    """Where the cache entry of (backbone, teacher, seeds, requested states) lives."""
    return Path(cache_dir) / f"teacher-{teacher_key(backbone, teacher, seeds, state_sigmas)}"


def cache_metadata(backbone: Backbone, teacher: SolverSpec) -> dict:
    return {"backbone": backbone.identity(), "teacher": teacher.to_dict()}


def load_or_generate(
    cache_dir: Path,
    backbone: Backbone,
    seeds: Sequence[int],
    teacher: SolverSpec = DEFAULT_TEACHER,
    progress: bool = True,
    state_sigmas: Sequence[float] = (),
) -> TeacherSet:
    """The cached teacher set for (backbone, teacher, seeds[, states at σ]), generating and
    caching it if absent."""
    folder = teacher_folder(cache_dir, backbone, teacher, seeds, state_sigmas)
    if folder.exists():
        return read_teacher(folder)
    result = generate_teacher(
        backbone, seeds, teacher, progress=progress, state_sigmas=state_sigmas
    )
    write_teacher(folder, result, cache_metadata(backbone, teacher))
    return result


def supervision_sigmas(solver: Solver) -> tuple[float, ...]:
    """The σ at which a solver is matched to the teacher: its grid σ_1 … σ_N when it declares
    trajectory supervision; none (the endpoint only) otherwise."""
    if solver.supervision != "trajectory":
        return ()
    return requested_sigmas(solver.sigmas[1:])


def teacher_for(
    solver: Solver, teacher: TeacherSet, backbone: Backbone, cache_dir: Path | None = None
) -> TeacherSet:
    """`teacher`, or for a trajectory-supervised solver the same seeds' teacher entry with the
    states at the solver's grid (from `cache_dir` when given, else generated in memory)."""
    sigmas = supervision_sigmas(solver)
    if not sigmas or set(sigmas) <= set(teacher.state_sigmas):
        return teacher
    seeds = teacher.seeds.tolist()
    if cache_dir is None:
        return generate_teacher(backbone, seeds, teacher.teacher, state_sigmas=sigmas)
    return load_or_generate(cache_dir, backbone, seeds, teacher.teacher, state_sigmas=sigmas)
