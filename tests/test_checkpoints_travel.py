"""A checkpoint loads wherever it is put: a SpanLift saved on a fitted base names that base's file
in its settings, but carries the base's weights in its own state, so moving the folder (another
node, a copied run folder, another working directory) must not break loading."""

import shutil

import torch

from spanlift.backbones import load_backbone
from spanlift.solvers import SolverSpec, save_solver
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
