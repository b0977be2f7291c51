"""The reconstruction game's scorer: images matched one-to-one against the truth, scored (PSNR, SSIM, LPIPS, the
fraction recovered) next to the chance baselines drawn from images the attack never saw. Its messages are staged by
the one-message game (a gradient or model view) or the active game."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from privbench.attacks.base import Attack
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.audit.games import register_summary
from privbench.audit.output import write_gallery, write_grid
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.figures import (
    ATTRIBUTED_FRACTION,
    CERTIFIED,
    CERTIFIED_WRONG,
    CRAFTED_UPLOADED,
    LABEL_ACCURACY,
    LPIPS_CHANCE,
    LPIPS_MEAN,
    MISATTRIBUTED,
    NUM_RECONSTRUCTED,
    NUM_TRUE,
    PSNR_CHANCE,
    PSNR_CHANCE_INFORMED,
    PSNR_CHANCE_UNINFORMED,
    PSNR_GAIN,
    PSNR_MEAN,
    PSNR_MEDIAN,
    PSNR_MEDIAN_GAIN,
    RECOVERED_FRACTION,
    RECOVERED_FRACTION_CHANCE,
    SSIM_CHANCE,
    SSIM_MEAN,
    VICTIM_ATTRIBUTED,
)
from privbench.metrics.chance import chance_baseline, gains
from privbench.metrics.image import psnr
from privbench.metrics.reconstruction import Recovered, score
from privbench.pixels import denormalise
from privbench.progress import phase

#: A certified image further than this PSNR from its matched true image is a wrong certificate.
EXACT_DB = 40.0


def score_reconstruction(recon: torch.Tensor, labels: torch.Tensor, truth: torch.Tensor, truth_labels: torch.Tensor,
                         *, non_members: torch.Tensor, seed: int, match_on: str, use_lpips: bool,
                         out: Path, non_member_labels: torch.Tensor | None = None,
                         recovered: Recovered = Recovered()) -> dict[str, Any]:
    """Match ``recon`` one-to-one against ``truth`` (``[N, C, H, W]`` in [0, 1]); score it and the chance
    baselines drawn from ``non_members`` (class-informed ones too, given ``non_member_labels``; the attack's
    ``labels`` name the inferred classes) with the same matching; write ``grid.png`` and ``gallery.npz``.

    Returns the privacy figures: PSNR/SSIM/LPIPS, the fraction recovered, their chance levels and gains, the
    matching.
    """
    with phase("scoring", total=2, unit="set") as bar:
        scores = score(recon, truth, recon_labels=labels, truth_labels=truth_labels, match_on=match_on,
                       use_lpips=use_lpips, recovered=recovered)
        bar.update(1, psnr=scores.get(PSNR_MEAN.key))
        chance = chance_baseline(truth, truth_labels, count=len(recon), test_images=non_members, seed=seed,
                                 match_on=match_on, use_lpips=use_lpips, test_labels=non_member_labels,
                                 inferred_labels=labels, recovered=recovered)
        bar.update(1, chance=chance.get(PSNR_CHANCE.key))
    pairs = scores["matched"]
    write_grid(out / "grid.png", truth[[m["truth"] for m in pairs]], recon[[m["recon"] for m in pairs]])
    chance_images, chance_pairs = chance.pop("chance_images")
    write_gallery(out / "gallery.npz", truth=truth, recon=recon, truth_labels=truth_labels, recon_labels=labels,
                  pairs=pairs, chance=chance_images, chance_pairs=chance_pairs, recovered=recovered)
    scores.update(chance)
    return {NUM_RECONSTRUCTED.key: len(recon), NUM_TRUE.key: len(truth), **scores, **gains(scores),
            "recovered_bar": recovered.bar()}


@register_scorer(Reconstruction)
def score_reconstructed(finding: Reconstruction, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Images: matched against the truth, with the chance baselines (``score_reconstruction``)."""
    privacy: dict[str, Any] = {"failed": finding.failed}
    if finding.attempts:
        privacy.update({"objective": finding.objective})
    privacy["label_source"] = finding.label_source
    if finding.attempts:
        privacy["attempts"] = finding.attempts
    if finding.images is not None and finding.labels is not None and len(truth.images):  # a file attack may hold none
        how.out.mkdir(parents=True, exist_ok=True)
        recon = finding.images.cpu()
        if not finding.pixels:
            recon = denormalise(recon, truth.mean, truth.std)
        privacy.update(score_reconstruction(recon, finding.labels.cpu(), truth.images, truth.labels,
                                            non_members=truth.non_members, seed=how.seed, match_on=how.match_on,
                                            use_lpips=how.use_lpips, out=how.out,
                                            non_member_labels=truth.non_member_labels, recovered=how.recovered))
        if finding.label_source == "none":
            privacy[LABEL_ACCURACY.key] = float("nan")  # no labels were inferred
        if "certified" in finding.info:
            privacy.update(certificate_figures(finding.info["certified"], recon, truth.images))
    elif read_nothing(finding):  # an analytic read that found no image recovered none: 0, not a missing figure
        privacy[RECOVERED_FRACTION.key] = 0.0
    return privacy


def read_nothing(finding: Reconstruction) -> bool:
    """Whether every attempt was an analytic read that found no image (status ``empty``), as opposed to an
    optimisation that diverged (its images missing, not 0)."""
    return finding.failed and bool(finding.attempts) and all(a.get("status") == "empty" for a in finding.attempts)


def certificate_figures(certified: list[bool], recon: torch.Tensor, truth: torch.Tensor) -> dict[str, Any]:
    """An exact attack's certificate scored: the share of the true images it certified, and how many certified images
    (``recon``, ``[N, C, H, W]`` in [0, 1]) are further than ``EXACT_DB`` PSNR from every true image."""
    wrong = sum(1 for r, ok in enumerate(certified) if ok and max(psnr(recon[r], t) for t in truth) < EXACT_DB)
    return {CERTIFIED.key: sum(map(bool, certified)) / max(len(truth), 1), CERTIFIED_WRONG.key: wrong}


@register_summary(10)
def leakage_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """A reconstruction's figures against chance."""
    lines: list[tuple[str, str]] = []
    if PSNR_MEAN.key in privacy:
        lines.append(("leakage", f"PSNR {PSNR_MEAN.shown(privacy)} dB, chance "
                                 f"{PSNR_CHANCE.shown(privacy)}, gain "
                                 f"{PSNR_GAIN.shown(privacy)} dB ({privacy.get(NUM_RECONSTRUCTED.key)} "
                                 f"rebuilt, {privacy.get(NUM_TRUE.key)} true)"))
        if (privacy.get(NUM_TRUE.key) or 0) > 1 and PSNR_MEDIAN.key in privacy:
            lines.append(("", f"median image {PSNR_MEDIAN.shown(privacy)} dB, gain "
                              f"{PSNR_MEDIAN_GAIN.shown(privacy)} dB"))
        if PSNR_CHANCE_INFORMED.key in privacy:
            lines.append(("", f"chance uninformed {PSNR_CHANCE_UNINFORMED.shown(privacy)} dB, "
                              f"knowing the classes {PSNR_CHANCE_INFORMED.shown(privacy)} dB"))
        if RECOVERED_FRACTION.key in privacy:
            bar = privacy.get("recovered_bar")
            rule = (f" to {Recovered(psnr=float(bar['psnr']), ssim=float(bar['ssim'])).text()}"
                    if isinstance(bar, dict) and {"psnr", "ssim"} <= set(bar) else "")
            lines.append(("", f"recovered {RECOVERED_FRACTION.shown(privacy)} of the true images"
                              f"{rule} (chance {RECOVERED_FRACTION_CHANCE.shown(privacy)})"))
        if CERTIFIED.key in privacy:
            lines.append(("", f"certified {CERTIFIED.shown(privacy)} of the true images as exact inputs "
                              f"({CERTIFIED_WRONG.shown(privacy)} of them wrong)"))
        if ATTRIBUTED_FRACTION.key in privacy:
            lines.append(("", f"attributed {ATTRIBUTED_FRACTION.shown(privacy)} to their client "
                              f"(the victim's {VICTIM_ATTRIBUTED.shown(privacy)}), "
                              f"{privacy.get(MISATTRIBUTED.key)} to another client's slot"))
        if privacy.get("chance_from"):
            alike = "" if privacy.get("chance_pool_alike", True) else " (the true images do not look like it)"
            lines.append(("", f"chance from {privacy['chance_from']}{alike}"))
        lines.append(("", f"SSIM {SSIM_MEAN.shown(privacy)} (chance "
                          f"{SSIM_CHANCE.shown(privacy)}), LPIPS "
                          f"{LPIPS_MEAN.shown(privacy)} (chance "
                          f"{LPIPS_CHANCE.shown(privacy)}), labels "
                          f"{LABEL_ACCURACY.shown(privacy)}"))
    elif privacy.get("failed") and RECOVERED_FRACTION.key in privacy and threat.get(CRAFTED_UPLOADED.key) is not False:
        lines.append(("leakage", "the read found no image: recovered 0 of the true images"))
    elif privacy.get("failed") and threat.get(CRAFTED_UPLOADED.key) is not False:
        lines.append(("leakage", "attack failed: no reconstruction"))
    return lines
