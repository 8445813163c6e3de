"""The PreDiff-form latent backbone: a tiny model of the same form, saved as TorchScript and as a
pickled module, checked against the VP ε-form it converts (DDIM step, timestep table)."""

import inspect
import sys

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from spanlift.backbones import BACKBONES, load_backbone
from spanlift.backbones import latent_nowcast as module_under_test
from spanlift.backbones.base import conditioned
from spanlift.backbones.latent_nowcast import LatentNowcast
from spanlift.backbones.nowcast_windows import NowcastWindows
from spanlift.errors import CheckpointError, SettingsError
from spanlift.solvers import NFECounter, SolverSpec, build_solver
from spanlift.solvers.euler import Euler

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")

SIZE, FACTOR, CHANNELS = 16, 4, 2  # frames 16×16, latents 2×4×4
SEEDS = [0, 1, 5, 10**9]


class TinyNoisePredictor(nn.Module):
    """ε(z_t, t, cond) on NTHWC latents: a 3-D conv over the 6 noisy frames next to the last 6
    past frames, scaled by a function of t."""

    def __init__(self, channels: int = CHANNELS) -> None:
        super().__init__()
        self.mix = nn.Conv3d(2 * channels, channels, kernel_size=3, padding=1)

    def forward(self, z: Tensor, t: Tensor, cond: Tensor) -> Tensor:
        inputs = torch.cat([z, cond[:, 1:]], dim=-1).permute(0, 4, 1, 2, 3)
        scale = 1 + 0.5 * torch.sin(t.float() / 7.0)[:, None, None, None, None]
        return (torch.tanh(self.mix(inputs)) * scale).permute(0, 2, 3, 4, 1).to(z.dtype)


class TinyAutoencoder(nn.Module):
    """Frames (B, 1, H, W) in [0, 1] ↔ latents (B, c, H/f, W/f), scale factor 3."""

    def __init__(self, channels: int = CHANNELS, factor: int = FACTOR) -> None:
        super().__init__()
        self.down = nn.Conv2d(1, channels, factor, stride=factor)
        self.up = nn.ConvTranspose2d(channels, 1, factor, stride=factor)

    @torch.jit.export
    def encode(self, frames: Tensor) -> Tensor:
        return 3 * torch.tanh(self.down(frames * 2 - 1))

    @torch.jit.export
    def decode(self, latents: Tensor) -> Tensor:
        return torch.sigmoid(self.up(latents / 3))

    def forward(self, frames: Tensor) -> Tensor:
        return self.decode(self.encode(frames))


class DropsLastFrame(nn.Module):
    """A denoiser of the wrong form: ε for only 5 of the 6 frames."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, z: Tensor, t: Tensor, cond: Tensor) -> Tensor:
        return self.inner(z, t, cond)[:, :5]


def alphas_cumprod(timesteps: int = 1000) -> np.ndarray:
    """ᾱ_t of latent diffusion's "linear" schedule, built apart from the module under test."""
    betas = np.linspace(1e-4**0.5, 2e-2**0.5, timesteps) ** 2
    return np.cumprod(1.0 - betas)


def sigma_at(t: int) -> float:
    alpha = alphas_cumprod()[t]
    return float(np.sqrt((1 - alpha) / alpha))


def to_nthwc(x: Tensor) -> Tensor:
    return x.reshape(len(x), 6, CHANNELS, *x.shape[-2:]).permute(0, 1, 3, 4, 2)


def from_nthwc(z: Tensor) -> Tensor:
    return z.permute(0, 1, 4, 2, 3).reshape(len(z), 6 * CHANNELS, *z.shape[2:4])


def random_windows(size: int = SIZE, seed: int = 0) -> NowcastWindows:
    generator = torch.Generator().manual_seed(seed)
    train = torch.randint(0, 256, (6, 13, size, size), generator=generator, dtype=torch.uint8)
    test = torch.randint(0, 256, (3, 13, size, size), generator=generator, dtype=torch.uint8)
    return NowcastWindows(train, test)


@pytest.fixture(scope="module")
def models() -> tuple[TinyNoisePredictor, TinyAutoencoder]:
    torch.manual_seed(0)
    return TinyNoisePredictor().eval(), TinyAutoencoder().eval()


@pytest.fixture(scope="module")
def windows() -> NowcastWindows:
    return random_windows()


@pytest.fixture(scope="module")
def scripted_files(models, tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("torchscript")
    files = {"denoiser": str(folder / "denoiser.pt"), "autoencoder": str(folder / "vae.pt")}
    for module, path in zip(models, files.values(), strict=True):
        torch.jit.save(torch.jit.script(module), path)
    return files


def load_with_windows(monkeypatch, windows: NowcastWindows, **options) -> LatentNowcast:
    """The backbone built by the registry from files, with the data read replaced by `windows`."""
    monkeypatch.setattr(module_under_test, "open_windows", lambda data, grid, split: windows)
    return load_backbone("prediff", data="unused", grid=windows.train.shape[-1], **options)


@pytest.fixture
def scripted(monkeypatch, windows, scripted_files) -> LatentNowcast:
    return load_with_windows(monkeypatch, windows, **scripted_files)


def test_denoise_is_the_eps_form_and_an_euler_step_is_ddim(scripted, models):
    denoiser, _ = models
    alphas = alphas_cumprod()
    cond = scripted.conditioning(SEEDS)
    x = torch.randn(len(SEEDS), *scripted.shape, generator=torch.Generator().manual_seed(1))
    t, s = 600, 350
    ts = torch.full((len(SEEDS),), float(t))

    eps = from_nthwc(denoiser(to_nthwc(float(np.sqrt(alphas[t])) * x), ts, cond))
    expected = x - sigma_at(t) * eps
    torch.testing.assert_close(scripted.denoise(x, torch.tensor(sigma_at(t)), cond), expected)

    # DDIM (η = 0) in ε-form on z = √ᾱ x: z_s = √ᾱ_s x̂0 + sqrt(1 − ᾱ_s) ε
    z_t = float(np.sqrt(alphas[t])) * x
    eps_nthwc = denoiser(to_nthwc(z_t), ts, cond)
    clean = (to_nthwc(z_t) - float(np.sqrt(1 - alphas[t])) * eps_nthwc) / float(np.sqrt(alphas[t]))
    z_s = float(np.sqrt(alphas[s])) * clean + float(np.sqrt(1 - alphas[s])) * eps_nthwc
    euler = Euler(torch.tensor([sigma_at(t), sigma_at(s)]))
    x_s = euler(conditioned(scripted, cond), x)
    torch.testing.assert_close(x_s, from_nthwc(z_s) / float(np.sqrt(alphas[s])))


def test_conditioning_and_decode_go_frame_by_frame_through_the_autoencoder(
    scripted, models, windows
):
    _, autoencoder = models
    past = windows.past(SEEDS)  # (N, 7, H, W) in [−1, 1]
    for frame in range(7):
        latents = autoencoder.encode((past[:, frame : frame + 1] + 1) / 2)  # (N, c, h, w)
        torch.testing.assert_close(
            scripted.conditioning(SEEDS)[:, frame], latents.permute(0, 2, 3, 1)
        )
    x = torch.randn(len(SEEDS), *scripted.shape, generator=torch.Generator().manual_seed(2))
    decoded = scripted.decode(x)
    for frame in range(6):
        channels = x[:, frame * CHANNELS : (frame + 1) * CHANNELS]  # channel = frame·c + k
        expected = autoencoder.decode(channels) * 2 - 1
        torch.testing.assert_close(decoded[:, frame : frame + 1], expected)
    torch.testing.assert_close(scripted.observations(SEEDS), windows.future(SEEDS))


def test_timestep_of_sigma_hits_the_table_and_is_log_linear_between(scripted, models):
    assert scripted.sigma_min == pytest.approx(sigma_at(0), rel=1e-12)
    assert scripted.sigma_max == pytest.approx(sigma_at(999), rel=1e-12)
    integers = [0, 1, 2, 137, 500, 998, 999]
    for dtype in (torch.float64, torch.float32):
        sigmas = torch.tensor([sigma_at(t) for t in integers], dtype=dtype)
        assert scripted.timestep(sigmas).tolist() == [float(t) for t in integers]

    k = 137
    between = torch.exp(torch.linspace(np.log(sigma_at(k)), np.log(sigma_at(k + 1)), 50))
    t = scripted.timestep(between.double())
    assert (t.diff() >= 0).all() and t[0] == k and t[-1] == k + 1
    assert ((t[1:-1] > k) & (t[1:-1] < k + 1)).all()
    midpoint = torch.tensor([np.sqrt(sigma_at(k) * sigma_at(k + 1))], dtype=torch.float64)
    assert scripted.timestep(midpoint).item() == pytest.approx(k + 0.5, abs=1e-9)
    outside = torch.tensor([sigma_at(0) / 2, sigma_at(999) * 2], dtype=torch.float64)
    assert scripted.timestep(outside).tolist() == [0.0, 999.0]

    # the fractional timestep reaches the model as it is
    denoiser, _ = models
    cond = scripted.conditioning(SEEDS[:2])
    x = torch.randn(2, *scripted.shape, generator=torch.Generator().manual_seed(3))
    sigma = float(midpoint)
    eps = denoiser(to_nthwc(x / np.sqrt(1 + sigma**2)), torch.full((2,), k + 0.5), cond)
    expected = x - sigma * from_nthwc(eps)
    torch.testing.assert_close(scripted.denoise(x, torch.tensor(sigma), cond), expected)


def write_package(folder, name: str) -> None:
    """A package `name` whose model.py holds the tiny classes' source."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    classes = "\n\n".join(inspect.getsource(c) for c in (TinyNoisePredictor, TinyAutoencoder))
    header = "import torch\nfrom torch import Tensor, nn\n\nCHANNELS, FACTOR = 2, 4\n\n\n"
    (package / "model.py").write_text(header + classes)


def test_pickled_modules_need_allow_pickle_and_code(
    monkeypatch, tmp_path, models, windows, scripted
):
    code = tmp_path / "prediff_code"
    write_package(code, "tinyprediff")
    monkeypatch.setattr(sys, "path", [str(code), *sys.path])
    from tinyprediff.model import TinyAutoencoder as PackagedAutoencoder
    from tinyprediff.model import TinyNoisePredictor as PackagedNoisePredictor

    files = {"denoiser": tmp_path / "denoiser.pkl", "autoencoder": tmp_path / "vae.pkl"}
    for packaged, reference, path in zip(
        (PackagedNoisePredictor(), PackagedAutoencoder()), models, files.values(), strict=True
    ):
        packaged.load_state_dict(reference.state_dict())
        torch.save(packaged, path)
    sys.path.remove(str(code))
    for name in [name for name in sys.modules if name.startswith("tinyprediff")]:
        monkeypatch.delitem(sys.modules, name)

    with pytest.raises(CheckpointError, match="allow_pickle=true") as refused:
        load_with_windows(monkeypatch, windows, **files)
    assert "denoiser.pkl" in str(refused.value)
    with pytest.raises(CheckpointError, match="code=") as unimportable:
        load_with_windows(monkeypatch, windows, **files, allow_pickle=True)
    assert "tinyprediff" in str(unimportable.value)

    pickled = load_with_windows(monkeypatch, windows, **files, allow_pickle=True, code=str(code))
    cond = pickled.conditioning(SEEDS)
    torch.testing.assert_close(cond, scripted.conditioning(SEEDS))
    x = torch.randn(len(SEEDS), *pickled.shape, generator=torch.Generator().manual_seed(4))
    sigma = torch.tensor([0.05, 0.7, 3.0, 20.0])
    torch.testing.assert_close(pickled.denoise(x, sigma, cond), scripted.denoise(x, sigma, cond))
    torch.testing.assert_close(pickled.decode(x), scripted.decode(x))
    for name in [name for name in sys.modules if name.startswith("tinyprediff")]:
        monkeypatch.delitem(sys.modules, name)


def test_a_full_euler_sample_spends_its_nfe_and_decodes_to_frames(scripted):
    solver = build_solver(
        SolverSpec("euler", 5, "edm", {}),
        scripted.sigma_min,
        scripted.sigma_max,
        scripted.shape[0],
    )
    counter = NFECounter(conditioned(scripted, scripted.conditioning(SEEDS)))
    noise = torch.randn(len(SEEDS), *scripted.shape, generator=torch.Generator().manual_seed(5))
    sample = solver(counter, scripted.prior(noise))
    frames = scripted.decode(sample).clamp(-1, 1)
    assert counter.calls == 5
    assert frames.shape == (len(SEEDS), 6, SIZE, SIZE) and frames.isfinite().all()
    assert scripted.to_images(sample).shape == (len(SEEDS), SIZE, 6 * SIZE, 1)


def test_identity_follows_weights_and_data(monkeypatch, models, windows, scripted_files, tmp_path):
    denoiser, autoencoder = models
    same = load_with_windows(monkeypatch, windows, **scripted_files)
    other_data = load_with_windows(monkeypatch, random_windows(seed=1), **scripted_files)
    changed = TinyNoisePredictor()
    changed.load_state_dict(denoiser.state_dict())
    with torch.no_grad():
        changed.mix.bias.add_(1e-3)
    torch.jit.save(torch.jit.script(changed), tmp_path / "changed.pt")
    other_weights = load_with_windows(
        monkeypatch,
        windows,
        denoiser=tmp_path / "changed.pt",
        autoencoder=scripted_files["autoencoder"],
    )
    identities = {same.identity(), other_data.identity(), other_weights.identity()}
    assert same.identity() == load_with_windows(monkeypatch, windows, **scripted_files).identity()
    assert len(identities) == 3

    built = LatentNowcast.from_modules(denoiser, autoencoder, windows)
    rebuilt = LatentNowcast.from_modules(changed, autoencoder, windows)
    assert built.identity() != rebuilt.identity()
    assert not any(p.requires_grad for p in built.parameters()) and not built.training


def test_user_errors_name_the_file_or_the_shapes(
    monkeypatch, tmp_path, models, windows, scripted_files
):
    assert BACKBONES.get("prediff") is LatentNowcast
    with pytest.raises(SettingsError, match="denoiser=<file>"):
        load_backbone("prediff")
    missing = tmp_path / "prediff_denoiser.pt"
    with pytest.raises(CheckpointError, match=r"prediff_denoiser\.pt.*torch\.jit"):
        load_with_windows(monkeypatch, windows, **{**scripted_files, "denoiser": missing})
    with pytest.raises(SettingsError, match="allow_pickle must be true or false"):
        load_with_windows(monkeypatch, windows, **scripted_files, allow_pickle="yes")

    monkeypatch.setattr(module_under_test, "open_windows", lambda data, grid, split: windows)
    with pytest.raises(SettingsError, match=r"\(16, 16\).*grid=32"):
        LatentNowcast(data="unused", grid=32, **scripted_files)

    denoiser, autoencoder = models
    with pytest.raises(SettingsError, match=r"\(1, 1, 18, 18\).*\(1, 1, 16, 16\)"):
        LatentNowcast.from_modules(denoiser, autoencoder, random_windows(size=18))
    with pytest.raises(SettingsError, match=r"\(1, 5, 4, 4, 2\).*\(1, 6, 4, 4, 2\)"):
        LatentNowcast.from_modules(DropsLastFrame(denoiser), autoencoder, windows)
