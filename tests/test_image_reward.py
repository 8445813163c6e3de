"""ImageReward: unavailable (with the reason) without prompts, files or package; its image input
matches the package's own PIL preprocessing."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from spanlift.backbones.gmm import GaussianMixture
from spanlift.errors import MetricUnavailable
from spanlift.platform.evaluation import evaluator, sample_metrics
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics import image_reward
from tests.cli_run import ROOT


def test_backbone_without_prompts_is_reported_unavailable(tmp_path: Path) -> None:
    setup = EvaluatorSetup("digits", "digits", tmp_path)
    measures, unavailable = sample_metrics.measures_of(
        ("image_reward",), setup, sample_metrics.Traits()
    )
    assert measures == {}
    assert "backbone 'digits' has no prompts" in unavailable["image_reward"]


def test_missing_files_are_named_with_where_they_come_from(tmp_path: Path) -> None:
    (tmp_path / "med_config.json").write_text("{}")
    with pytest.raises(
        MetricUnavailable, match=r"ImageReward\.pt not found in .*THUDM/ImageReward"
    ):
        image_reward.image_reward_files(tmp_path)
    (tmp_path / "ImageReward.pt").write_bytes(b"0")
    assert image_reward.image_reward_files(tmp_path)[0] == tmp_path / "ImageReward.pt"


def test_missing_package_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(image_reward.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MetricUnavailable, match=r"pip install 'spanlift\[imagereward\]'"):
        image_reward.check_package()


class PromptedGmm(GaussianMixture):
    def prompts(self, seeds):
        return [f"a sample from seed {s}" for s in seeds]


def test_evaluator_tells_a_prompted_backbone_from_one_without(tmp_path: Path, monkeypatch) -> None:
    setup = EvaluatorSetup("gmm", "digits", tmp_path)
    assert not Evaluator(setup).prompted()
    monkeypatch.setattr(evaluator, "loaded_backbone", lambda name, options=None: PromptedGmm())
    assert Evaluator(setup).prompted()


def test_prompted_backbone_gets_as_far_as_the_files(tmp_path: Path) -> None:
    setup = EvaluatorSetup("gmm", "digits", tmp_path, options={"image_reward_weights": tmp_path})
    _, unavailable = sample_metrics.measures_of(
        ("image_reward",), setup, sample_metrics.Traits(prompted=True)
    )
    assert "ImageReward.pt, med_config.json not found" in unavailable["image_reward"]


def test_reward_input_matches_the_packages_pil_pipeline() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    pixels = ((images + 1) / 2 * 255).round()
    images = pixels / 255 * 2 - 1  # on the uint8 grid, as a PIL image holds it
    package = transforms.Compose(  # ImageReward's `_transform(224)`
        [
            transforms.Resize(224, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(image_reward.CLIP_MEAN, image_reward.CLIP_STD),
        ]
    )
    expected = torch.stack(
        [package(Image.fromarray(p.permute(1, 2, 0).numpy().astype(np.uint8))) for p in pixels]
    )
    ours = image_reward.reward_input(images)
    assert ours.shape == (2, 3, 224, 224)
    # PIL's bicubic (a = −0.5, 8-bit output) and torch's (a = −0.75) differ slightly.
    assert (ours - expected).abs().mean() < 0.02


SCORE_SCRIPT = """
import json, sys
from pathlib import Path
import torch
from PIL import Image
from spanlift.platform.evaluation.metrics.image_reward import (
    image_reward_state,
    load_image_reward,
)
model = load_image_reward(Path(sys.argv[1]))
images = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
prompts = ["a sample from seed 1", "a digit 7", "seed 3"]
state = image_reward_state(model, images, prompts)
pixels = ((images.expand(-1, 3, -1, -1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1)
package = [model.score(p, Image.fromarray(x.numpy())) for p, x in zip(prompts, pixels)]
print(json.dumps({"count": state.count, "mean": state.mean, "package": package}))
"""


def write_local_image_reward(root: Path) -> Path:
    """A Hugging Face cache with a tiny bert-base-uncased tokenizer, and an ImageReward folder
    whose checkpoint is empty (the package loads it non-strictly: random weights) and whose
    med_config has one text layer, so the whole offline load path runs in seconds."""
    snapshot = root / "hub/models--bert-base-uncased/snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (root / "hub/models--bert-base-uncased/refs").mkdir()
    (root / "hub/models--bert-base-uncased/refs/main").write_text("0" * 40)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "sample", "from", "seed", "digit"]
    (snapshot / "vocab.txt").write_text("\n".join(words + [str(i) for i in range(10)]) + "\n")
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    weights = root / "weights"
    weights.mkdir()
    torch.save({}, weights / "ImageReward.pt")
    config = {
        "architectures": ["BertModel"],
        **{"attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1, "hidden_act": "gelu"},
        **{"hidden_size": 768, "intermediate_size": 512, "num_attention_heads": 12},
        **{"num_hidden_layers": 1, "max_position_embeddings": 64, "vocab_size": 64},
        **{"initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0},
        **{"type_vocab_size": 2, "encoder_width": 768, "add_cross_attention": True},
        "model_type": "bert",
    }
    (weights / "med_config.json").write_text(json.dumps(config))
    return weights


def test_tokenizer_is_read_from_the_cache_and_its_absence_is_an_error(
    tmp_path: Path, monkeypatch
) -> None:
    pytest.importorskip("transformers")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(OSError):  # transformers 5 alone would build one with no vocabulary
        image_reward.bert_tokenizer()
    write_local_image_reward(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    tokenizer = image_reward.bert_tokenizer()
    assert tokenizer("a digit 7").input_ids == [2, 5, 9, 17, 3]  # [CLS] a digit 7 [SEP]
    assert tokenizer.convert_tokens_to_ids(["[DEC]", "[ENC]"]) == [20, 21]
    assert tokenizer.bos_token == "[DEC]" and tokenizer.enc_token_id == 21


@pytest.mark.e2e
@pytest.mark.skipif(
    importlib.util.find_spec("ImageReward") is None,
    reason="the optional image-reward package is not installed (pip install -e '.[imagereward]')",
)
def test_offline_load_and_batched_reward_equal_the_packages_score(tmp_path: Path) -> None:
    weights = write_local_image_reward(tmp_path)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-c", SCORE_SCRIPT, str(weights)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["count"] == 3
    assert out["mean"] == pytest.approx(sum(out["package"]) / 3, abs=1e-4)
