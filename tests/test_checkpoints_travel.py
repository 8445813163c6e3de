"""A checkpoint loads wherever it is put: a SpanLift saved on a fitted base names that base's file
in its settings, but carries the base's weights in its own state, so moving the folder (another
node, a copied run folder, another working directory) must not break loading."""

import shutil

import torch

from spanlift.backbones import load_backbone
from spanlift.solvers import SolverSpec, read_checkpoint, save_solver
from spanlift.solvers.loading import build, load_solver


def test_a_spanlift_checkpoint_loads_after_its_folder_moved(tmp_path):
    backbone = load_backbone("gmm")
    base = build(SolverSpec("dyweight", 3), backbone)
    with torch.no_grad():
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    origin = tmp_path / "run"
    base_file = save_solver(origin / "dyweight.pt", base)
    settings = {"base": "dyweight", "base_checkpoint": str(base_file), "hidden_dim": 8}
    spec = SolverSpec("spanlift", 3, settings=settings)
    lifted = build(spec, backbone)
    with torch.no_grad():
        lifted.beta.fill_(0.25)
    save_solver(origin / "spanlift.pt", lifted)
    moved = tmp_path / "elsewhere"
    shutil.move(origin, moved)

    loaded = load_solver(spec, moved / "spanlift.pt", backbone)

    for (name, value), expected in zip(
        loaded.state_dict().items(), lifted.state_dict().values(), strict=True
    ):
        assert torch.equal(value, expected), name
    assert loaded.spec == spec  # the identity (keys, labels) is the saved one


def test_a_checkpoint_whose_settings_hold_a_path_object_reads_back(tmp_path):
    """The Python API lets a setting be a `Path` (a base checkpoint, say); the checkpoint keeps it
    as text, which `weights_only` reading accepts, and the spec read back names the same file."""
    backbone = load_backbone("gmm")
    base_file = save_solver(tmp_path / "dyweight.pt", build(SolverSpec("dyweight", 3), backbone))
    settings = {"base": "dyweight", "base_checkpoint": base_file, "hidden_dim": 8}
    saved = save_solver(
        tmp_path / "spanlift.pt", build(SolverSpec("spanlift", 3, settings=settings), backbone)
    )
    spec = SolverSpec.from_dict(read_checkpoint(saved)["spec"])
    assert spec.settings["base_checkpoint"] == str(base_file)
