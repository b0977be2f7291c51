"""Files of a run (metrics.json, metrics.csv, grid.png, threat_model.json) and the printed table."""
from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from privbench.csv_cells import safe_row
from privbench.figures import (
    ACCURACY,
    AGNOSTIC_ACCURACY,
    CANARY_TPR_BOUND_01,
    CANARY_TPR_BOUND_1,
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CLASS_PROPORTION_ERROR_SET,
    CRAFTED_UPLOADED,
    DOWNLINK_BYTES,
    DOWNLOAD_FLAGGED,
    DOWNLOADED_ACCURACY,
    EPSILON,
    EPSILON_ACCOUNTED,
    EPSILON_CLAIMED,
    EPSILON_LOWER,
    EPSILON_LOWER_FDP,
    EPSILON_MAX,
    EPSILON_TIGHT,
    LABEL_ACCURACY,
    LABEL_COUNT_ERROR,
    LABEL_COUNT_ERROR_CHANCE,
    LABEL_COUNTS_EXACT,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
    LABEL_SET_JACCARD,
    LABEL_SET_JACCARD_CHANCE,
    LPIPS_CHANCE,
    LPIPS_MEAN,
    MIA_AUC,
    MIA_AUC_INFORMED,
    MIA_MEMBERS,
    MIA_NON_MEMBERS,
    MIA_TPR_01,
    MIA_TPR_1,
    MIA_TPR_1_INFORMED,
    MIA_TPR_BOUND_01,
    MIA_TPR_BOUND_1,
    NUM_RECONSTRUCTED,
    NUM_TRUE,
    PERSONAL_ACCURACY,
    PSNR_CHANCE,
    PSNR_CHANCE_INFORMED,
    PSNR_CHANCE_UNINFORMED,
    PSNR_GAIN,
    PSNR_MEAN,
    PSNR_MEDIAN,
    PSNR_MEDIAN_GAIN,
    RECOVERED_FRACTION,
    RECOVERED_FRACTION_CHANCE,
    SOURCE_ACCURACY,
    SOURCE_CHANCE,
    SOURCE_CHANCE_INFORMED,
    SSIM_CHANCE,
    SSIM_MEAN,
    TOTAL_RATIO,
    UPLINK_BYTES,
    formatted,
)
from privbench.io import atomic_write_bytes, atomic_write_text
from privbench.metrics.image import psnr
from privbench.metrics.reconstruction import Recovered


def flat_row(metrics: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: the scalar entries of every section of ``metrics.json``."""
    row: dict[str, Any] = {}
    for section in ("run", "privacy", "utility", "bytes", "defense", "timing"):
        for key, value in metrics.get(section, {}).items():
            if isinstance(value, (int, float, str, bool)) or value is None:
                row[key] = value
    return row


def _json(value: Any) -> str:
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(value), indent=2)


def write_metrics(out: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json``, a one-row ``metrics.csv`` and ``threat_model.json`` atomically.

    Non-finite numbers are written as missing (``null`` / empty), never as 0; infinite
    numbers (an unbounded epsilon) are written as ``"inf"``.
    """
    atomic_write_text(out / "threat_model.json", _json({**metrics.get("threat_model", {}),
                                                        "defense": metrics.get("defense", {})}))
    row = safe_row(flat_row(metrics))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(row))
    writer.writeheader()
    writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    atomic_write_text(out / "metrics.csv", buffer.getvalue())
    atomic_write_text(out / "metrics.json", _json(metrics))


def write_grid(path: Path, truth: torch.Tensor, recon: torch.Tensor, *, scale: int = 4) -> None:
    """PNG grid: ground truth on the top row, matched reconstructions below ([0, 1] images)."""
    from PIL import Image
    from torchvision.utils import make_grid

    images = torch.cat([truth, recon]).float().clamp(0, 1)
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    images = F.interpolate(images, scale_factor=scale, mode="nearest")
    grid = make_grid(images, nrow=len(truth), padding=2, pad_value=1.0)
    array = (grid.permute(1, 2, 0).numpy() * 255).round().astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


def write_roc(path: Path, fpr: Any, tpr: Any, *, title: str) -> None:
    """The membership test's ROC on log-log axes with the chance line (TPR = FPR), as the field draws it."""
    import numpy as np

    from privbench.report.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    floor = 1e-4
    ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), lw=1.5, label="attack")
    ax.plot([floor, 1], [floor, 1], "k:", lw=1, label="chance (TPR = FPR)")
    for at in (0.01, 0.001):
        ax.axvline(at, color="0.7", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


#: Most pairs kept for the report's gallery (the best-rebuilt first).
GALLERY_PAIRS = 256


def write_gallery(path: Path, *, truth: torch.Tensor, recon: torch.Tensor, truth_labels: torch.Tensor,
                  recon_labels: torch.Tensor, pairs: list[dict[str, Any]], chance: torch.Tensor,
                  chance_pairs: list[dict[str, Any]], recovered: Recovered = Recovered()) -> None:
    """``gallery.npz``: per matched pair, best PSNR first (at most ``GALLERY_PAIRS``), the true image, the
    reconstruction and the strongest chance baseline's image matched to the same truth, as uint8 ``[P, H, W, C]``,
    with their PSNRs, the pair's SSIM, whether it counts as recovered under ``recovered``, and the true and
    recovered labels (-1: none). The report's gallery page reads only this file.
    """
    by_truth = {m["truth"]: m["recon"] for m in chance_pairs}
    kept = sorted(pairs, key=lambda m: -m["psnr"])[:GALLERY_PAIRS]
    picks = [by_truth.get(m["truth"], min(m["recon"], len(chance) - 1)) for m in kept]

    def u8(images: torch.Tensor) -> Any:
        return (images.float().clamp(0, 1).permute(0, 2, 3, 1).numpy() * 255).round().astype("uint8")

    t = truth[[m["truth"] for m in kept]]
    c = chance[picks]
    buffer = io.BytesIO()
    np.savez_compressed(buffer, truth=u8(t), recon=u8(recon[[m["recon"] for m in kept]]), chance=u8(c),
                        psnr=np.array([m["psnr"] for m in kept], dtype=float),
                        ssim=np.array([m["ssim"] for m in kept], dtype=float),
                        recovered=np.array([recovered.count([m]) == 1 for m in kept], dtype=bool),
                        chance_psnr=np.array([psnr(a, b) for a, b in zip(c, t)], dtype=float),
                        true_label=np.array([int(truth_labels[m["truth"]]) for m in kept]),
                        recon_label=np.array([int(recon_labels[m["recon"]]) for m in kept]))
    atomic_write_bytes(path, buffer.getvalue())


#: Columns the run summary fits in.
WIDTH = 80


def summary(metrics: dict[str, Any]) -> str:
    """A short vertical summary of a run that fits an 80-column terminal.

    Example:
        >>> print(summary({"run": {"fl": "fedavg", "payload": None, "attack": "none", "defense": "none", "seed": 0,
        ...                        "victim_client": 0, "victim_round": 0}, "utility": {"accuracy": 0.5},
        ...                "bytes": {"uplink_bytes": 10, "downlink_bytes": 10}, "defense": {}}))
        run      fedavg, no attack, defense none, seed 0, victim client0 round 0
        utility  known-client accuracy 0.500
        bytes    up 10, down 10
    """
    run, privacy, utility = metrics.get("run", {}), metrics.get("privacy", {}), metrics.get("utility", {})
    nbytes, defense = metrics.get("bytes", {}), metrics.get("defense", {})
    what = f"{run.get('payload')} by {run.get('attack')}" if run.get("payload") else "no attack"
    if "source" in run:  # a recorded file (python -m privbench.attack): no run, victim, utility or bytes
        lines = [("file", f"{run['source']}: {what}, seed {run.get('seed')}, {run.get('num_images')} image(s)"),
                 ("inputs", str(run.get("inputs", "")))]
    else:
        lines = [("run", f"{run.get('fl')}, {what}, defense {run.get('defense')}, seed {run.get('seed')}, "
                         f"victim client{run.get('victim_client')} round {run.get('victim_round')}")]
    threat = metrics.get("threat_model", {})
    aggregation = defense.get("aggregation") if isinstance(defense.get("aggregation"), dict) else {}
    if aggregation.get("server_sees"):
        lines.append(("server", f"sees {aggregation['server_sees']} ({run.get('aggregation')})"))
    elif run.get("aggregation") not in (None, "plain"):
        lines.append(("server", f"sees each cohort's aggregate only ({run['aggregation']}: secure aggregation)"))
    if threat.get("server") == "active":
        crafted = threat.get("crafted", {})
        bins = f", {crafted['bins']} bins" if crafted.get("bins") else ""
        lines.append(("server", f"ACTIVE, crafted the download: {str(crafted.get('block', '')).split(':')[0]}{bins}"))
        passes = [c for c, how in (threat.get("client_checks") or {}).items() if str(how).startswith("designed")]
        lines.append(("", f"built to pass the client's checks: {', '.join(passes) or 'none'}"))
        if DOWNLOAD_FLAGGED.key in privacy:
            reasons = privacy.get("download_check") or []
            lines.append(("", "the victim's check of the download: " + (f"flagged ({reasons[0]})" if reasons
                                                                          else "passed")))
        if threat.get(CRAFTED_UPLOADED.key) is False:
            lines.append(("", "the victim's learnGene left the crafted layer out: nothing to read (0 recovered)"))
    spent = threat.get("attack_budget")
    if spent and "iterations" in spent:
        restarts = int(spent.get("restarts", 1))
        how = f" ({spent['optimiser']})" if spent.get("optimiser") else ""
        lines.append(("budget", f"{spent['attack']}: {restarts} restart{'s' if restarts != 1 else ''} x "
                                f"{spent['iterations']:,} steps{how}"))
    if PSNR_MEAN.key in privacy:
        lines.append(("leakage", f"PSNR {formatted(privacy[PSNR_MEAN.key], '{:.2f}')} dB, chance "
                                 f"{formatted(privacy.get(PSNR_CHANCE.key), '{:.2f}')}, gain "
                                 f"{formatted(privacy.get(PSNR_GAIN.key), '{:+.2f}')} dB ({privacy.get(NUM_RECONSTRUCTED.key)} "
                                 f"rebuilt, {privacy.get(NUM_TRUE.key)} true)"))
        if (privacy.get(NUM_TRUE.key) or 0) > 1 and PSNR_MEDIAN.key in privacy:
            lines.append(("", f"median image {formatted(privacy[PSNR_MEDIAN.key], '{:.2f}')} dB, gain "
                              f"{formatted(privacy.get(PSNR_MEDIAN_GAIN.key), '{:+.2f}')} dB"))
        if PSNR_CHANCE_INFORMED.key in privacy:
            lines.append(("", f"chance uninformed {formatted(privacy.get(PSNR_CHANCE_UNINFORMED.key), '{:.2f}')} dB, "
                              f"knowing the classes {formatted(privacy.get(PSNR_CHANCE_INFORMED.key), '{:.2f}')} dB"))
        if RECOVERED_FRACTION.key in privacy:
            bar = privacy.get("recovered_bar")
            rule = (f" to {Recovered(psnr=float(bar['psnr']), ssim=float(bar['ssim'])).text()}"
                    if isinstance(bar, dict) and {"psnr", "ssim"} <= set(bar) else "")
            lines.append(("", f"recovered {formatted(privacy[RECOVERED_FRACTION.key], '{:.2f}')} of the true images"
                              f"{rule} (chance {formatted(privacy.get(RECOVERED_FRACTION_CHANCE.key), '{:.2f}')})"))
        if privacy.get("chance_from"):
            alike = "" if privacy.get("chance_pool_alike", True) else " (the true images do not look like it)"
            lines.append(("", f"chance from {privacy['chance_from']}{alike}"))
        lines.append(("", f"SSIM {formatted(privacy.get(SSIM_MEAN.key), '{:.3f}')} (chance "
                          f"{formatted(privacy.get(SSIM_CHANCE.key), '{:.3f}')}), LPIPS "
                          f"{formatted(privacy.get(LPIPS_MEAN.key), '{:.3g}')} (chance "
                          f"{formatted(privacy.get(LPIPS_CHANCE.key), '{:.3g}')}), labels "
                          f"{formatted(privacy.get(LABEL_ACCURACY.key), '{:.2f}')}"))
    elif privacy.get("failed") and threat.get(CRAFTED_UPLOADED.key) is not False:
        lines.append(("leakage", "attack failed: no reconstruction"))
    if MIA_AUC.key in privacy:
        lines.append(("members", f"{privacy.get('mia_test')} test: AUC {formatted(privacy[MIA_AUC.key], '{:.3f}')} "
                                 f"(chance 0.5), TPR {formatted(privacy.get(MIA_TPR_1.key), '{:.3f}')} "
                                 f"[{formatted(privacy.get(MIA_TPR_1.key + '_lo'), '{:.3f}')}, "
                                 f"{formatted(privacy.get(MIA_TPR_1.key + '_hi'), '{:.3f}')}] at FPR 1 %, "
                                 f"{formatted(privacy.get(MIA_TPR_01.key), '{:.3f}')} at 0.1 % "
                                 f"({privacy.get(MIA_MEMBERS.key)} members, {privacy.get(MIA_NON_MEMBERS.key)} "
                                 + ("excluded canaries)" if str(privacy.get("mia_test")).endswith("_canaries")
                                    else "non-members: (round, client) pairs)" if MIA_AUC_INFORMED.key in privacy
                                    else "class-matched non-members)")))
        if MIA_AUC_INFORMED.key in privacy:
            lines.append(("", f"knowing only each client's classes: AUC "
                              f"{formatted(privacy[MIA_AUC_INFORMED.key], '{:.3f}')}, TPR "
                              f"{formatted(privacy.get(MIA_TPR_1_INFORMED.key), '{:.3f}')} at FPR 1 % (the same test "
                              "on test-split records of their classes)"))
    if SOURCE_ACCURACY.key in privacy:
        lines.append(("source", f"which client holds a record: {formatted(privacy[SOURCE_ACCURACY.key], '{:.3f}')} "
                                f"right over {privacy.get('source_records')} records of {privacy.get('source_clients')} "
                                f"clients (chance {formatted(privacy.get(SOURCE_CHANCE.key), '{:.3f}')}, knowing "
                                f"each client's classes {formatted(privacy.get(SOURCE_CHANCE_INFORMED.key), '{:.3f}')})"))
    if EPSILON_LOWER.key in privacy:
        lines.append(("audit", f"one-run epsilon >= {formatted(privacy[EPSILON_LOWER.key], '{:.2f}')} at "
                               f"{formatted(100 * privacy.get('epsilon_lower_bound_confidence', 0.95), '{:.0f}')} % "
                               f"({privacy.get('canary_guesses_right')} of {privacy.get('canary_guesses')} guesses "
                               f"right, {privacy.get('canaries')} canaries), claimed "
                               f"{formatted(privacy.get(EPSILON_CLAIMED.key), '{:.2f}')} for the round"))
        if privacy.get(EPSILON_LOWER_FDP.key) is not None:
            lines.append(("", f"through f-DP ({privacy.get('fdp_family')}): epsilon >= "
                              f"{formatted(privacy[EPSILON_LOWER_FDP.key], '{:.2f}')}, against the round's tight "
                              f"{formatted(privacy.get(EPSILON_TIGHT.key), '{:.2f}')}"))
        if privacy.get(CANARY_TPR_BOUND_1.key) is not None:
            lines.append(("", f"the round's f-DP bound on a canary test: TPR at most "
                              f"{formatted(privacy[CANARY_TPR_BOUND_1.key], '{:.3f}')} at FPR 1 %, "
                              f"{formatted(privacy.get(CANARY_TPR_BOUND_01.key), '{:.3f}')} at 0.1 % (measured "
                              f"{formatted(privacy.get(MIA_TPR_1.key), '{:.3f}')} and "
                              f"{formatted(privacy.get(MIA_TPR_01.key), '{:.3f}')})"))
    class_set = (f"class set exact {formatted(privacy.get(LABEL_SET_EXACT.key), '{:.0f}')} (prior "
                 f"{formatted(privacy.get(LABEL_SET_EXACT_CHANCE.key), '{:.0f}')})")
    if LABEL_SET_JACCARD.key in privacy:
        lines.append(("classes", f"inferred {privacy.get('inferred_classes')}: {class_set}, overlap "
                                 f"{formatted(privacy[LABEL_SET_JACCARD.key], '{:.2f}')} (prior "
                                 f"{formatted(privacy.get(LABEL_SET_JACCARD_CHANCE.key), '{:.2f}')})"))
        if CLASS_PROPORTION_ERROR.key in privacy:
            lines.append(("", f"proportions {privacy.get('inferred_proportions')}: off by "
                              f"{formatted(privacy[CLASS_PROPORTION_ERROR.key], '{:.3f}')} in total variation (prior "
                              f"{formatted(privacy.get(CLASS_PROPORTION_ERROR_CHANCE.key), '{:.3f}')}, uniform over "
                              f"the set {formatted(privacy.get(CLASS_PROPORTION_ERROR_SET.key), '{:.3f}')})"))
    elif LABEL_SET_EXACT.key in privacy:
        lines.append(("labels", f"{class_set}, counts exact "
                                f"{formatted(privacy.get(LABEL_COUNTS_EXACT.key), '{:.0f}')}, count error per class "
                                f"{formatted(privacy.get(LABEL_COUNT_ERROR.key), '{:.2f}')} (prior "
                                f"{formatted(privacy.get(LABEL_COUNT_ERROR_CHANCE.key), '{:.2f}')})"))
    spread = privacy.get("victims_summary")
    if spread:
        psnr = (f"PSNR mean {formatted(spread.get(PSNR_MEAN.key), '{:.2f}')} (min "
                f"{formatted(spread.get('psnr_min'), '{:.2f}')}, max {formatted(spread.get('psnr_max'), '{:.2f}')}), "
                f"{spread['above_chance']} above chance, ") if spread.get(PSNR_MEAN.key) is not None else ""
        others = "".join(f", {name} {spread[key]:.3f} on average" for key, name in
                         ((LABEL_SET_EXACT.key, "class set exact"),
                          (CLASS_PROPORTION_ERROR.key, "proportions error"),
                          (CLASS_PROPORTION_ERROR_CHANCE.key, "prior's proportions error"),
                          (MIA_AUC.key, "membership AUC"))
                         if spread.get(key) is not None)
        lines.append(("victims", f"{spread['count']} audited, {psnr}{spread['victims_per_second']:.3g} "
                                 f"victims/s{others}"))
    if "source" in run:
        return _wrapped(lines)
    models = [(name, utility.get(f.key)) for name, f in (("own model", PERSONAL_ACCURACY),
                                                          ("downloaded model", DOWNLOADED_ACCURACY))]
    scored = [f"{name} {formatted(v, '{:.3f}')}" for name, v in models if v is not None]
    useful = "known-client accuracy " + (", ".join(scored) or formatted(utility.get(ACCURACY.key), "{:.3f}"))
    if utility.get(AGNOSTIC_ACCURACY.key) is not None:
        useful += f", agnostic {formatted(utility[AGNOSTIC_ACCURACY.key], '{:.3f}')}"
    lines.append(("utility", useful))
    sent = f"up {formatted(nbytes.get(UPLINK_BYTES.key), '{:,}')}, down {formatted(nbytes.get(DOWNLINK_BYTES.key), '{:,}')}"
    if nbytes.get(TOTAL_RATIO.key) is not None:
        sent += f", total vs FedAvg {formatted(nbytes[TOTAL_RATIO.key], '{:.3f}')}"
    lines.append(("bytes", sent))
    if EPSILON.key in defense:
        if defense.get("epsilon_covers_all_reads"):
            lines.append(("privacy", f"epsilon {formatted(defense[EPSILON.key], '{:.2f}')} (victim), max "
                                     f"{formatted(defense.get(EPSILON_MAX.key), '{:.2f}')}, covers every read: yes"))
        else:
            uncovered = ", ".join(defense.get("uncovered_reads", ()))
            lines.append(("privacy", f"epsilon unbounded (uncovered reads released exactly: {uncovered}); accounted "
                                     f"releases {formatted(defense.get(EPSILON_ACCOUNTED.key), '{:.2f}')} (victim), "
                                     f"max {formatted(defense.get('epsilon_max_accounted'), '{:.2f}')}"))
    if MIA_TPR_BOUND_1.key in defense:
        lines.append(("", f"any membership test: TPR at most {formatted(defense[MIA_TPR_BOUND_1.key], '{:.3f}')} at "
                          f"FPR 1 %, {formatted(defense.get(MIA_TPR_BOUND_01.key), '{:.3f}')} at 0.1 % (f-DP, "
                          + ("every read accounted)" if defense.get("epsilon_covers_all_reads") else
                             "accounted releases only: the uncovered reads are not bounded)")))
    lines.extend(("privacy", str(text)) for text in aggregation.get("summary", ()))
    return _wrapped(lines)


def _wrapped(lines: list[tuple[str, str]]) -> str:
    out = []
    for key, text in lines:  # wrap at 80 columns under a 9-column label
        for i, part in enumerate(textwrap.wrap(text, width=WIDTH - 9, break_on_hyphens=False) or [""]):
            out.append(f"{key if i == 0 else '':<8} {part}".rstrip())
    return "\n".join(out)
