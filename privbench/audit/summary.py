"""The printed summary of a run: a short vertical table that fits an 80-column terminal, one section per kind of
finding (run and server, reconstruction, membership and source, the DP audit, labels, utility, bytes, privacy)."""
from __future__ import annotations

import textwrap
from typing import Any

from privbench.figures import (
    ACCURACY,
    AGNOSTIC_ACCURACY,
    ATTRIBUTED_FRACTION,
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
    MISATTRIBUTED,
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
    VICTIM_ATTRIBUTED,
    formatted,
)
from privbench.metrics.reconstruction import Recovered

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
    run, privacy = metrics.get("run", {}), metrics.get("privacy", {})
    threat, defense = metrics.get("threat_model", {}), metrics.get("defense", {})
    what = f"{run.get('payload')} by {run.get('attack')}" if run.get("payload") else "no attack"
    if "source" in run:  # a recorded file (python -m privbench.attack): no run, victim, utility or bytes
        lines = [("file", f"{run['source']}: {what}, seed {run.get('seed')}, {run.get('num_images')} image(s)"),
                 ("inputs", str(run.get("inputs", "")))]
    else:
        lines = [("run", f"{run.get('fl')}, {what}, defense {run.get('defense')}, seed {run.get('seed')}, "
                         f"victim client{run.get('victim_client')} round {run.get('victim_round')}")]
    lines += [*_server(run, privacy, threat, defense), *_leakage(privacy, threat), *_membership(privacy),
              *_audit(privacy), *_labels(privacy), *_victims(privacy)]
    if "source" in run:
        return _wrapped(lines)
    return _wrapped([*lines, *_utility(metrics.get("utility", {}), metrics.get("bytes", {})), *_privacy(defense)])


def _server(run: dict[str, Any], privacy: dict[str, Any], threat: dict[str, Any],
            defense: dict[str, Any]) -> list[tuple[str, str]]:
    """What the server sees, what an active server crafted and what the client's check said; the attack's budget."""
    lines: list[tuple[str, str]] = []
    aggregation = _aggregation(defense)
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
        if threat.get("abandoned_by"):
            lines.append(("", f"{len(threat['abandoned_by'])} members saw another download's digest: round abandoned, "
                              "nothing to read (0 recovered)"))
    spent = threat.get("attack_budget")
    if spent and "iterations" in spent:
        restarts = int(spent.get("restarts", 1))
        how = f" ({spent['optimiser']})" if spent.get("optimiser") else ""
        lines.append(("budget", f"{spent['attack']}: {restarts} restart{'s' if restarts != 1 else ''} x "
                                f"{spent['iterations']:,} steps{how}"))
    return lines


def _leakage(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """A reconstruction's figures against chance."""
    lines: list[tuple[str, str]] = []
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
        if ATTRIBUTED_FRACTION.key in privacy:
            lines.append(("", f"attributed {formatted(privacy[ATTRIBUTED_FRACTION.key], '{:.2f}')} to their client "
                              f"(the victim's {formatted(privacy.get(VICTIM_ATTRIBUTED.key), '{:.2f}')}), "
                              f"{privacy.get(MISATTRIBUTED.key)} to another client's slot"))
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
    return lines


def _membership(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Membership and source inference."""
    lines: list[tuple[str, str]] = []
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
    return lines


def _audit(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """A one-run DP audit: its bounds beside the claims."""
    lines: list[tuple[str, str]] = []
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
    return lines


def _labels(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Class sets, proportions and label counts."""
    lines: list[tuple[str, str]] = []
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
    return lines


def _victims(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Many victims audited at once."""
    spread = privacy.get("victims_summary")
    if not spread:
        return []
    psnr = (f"PSNR mean {formatted(spread.get(PSNR_MEAN.key), '{:.2f}')} (min "
            f"{formatted(spread.get('psnr_min'), '{:.2f}')}, max {formatted(spread.get('psnr_max'), '{:.2f}')}), "
            f"{spread['above_chance']} above chance, ") if spread.get(PSNR_MEAN.key) is not None else ""
    others = "".join(f", {name} {spread[key]:.3f} on average" for key, name in
                     ((LABEL_SET_EXACT.key, "class set exact"), (CLASS_PROPORTION_ERROR.key, "proportions error"),
                      (CLASS_PROPORTION_ERROR_CHANCE.key, "prior's proportions error"), (MIA_AUC.key, "membership AUC"))
                     if spread.get(key) is not None)
    return [("victims", f"{spread['count']} audited, {psnr}{spread['victims_per_second']:.3g} victims/s{others}")]


def _utility(utility: dict[str, Any], nbytes: dict[str, Any]) -> list[tuple[str, str]]:
    """Accuracy and bytes."""
    models = [(name, utility.get(f.key)) for name, f in (("own model", PERSONAL_ACCURACY),
                                                          ("downloaded model", DOWNLOADED_ACCURACY))]
    scored = [f"{name} {formatted(v, '{:.3f}')}" for name, v in models if v is not None]
    useful = "known-client accuracy " + (", ".join(scored) or formatted(utility.get(ACCURACY.key), "{:.3f}"))
    if utility.get(AGNOSTIC_ACCURACY.key) is not None:
        useful += f", agnostic {formatted(utility[AGNOSTIC_ACCURACY.key], '{:.3f}')}"
    sent = f"up {formatted(nbytes.get(UPLINK_BYTES.key), '{:,}')}, down {formatted(nbytes.get(DOWNLINK_BYTES.key), '{:,}')}"
    if nbytes.get(TOTAL_RATIO.key) is not None:
        sent += f", total vs FedAvg {formatted(nbytes[TOTAL_RATIO.key], '{:.3f}')}"
    return [("utility", useful), ("bytes", sent)]


def _privacy(defense: dict[str, Any]) -> list[tuple[str, str]]:
    """The accountants' claims: record-level, f-DP, client-level."""
    lines: list[tuple[str, str]] = []
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
    lines.extend(("privacy", str(text)) for text in _aggregation(defense).get("summary", ()))
    return lines


def _aggregation(defense: dict[str, Any]) -> dict[str, Any]:
    return got if isinstance(got := defense.get("aggregation"), dict) else {}


def _wrapped(lines: list[tuple[str, str]]) -> str:  # wrap at 80 columns under a 9-column label
    return "\n".join(f"{key if i == 0 else '':<8} {part}".rstrip() for key, text in lines
                     for i, part in enumerate(textwrap.wrap(text, width=WIDTH - 9, break_on_hyphens=False) or [""]))
