"""Clip-aware gradient matching: under DP-SGD the clip norm C is public, so candidates are clipped as the client's were."""
from __future__ import annotations

import pytest
import torch

from privbench.attacks.reconstruction.matching import clipped_mean_gradient
from privbench.audit.run import run_audit
from privbench.defenses.dpsgd import DPSGD
from privbench.fl.sgd import per_sample_gradients
from privbench.fl.trainer import SGDTrainer
from privbench.models import LeNet
from privbench.payloads import LocalTraining

TINY = ["fl=fedavg", "payload=gradient", "data.partition=iid", "data.num_clients=4", "data.agnostic_classes=[]",
        "fl.rounds=1", "fl.participants=2", "fl.local_epochs=1", "metrics.lpips=false", "defense=dpsgd",
        "defense.target_epsilon=null", "defense.noise_multiplier=0", "defense.max_grad_norm=1"]


def test_the_clipped_candidate_gradient_is_dp_sgds_release_without_noise():
    """Against an independent implementation: vmap per-sample gradients, clipped and averaged (the DP trainer's)."""
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    x, y = torch.randn(3, 1, 28, 28), torch.tensor([1, 4, 4])
    for clip in (1e-3, 0.5, 1e3):  # every sample clipped, some, none
        ours = clipped_mean_gradient(model, dict(model.named_parameters()), x, y, None, clip)
        theirs = {n: g.mean(0) for n, g in per_sample_gradients(model, x, y, clip=clip).items()}
        for n in theirs:
            assert torch.allclose(ours[n], theirs[n], atol=1e-6, rtol=1e-5), (clip, n)


def test_a_dp_trainer_declares_its_clip_norm_in_every_record_and_records_validate_it():
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    x, y = torch.randn(2, 1, 28, 28), torch.tensor([0, 1])
    generator = torch.Generator().manual_seed(0)
    _, record = DPSGD(noise_multiplier=0.0, max_grad_norm=0.7).gradient(model, x, y, client="client0", lr=0.1,
                                                                         generator=generator)
    assert record.clip == 0.7 and record.to_dict()["clip"] == 0.7
    _, plain = SGDTrainer().gradient(model, x, y, client="client0", lr=0.1, generator=generator)
    assert plain.clip is None and "clip" not in plain.to_dict()
    assert LocalTraining.from_dict(record.to_dict()) == record
    for bad in (-1.0, "1", True):
        with pytest.raises(ValueError, match="clip norm"):
            LocalTraining.from_dict({**record.to_dict(), "clip": bad})


@pytest.mark.slow
def test_with_clipping_and_no_noise_idlg_and_dlg_rebuild_the_image_as_well_as_ig(compose_cfg, tmp_path):
    gains, knowledge = {}, {}
    for attack in ("idlg", "dlg", "ig"):
        cfg = compose_cfg(*TINY, f"attack={attack}", f"results_dir={tmp_path}")
        metrics = run_audit(cfg, tmp_path / attack)
        gains[attack] = metrics["privacy"]["psnr_gain"]
        knowledge[attack] = metrics["threat_model"]["clipping"]
    assert gains["idlg"] >= gains["ig"] - 1.0 and gains["dlg"] >= gains["ig"] - 1.0, gains
    assert gains["idlg"] > 10, gains
    assert all("C=1" in k for k in knowledge.values()), knowledge
