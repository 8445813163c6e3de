"""A sweep's teacher pass: where it runs, and that where changes no number."""

from pathlib import Path

import ray
import torch
import yaml

from spanlift.platform.storage import open_storage
from spanlift.platform.sweep.config import load_sweep
from spanlift.platform.sweep.teacher import prepare_teachers, read_entry, sweep_seeds, teacher_chunk

GMM_SMOKE = Path(__file__).parents[1] / "sweeps" / "gmm_smoke.yaml"
SMALL = {"train_samples": 48, "validation_samples": 16, "test_samples": 16}


def test_an_analytic_backbones_teacher_is_made_in_the_driver_as_a_ray_task_makes_it(tmp_path):
    data = yaml.safe_load(GMM_SMOKE.read_text())
    data["teacher"] = {**data["teacher"], **SMALL}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_sweep(path)
    assert not ray.is_initialized()
    teachers = prepare_teachers(config, open_storage(str(tmp_path / "teacher")))
    assert not ray.is_initialized()  # no Ray task, no cluster started for it
    assert teachers.generated == 1
    seeds = list(sweep_seeds(config)["train"])
    as_a_task, _ = teacher_chunk._function(
        config.backbone, config.backbone_options, config.teacher.solver.to_dict(), seeds
    )
    assert torch.equal(read_entry(teachers.train).endpoints, torch.from_numpy(as_a_task))
