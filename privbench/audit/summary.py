"""The printed summary of a run: a short vertical table that fits an 80-column terminal, one section per kind of
finding (run and server, reconstruction, membership and source, the DP audit, labels, utility, bytes, privacy)."""
from __future__ import annotations

import textwrap
from typing import Any

from privbench.audit.games import summary_sections
from privbench.data.photos import PHOTOS
from privbench.figures import (
    ACCURACY,
    AGNOSTIC_ACCURACY,
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CRAFTED_UPLOADED,
    DOWNLINK_BYTES,
    DOWNLOAD_FLAGGED,
    DOWNLOADED_ACCURACY,
    EPSILON,
    EPSILON_ACCOUNTED,
    EPSILON_MAX,
    LABEL_SET_EXACT,
    MIA_AUC,
    MIA_TPR_BOUND_01,
    MIA_TPR_BOUND_1,
    PERSONAL_ACCURACY,
    PSNR_MEAN,
    TOTAL_RATIO,
    UPLINK_BYTES,
    formatted,
)

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
        if run.get("victim_photos") in PHOTOS:
            lines.append(("victim", f"holds {PHOTOS[run['victim_photos']].about} (victim.photos="
                                    f"{run['victim_photos']}); every other client's {run.get('data')} images are "
                                    "brought to their shape"))
    lines += _server(run, privacy, threat, defense)
    for family in summary_sections():  # each family's lines, registered beside its game (privbench.audit.games)
        lines += family(privacy, threat)
    lines += _victims(privacy)
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
    if threat.get("oracle"):
        lines.append(("ORACLE", "the attack was handed the batch's true label counts (attack.labels=oracle): a "
                                "control row, not a threat"))
    spent = threat.get("attack_budget")
    if spent and "iterations" in spent:
        restarts = int(spent.get("restarts", 1))
        how = f" ({spent['optimiser']})" if spent.get("optimiser") else ""
        lines.append(("budget", f"{spent['attack']}: {restarts} restart{'s' if restarts != 1 else ''} x "
                                f"{spent['iterations']:,} steps{how}"))
    elif spent and "unmixing" in spent:
        how = (f"{spent['starts']:,} starts x {spent['fixed_point_iterations']:,} fixed-point iterations"
               if spent["unmixing"] == "fixed_point" else f"the paper's unmixing, {spent['adam_steps']:,} Adam steps")
        lines.append(("budget", f"{spent['attack']}: {how}, " + (f"up to {spent['rounds']} rounds of peeling"
                                                                if spent.get("peel") else "one separation")))
    return lines


def _victims(privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """Many victims audited at once."""
    spread = privacy.get("victims_summary")
    if not spread:
        return []
    psnr = (f"PSNR mean {PSNR_MEAN.shown(spread)} (min "
            f"{formatted(spread.get('psnr_min'), PSNR_MEAN.fmt)}, "
            f"max {formatted(spread.get('psnr_max'), PSNR_MEAN.fmt)}), "
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
