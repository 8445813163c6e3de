"""Replicates of one fit (one per fit seed) side by side: one process each, one torch thread each.

A fit on one thread gives the same numbers in any process, so the replicates fitted side by side
equal those fitted one after another with one thread (`spanlift fit --threads 1`). Each process
loads the backbone and reads the teacher sets from the cache (the caller generates them first),
and its validation blocks are read or generated there as its comparisons need them (a block two
processes both generate is written once: `teacher.atomic_folder`). Only the first process shows
its progress bars (the others run at the same pace).

A two-stage solver's replicates are handed out stage by stage: every fit seed's base first, then
the solvers on them. Three SpanLift replicates on two processes then take three rounds of one
stage (two bases; a base and a SpanLift; two SpanLifts) where whole replicates take four. A stage
whose base another process is still fitting waits for it (`FitCache`'s lock), never refits it.
"""

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from spanlift.platform.fitting.compare import Row, compare, fit_spec
from spanlift.platform.fitting.settings import FitSettings
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import base_spec


@dataclass(frozen=True)
class Replicates:
    """What every replicate shares: the backbone by name, the seeds of each role, the cache of
    teacher sets, the working folder and the fit settings (their seed replaced per replicate)."""

    backbone: str
    backbone_options: dict[str, Any]
    seeds: dict[str, range]
    cache: Path
    workdir: Path
    settings: FitSettings


def fit_side_by_side(
    spec: SolverSpec, shared: Replicates, seeds: list[int], jobs: int, two_stages: bool = False
) -> Iterator[Row]:
    """The comparison row of each fit seed, in the order of `seeds`, each as soon as it and
    those before it are fitted, in `jobs` processes of one thread each; `two_stages`: `spec` is
    fitted on a base fitted first (`solvers.loading.needs_fitted_base`)."""
    context = get_context("spawn")  # a forked torch may hang in its thread pools
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=one_thread)
    try:
        if two_stages and len(seeds) > jobs:
            for index, seed in enumerate(seeds):
                pool.submit(fit_base, base_spec(spec), shared, seed, index == 0)
        futures = [
            pool.submit(fit_one, spec, shared, seed, index == 0) for index, seed in enumerate(seeds)
        ]
        for future in futures:
            yield future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown()


def one_thread() -> None:
    torch.set_num_threads(1)


def fit_one(spec: SolverSpec, shared: Replicates, seed: int, progress: bool) -> Row:
    """One replicate's row, in a process of its own."""
    backbone, (train, test), validation = replicate_sets(shared, progress, ("train", "test"))
    settings = replace(shared.settings, seed=seed)
    (row,) = compare(
        [spec], backbone, train, test, settings, shared.workdir, progress, validation=validation
    )
    return row


def fit_base(base: SolverSpec, shared: Replicates, seed: int, progress: bool) -> None:
    """One replicate's base, fitted into the fit cache where its solver's stage finds it."""
    backbone, (train,), validation = replicate_sets(shared, progress, ("train",))
    settings = replace(shared.settings, seed=seed)
    fit_spec(base, backbone, train, settings, shared.workdir, progress, validation=validation)


def replicate_sets(
    shared: Replicates, progress: bool, roles: tuple[str, ...]
) -> tuple[Any, list[Any], Any]:
    """The backbone, the teacher sets of `roles` read from the cache, and the validation
    blocks."""
    from spanlift.backbones import load_backbone
    from spanlift.platform.sampling.teacher import load_or_generate
    from spanlift.platform.sampling.validation_blocks import ValidationBlocks

    backbone = load_backbone(shared.backbone, **shared.backbone_options)
    sets = [
        load_or_generate(shared.cache, backbone, shared.seeds[role], progress=False)
        for role in roles
    ]
    validation = ValidationBlocks(
        shared.cache, backbone, shared.seeds["validation"], progress=progress
    )
    return backbone, sets, validation
