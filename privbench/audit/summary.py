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
    elif privacy.get("failed") and threat.get(CRAFTED_UPLOADED.key) is not False:
        lines.append(("leakage", "attack failed: no reconstruction"))
    return lines


def _membership(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Membership and source inference."""
    lines: list[tuple[str, str]] = []
    if MIA_AUC.key in privacy:
        lines.append(("members", f"{privacy.get('mia_test')} test: AUC {MIA_AUC.shown(privacy)} "
                                 f"(chance 0.5), TPR {MIA_TPR_1.shown(privacy)} "
                                 f"[{MIA_TPR_1.shown(privacy, '_lo')}, "
                                 f"{MIA_TPR_1.shown(privacy, '_hi')}] at FPR 1 %, "
                                 f"{MIA_TPR_01.shown(privacy)} at 0.1 % "
                                 f"({privacy.get(MIA_MEMBERS.key)} members, {privacy.get(MIA_NON_MEMBERS.key)} "
                                 + ("excluded canaries)" if str(privacy.get("mia_test")).endswith("_canaries")
                                    else "non-members: (round, client) pairs)" if MIA_AUC_INFORMED.key in privacy
                                    else "class-matched non-members)")))
        if MIA_AUC_INFORMED.key in privacy:
            lines.append(("", f"knowing only each client's classes: AUC "
                              f"{MIA_AUC_INFORMED.shown(privacy)}, TPR "
                              f"{MIA_TPR_1_INFORMED.shown(privacy)} at FPR 1 % (the same test "
                              "on test-split records of their classes)"))
    if SOURCE_ACCURACY.key in privacy:
        lines.append(("source", f"which client holds a record: {SOURCE_ACCURACY.shown(privacy)} "
                                f"right over {privacy.get('source_records')} records of {privacy.get('source_clients')} "
                                f"clients (chance {SOURCE_CHANCE.shown(privacy)}, knowing "
                                f"each client's classes {SOURCE_CHANCE_INFORMED.shown(privacy)})"))
    return lines


def _audit(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """A one-run DP audit: its bounds beside the claims."""
    lines: list[tuple[str, str]] = []
    if EPSILON_LOWER.key in privacy:
        lines.append(("audit", f"one-run epsilon >= {EPSILON_LOWER.shown(privacy)} at "
                               f"{formatted(100 * privacy.get('epsilon_lower_bound_confidence', 0.95), '{:.0f}')} % "
                               f"({privacy.get('canary_guesses_right')} of {privacy.get('canary_guesses')} guesses "
                               f"right, {privacy.get('canaries')} canaries), claimed "
                               f"{EPSILON_CLAIMED.shown(privacy)} for the round"))
        if privacy.get(EPSILON_LOWER_FDP.key) is not None:
            lines.append(("", f"through f-DP ({privacy.get('fdp_family')}): epsilon >= "
                              f"{EPSILON_LOWER_FDP.shown(privacy)}, against the round's tight "
                              f"{EPSILON_TIGHT.shown(privacy)}"))
        if privacy.get(CANARY_TPR_BOUND_1.key) is not None:
            lines.append(("", f"the round's f-DP bound on a canary test: TPR at most "
                              f"{CANARY_TPR_BOUND_1.shown(privacy)} at FPR 1 %, "
                              f"{CANARY_TPR_BOUND_01.shown(privacy)} at 0.1 % (measured "
                              f"{MIA_TPR_1.shown(privacy)} and "
                              f"{MIA_TPR_01.shown(privacy)})"))
    return lines


def _labels(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Class sets, proportions and label counts."""
    lines: list[tuple[str, str]] = []
    class_set = (f"class set exact {LABEL_SET_EXACT.shown(privacy)} (prior "
                 f"{LABEL_SET_EXACT_CHANCE.shown(privacy)})")
    if LABEL_SET_JACCARD.key in privacy:
        lines.append(("classes", f"inferred {privacy.get('inferred_classes')}: {class_set}, overlap "
                                 f"{LABEL_SET_JACCARD.shown(privacy)} (prior "
                                 f"{LABEL_SET_JACCARD_CHANCE.shown(privacy)})"))
        if CLASS_PROPORTION_ERROR.key in privacy:
            lines.append(("", f"proportions {privacy.get('inferred_proportions')}: off by "
                              f"{CLASS_PROPORTION_ERROR.shown(privacy)} in total variation (prior "
                              f"{CLASS_PROPORTION_ERROR_CHANCE.shown(privacy)}, uniform over "
                              f"the set {CLASS_PROPORTION_ERROR_SET.shown(privacy)})"))
    elif LABEL_SET_EXACT.key in privacy:
        lines.append(("labels", f"{class_set}, counts exact "
                                f"{LABEL_COUNTS_EXACT.shown(privacy)}, count error per class "
                                f"{LABEL_COUNT_ERROR.shown(privacy)} (prior "
                                f"{LABEL_COUNT_ERROR_CHANCE.shown(privacy)})"))
    return lines


def _victims(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Many victims audited at once."""
    spread = privacy.get("victims_summary")
    if not spread:
        return []
    psnr = (f"PSNR mean {PSNR_MEAN.shown(spread)} (min "
            f"{formatted(spread.get('psnr_min'), PSNR_MEAN.fmt)}, max {formatted(spread.get('psnr_max'), PSNR_MEAN.fmt)}), "
            f"{spread['above_chance']} above chance, ") if spread.get(PSNR_MEAN.key) is not None else ""
    others = "".join(f", {name} {spread[key]:.3f} on average" for key, name in
                     ((LABEL_SET_EXACT.key, "class set exact"), (CLASS_PROPORTION_ERROR.key, "proportions error"),
                      (CLASS_PROPORTION_ERROR_CHANCE.key, "prior's proportions error"), (MIA_AUC.key, "membership AUC"))
                     if spread.get(key) is not None)
    return [("victims", f"{spread['count']} audited, {psnr}{spread['victims_per_second']:.3g} victims/s{others}")]


def _utility(utility: dict[str, Any], nbytes: dict[str, Any]) -> list[tuple[str, str]]:
    """Accuracy and bytes."""
    models = (("own model", PERSONAL_ACCURACY), ("downloaded model", DOWNLOADED_ACCURACY))
    scored = [f"{name} {f.shown(utility)}" for name, f in models if utility.get(f.key) is not None]
    useful = "known-client accuracy " + (", ".join(scored) or ACCURACY.shown(utility))
    if utility.get(AGNOSTIC_ACCURACY.key) is not None:
        useful += f", agnostic {AGNOSTIC_ACCURACY.shown(utility)}"
    sent = f"up {UPLINK_BYTES.shown(nbytes)}, down {DOWNLINK_BYTES.shown(nbytes)}"
    if nbytes.get(TOTAL_RATIO.key) is not None:
        sent += f", total vs FedAvg {TOTAL_RATIO.shown(nbytes)}"
    return [("utility", useful), ("bytes", sent)]


def _privacy(defense: dict[str, Any]) -> list[tuple[str, str]]:
    """The accountants' claims: record-level, f-DP, client-level."""
    lines: list[tuple[str, str]] = []
    if EPSILON.key in defense:
        if defense.get("epsilon_covers_all_reads"):
            lines.append(("privacy", f"epsilon {EPSILON.shown(defense)} (victim), max "
                                     f"{EPSILON_MAX.shown(defense)}, covers every read: yes"))
        else:
            uncovered = ", ".join(defense.get("uncovered_reads", ()))
            lines.append(("privacy", f"epsilon unbounded (uncovered reads released exactly: {uncovered}); accounted "
                                     f"releases {EPSILON_ACCOUNTED.shown(defense)} (victim), "
                                     f"max {EPSILON_MAX.shown(defense, '_accounted')}"))
    if MIA_TPR_BOUND_1.key in defense:
        lines.append(("", f"any membership test: TPR at most {MIA_TPR_BOUND_1.shown(defense)} at "
                          f"FPR 1 %, {MIA_TPR_BOUND_01.shown(defense)} at 0.1 % (f-DP, "
                          + ("every read accounted)" if defense.get("epsilon_covers_all_reads") else
                             "accounted releases only: the uncovered reads are not bounded)")))
    lines.extend(("privacy", str(text)) for text in _aggregation(defense).get("summary", ()))
    return lines


def _aggregation(defense: dict[str, Any]) -> dict[str, Any]:
    return got if isinstance(got := defense.get("aggregation"), dict) else {}


def _wrapped(lines: list[tuple[str, str]]) -> str:  # wrap at 80 columns under a 9-column label
    return "\n".join(f"{key if i == 0 else '':<8} {part}".rstrip() for key, text in lines
                     for i, part in enumerate(textwrap.wrap(text, width=WIDTH - 9, break_on_hyphens=False) or [""]))
