"""The sweep YAML schema: the shipped files load, and every kind of bad file names its key."""

import copy
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from spanlift.errors import SettingsError
from spanlift.platform.ray_runtime import TrialBundle, concurrent_trials
from spanlift.platform.sweep.config import SweepConfigError, load_sweep, parse_sweep
from tests.cli_run import ROOT, spanlift

SWEEPS = ROOT / "sweeps"

VALID = {
    "experiment": "t",
    "backbone": "gmm",
    "solvers": [
        {"name": "ipndm", "nfe": [3, 4], "settings": {"order": 3}},
        {
            "name": "spanlift",
            "nfe": 3,
            "settings": {"base": "dyweight"},
            "search": {"kernel_size": [3, 5], "hidden_dim": [16, 32]},
        },
    ],
}


@pytest.mark.parametrize(
    ("name", "trials"),
    [
        ("demo", 12),
        ("digits_nfe", 23),
        ("digits_fid", 23),
        ("digits_paper", 50),
        ("gmm_smoke", 2),
        ("operator_ablation", 6),
        ("nowcast_synth", 8),
        ("sana", 12),
        ("flux", 12),
    ],
)
def test_shipped_sweeps_load(name: str, trials: int) -> None:
    config = load_sweep(SWEEPS / f"{name}.yaml")
    assert len(config.trials()) == trials
    fitted_as = {(spec.key(), str(config.fit_of(entry))) for entry, spec in config.grid()}
    assert len(fitted_as) == trials  # no configuration twice


def test_grid_is_the_product_of_nfe_and_search_lists() -> None:
    config = parse_sweep(VALID)
    specs = config.trials()
    assert [s.nfe for s in specs[:2]] == [3, 4]
    lifted = [s.settings for s in specs[2:]]
    assert {(s["kernel_size"], s["hidden_dim"]) for s in lifted} == {
        (3, 16),
        (3, 32),
        (5, 16),
        (5, 32),
    }
    assert all(s["base"] == "dyweight" for s in lifted)
    assert config.algorithm == "grid" and config.tracking_uri is None  # resolved at run time


def test_operator_ablation_covers_the_papers_operators() -> None:
    specs = load_sweep(SWEEPS / "operator_ablation.yaml").trials()
    lifted = [s.settings for s in specs if s.name == "spanlift"]
    assert [s["operator"] for s in lifted] == [
        "scalar",
        "pointwise",
        "spatial",
        "spatial",
        "spatial",
    ]
    assert [s.get("kernel_size") for s in lifted[2:]] == [3, 5, 9]


def changed(path: list, value: object) -> dict:
    data = copy.deepcopy(VALID)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (changed(["colour"], "red"), "colour: unknown key"),
        (changed(["backbone"], "imagenet"), "backbone.name: unknown backbone 'imagenet'"),
        (changed(["solvers", 0, "name"], "rk45"), "solvers[0].name: unknown solver 'rk45'"),
        (changed(["solvers", 0, "nfe"], "three"), "solvers[0].nfe: expected an NFE"),
        (changed(["solvers", 1, "search", "kernel_size"], [3, 4]), "solvers[1].settings"),
        (changed(["solvers", 1, "search", "kernel_size"], 3), "solvers[1].search.kernel_size"),
        (changed(["solvers"], []), "solvers: expected at least one solver"),
        (
            changed(["search"], {"algorithm": "simplex"}),
            "search.algorithm: expected one of grid, ",
        ),
        (changed(["search"], {"mode": "best"}), "search.mode"),
        (changed(["fit"], {"lr": -1.0}), "fit: fit setting lr must be a positive number"),
        (changed(["fit"], {"epochs": 3}), "fit.epochs: unknown key"),
        (changed(["solvers", 0, "fit"], {"epochs": 3}), "solvers[0].fit.epochs: unknown key"),
        (
            changed(["solvers", 0, "fit"], {"target": "future"}),
            "solvers[0].fit: fit setting target must be one of teacher, observed",
        ),
        (changed(["solvers", 0, "label"], 3), "solvers[0].label: expected a str"),
        (changed(["resources"], {"workers": 0}), "resources.workers: expected a positive integer"),
        (
            changed(["resources"], {"use_gpu": "yes"}),
            "resources.use_gpu: expected true, false or auto",
        ),
        (changed(["teacher"], {"nfe": 0}), "teacher.nfe: expected a positive integer"),
        (
            changed(["teacher"], {"solver": "heun", "settings": {"order": 3}}),
            "teacher.settings: solver 'heun' has no setting 'order'; its settings are: afs",
        ),
        (changed(["teacher"], {"solver": "rk45"}), "teacher.solver: unknown solver 'rk45'"),
        (changed(["evaluation"], {"metrics": ["fid", "is"]}), "evaluation.metrics: expected"),
        (changed(["evaluation"], {"detector": "lenet"}), "evaluation.detector: expected one of"),
        (
            changed(["evaluation"], {"reference": "imagenet"}),
            "evaluation.reference: FID reference",  # neither keyword: a statistics file
        ),
        (changed(["evaluation"], {"samples": 0}), "evaluation.samples: expected a positive"),
        (
            changed(["evaluation"], {"skill_convention": "pysteps"}),
            "evaluation.skill_convention: expected one of exact, earthformer",
        ),
        (changed(["storage"], "ftp://host/runs"), "storage: storage 'ftp://host/runs': ftp://"),
        (changed(["storage"], "s3://"), "storage: storage 's3://' names no bucket"),
        (
            changed(["resources"], {"worker_gpu": 1.5}),
            "resources.worker_gpu: expected a fraction of one GPU (0 < x ≤ 1) or a whole number",
        ),
        (changed(["resources"], {"evaluator_gpu": 0}), "resources.evaluator_gpu: expected a pos"),
        (
            changed(["resources"], {"workers": 3}),
            "fit.batch_size: 32 is the batch of one update over all 3 workers",
        ),
        (changed(["fit"], {"checkpoint": "layers"}), "fit: fit setting checkpoint must be one of"),
        (
            changed(["evaluation"], {"batch_size": 0}),
            "evaluation.batch_size: expected a positive integer or auto",
        ),
        ({k: v for k, v in VALID.items() if k != "experiment"}, "experiment: expected a value"),
        (["not", "a", "mapping"], "top level: expected a mapping"),
    ],
)
def test_bad_sweeps_name_the_key(data: object, message: str) -> None:
    with pytest.raises(SweepConfigError) as error:
        parse_sweep(data, "bad.yaml")
    assert str(error.value).startswith("bad.yaml: ")
    assert message in str(error.value)


def test_unreachable_nfe_names_the_solver_entry() -> None:
    data = changed(["solvers", 0], {"name": "heun", "nfe": 4})
    with pytest.raises(SweepConfigError, match=r"solvers\[0\]\.nfe: .*heun"):
        parse_sweep(data)


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("experiment: [unclosed\n")
    with pytest.raises(SweepConfigError, match="not valid YAML"):
        load_sweep(broken)
    with pytest.raises(SweepConfigError, match="sweep file not found"):
        load_sweep(tmp_path / "missing.yaml")


@pytest.mark.e2e
@pytest.mark.parametrize("store", [[], ["--tracking-uri", "sqlite:///mlflow.db"]])
def test_a_bad_sweep_file_is_answered_before_ray_tune_and_mlflow_load(
    tmp_path: Path, store: list[str]
) -> None:
    """A typo costs the user the sweep file's reading, not the seconds of the driver's imports;
    a store given on the command line is checked without loading MLflow."""
    path = tmp_path / "typo.yaml"
    path.write_text("experiment: typo\nbackbone: gmm\ncolour: red\n")
    result = spanlift(tmp_path, "sweep", str(path), *store, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 2 and f"{path}: colour: unknown key" in result.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "spanlift.platform.sweep.config" in imported  # the profile was read
    assert not imported & {"ray", "ray.tune", "mlflow"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fit: {iterations: 10}\nfit: {iterations: 20}\n", "key 'fit' twice (lines 1 and 2)"),
        ("fit:\n  lr: 0.1\n  lr: 0.2\n", "key 'lr' twice (lines 2 and 3)"),
    ],
)
def test_a_key_written_twice_is_refused(tmp_path: Path, text: str, message: str) -> None:
    """YAML itself keeps the last of two equal keys: a sweep whose `fit:` is written twice would
    run with one of them silently."""
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(SweepConfigError, match=re.escape(f"{path}: {message}")):
        load_sweep(path)


def test_roundtrip_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(VALID, sort_keys=False))
    assert load_sweep(path).trials() == parse_sweep(VALID).trials()


def test_a_search_metric_the_sweep_never_reports_is_refused() -> None:
    data = {**copy.deepcopy(VALID), "search": {"metric": "fid"}}
    with pytest.raises(SweepConfigError, match=r"search.metric: 'fid' is not a metric.*evaluation"):
        parse_sweep(data)
    data["evaluation"] = {"metrics": ["fid"]}
    assert parse_sweep(data).metric == "fid"
    with pytest.raises(SweepConfigError, match="'rsme' is not a metric this sweep produces"):
        parse_sweep({**copy.deepcopy(VALID), "search": {"metric": "rsme"}})


def test_relative_paths_resolve_against_the_files_folder(tmp_path: Path) -> None:
    folder = tmp_path / "experiments"
    folder.mkdir()
    data = {
        **copy.deepcopy(VALID),
        "storage": "../results",
        "evaluation": {"metrics": ["lpips"], "lpips_weights": "weights/alexnet.pth"},
    }
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_sweep(path)
    assert Path(config.storage) == (tmp_path / "results").resolve()
    assert (
        config.evaluation.options["lpips_weights"] == (folder / "weights" / "alexnet.pth").resolve()
    )


@pytest.mark.parametrize(
    ("cpus", "gpus", "use_gpu", "trials"),
    [
        (3.8, 0, False, 2),  # two fits at once
        (2.0, 0, False, 2),  # beside an evaluator: one fit, one trial scoring or waiting
        (1.95, 0, False, 1),  # no room for a second trial's own 0.1 CPU
        (15.0, 1, True, 2),  # one fit's GPU left beside the evaluator's: one fit, one more trial
        (15.0, 2, True, 3),
    ],
)
def test_trials_at_once_always_leave_one_fit_placeable(cpus, gpus, use_gpu, trials) -> None:
    """Fits on Ray Train workers (two of 0.9 CPU): the trials waiting with their own CPUs never
    keep one fit's workers from being placed."""
    bundle = TrialBundle(trial_cpu=0.1, workers=2, worker_cpu=0.9, use_gpu=use_gpu, worker_gpu=0.5)
    assert concurrent_trials(bundle, cpus, gpus) == trials
    assert trials * bundle.trial_cpu + bundle.workers * bundle.worker_cpu <= cpus + 1e-9


@pytest.mark.parametrize(
    ("cpus", "gpus", "use_gpu", "trials"),
    [(2.0, 0, False, 2), (1.7, 0, False, 1), (15.0, 1, True, 1), (15.0, 2, True, 2)],
)
def test_a_one_worker_fit_holds_its_share_in_the_trial_itself(cpus, gpus, use_gpu, trials) -> None:
    """With one worker the fit runs in the trial's own process, which holds the worker's share:
    as many trials at once as shares fit, no Ray Train worker to leave room for."""
    bundle = TrialBundle(trial_cpu=0.1, workers=1, worker_cpu=0.9, use_gpu=use_gpu)
    assert concurrent_trials(bundle, cpus, gpus) == trials
    assert bundle.trial_resources() == {"cpu": 0.9, **({"gpu": 1.0} if use_gpu else {})}


EDM_SWEEPS = {  # file: (reference statistics it names, configurations)
    "edm_cifar10": ("cifar10-32x32.npz", 29),
    "edm_imagenet64": ("imagenet-64x64.npz", 25),
    "edm_ffhq64": ("ffhq-64x64.npz", 25),
    "edm_afhqv2": ("afhqv2-64x64.npz", 21),
    "edm_cifar10_base_solvers": ("cifar10-32x32.npz", 24),
}


@pytest.mark.parametrize("name", sorted(EDM_SWEEPS))
def test_shipped_edm_sweeps_load_once_their_files_are_in_place(name: str, tmp_path: Path) -> None:
    """The EDM grids parse with NVlabs' statistics under models/fid-refs (2048-d stand-ins here);
    the network pickle and the EDM code are read when a trial loads the backbone."""
    import numpy as np

    reference, trials = EDM_SWEEPS[name]
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "models" / "fid-refs").mkdir(parents=True)
    np.savez(
        tmp_path / "models" / "fid-refs" / reference,
        mu=np.zeros(2048, np.float32),
        sigma=np.eye(2048, dtype=np.float32),
    )
    sweep = tmp_path / "sweeps" / f"{name}.yaml"
    sweep.write_text((SWEEPS / f"{name}.yaml").read_text())
    config = load_sweep(sweep)
    assert len(config.trials()) == trials
    assert config.backbone == "edm" and config.backbone_options["allow_pickle"] is True
    assert config.backbone_options["weights"].startswith(str(tmp_path / "models"))
    assert config.backbone_options["code"] == str(tmp_path / "models" / "edm")
    assert (config.teacher.solver.name, config.teacher.solver.nfe) == ("ipndm", 35)
    assert config.fit.loss == "inception" and config.evaluation.samples == 50_000
    assert config.resources.use_gpu is True
    protocols = {spec.schedule for spec in config.trials() if spec.name != "dpm_solver_v3"}
    assert protocols == ({"edm"} if "base_solvers" in name else {"edm", "edm_to_zero"})
    assert {s.schedule for s in config.trials() if s.name == "dpm_solver_v3"} <= {"logsnr"}


def test_a_tpe_trial_keeps_its_entrys_schedule():
    """TPE's per-entry choices rebuild the spec: the entry's σ grid must come with it."""
    from spanlift.platform.sweep.trial import trial_spec

    config = parse_sweep(
        {
            "experiment": "x",
            "backbone": "gmm",
            "solvers": [{"name": "dyweight", "nfe": [3], "schedule": "logsnr"}],
            "search": {"algorithm": "tpe", "num_samples": 1},
        }
    )
    assert trial_spec({"entry": 0, "0.nfe": 3}, config).schedule == "logsnr"


def test_a_storage_uri_on_the_command_line_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch
) -> None:
    """`--storage s3://…` once wrote everything into a local folder named `s3:` and exited 0;
    a URI the product cannot write is refused before anything is written."""
    from spanlift.platform.sweep.driver import run_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(VALID, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError, match="ftp:// cannot be written"):
        run_sweep(path, storage="ftp://host/runs", tracking_uri=f"sqlite:///{tmp_path}/m.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


def test_resources_give_train_workers_their_gpu_share() -> None:
    resources = parse_sweep(
        {**VALID, "resources": {"worker_gpu": 0.25, "use_gpu": True, "worker_cpu": 2}}, "x.yaml"
    ).resources
    assert resources.per_worker() == {"CPU": 2.0, "GPU": 0.25}
    assert replace(resources, use_gpu=False).per_worker() == {"CPU": 2.0}


@pytest.mark.parametrize(
    ("gpus", "evaluators", "expected"),
    [
        (0, 1, False),  # no GPU: CPUs
        (1, 1, True),  # 0.25 per fit + 0.5 for the evaluator: packed on one GPU
        (1, 2, False),  # two half-GPU evaluators and a fit's quarter need 1.25
        (2, 2, True),
    ],
)
def test_auto_packs_gpu_shares_when_they_fit(gpus: float, evaluators: int, expected: bool) -> None:
    resources = parse_sweep(
        {**VALID, "resources": {"worker_gpu": 0.25, "evaluator_gpu": 0.5}}, "x.yaml"
    ).resources
    assert resources.use_gpu == "auto"
    assert resources.uses_gpus(gpus, evaluators) is expected


def test_a_teacher_of_another_solver_takes_none_of_the_default_teachers_settings() -> None:
    """The default teacher is iPNDM of order 4; a file naming another solver (Heun, which has no
    order) gets that solver's own defaults, not `order: 4`."""
    config = parse_sweep({**VALID, "teacher": {"solver": "heun", "nfe": 9}})
    assert (config.teacher.solver.name, config.teacher.solver.settings) == ("heun", {})
    default = parse_sweep({**VALID, "teacher": {"nfe": 20}}).teacher.solver
    assert (default.name, default.nfe, default.settings) == ("ipndm", 20, {"order": 4})


def test_reading_a_sweep_without_fid_loads_no_detector_library() -> None:
    """The FID detectors' libraries (torch-fidelity, torchvision: 1.4 s of every sweep's start on
    2 cores) load only for a sweep that names a detector."""
    read = (
        "import sys; from spanlift.platform.sweep.config import load_sweep; "
        f"load_sweep({str(SWEEPS / 'gmm_smoke.yaml')!r}); "
        "print(sorted({'torch_fidelity', 'torchvision'} & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
