"""The audit's report, in Markdown and HTML from the same tables: the app, its traffic by message kind, its privacy
mechanisms (claimed against measured), the attacks on each upload against chance, and the gate."""
from __future__ import annotations

import html
from typing import Any

from privbench.figures.labels import (
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    LABEL_COUNT_ERROR,
    LABEL_COUNT_ERROR_CHANCE,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
)
from privbench.figures.one_run import EPSILON_CLAIMED
from privbench.figures.reconstruction import PSNR_CHANCE, PSNR_MEAN, RECOVERED_FRACTION

Table = tuple[str, list[str], list[list[str]], str]  # title, header, rows, note


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, list):
        return ", ".join(_f(v, digits) for v in value) or "—"
    return str(value)


def tables(summary: dict[str, Any]) -> list[Table]:
    """The report's tables from ``metrics.json``'s summary."""
    out: list[Table] = []
    out.append(("Traffic", ["direction and type", "messages", "bytes on the wire", "bytes of arrays"],
                [[k, _f(v["messages"]), _f(v["wire_bytes"]), _f(v["array_bytes"])] for k, v in summary["bytes"].items()],
                "every message both ways, its content as Flower serialises it (messages.jsonl); the train exchanges' arrays are in "
                "payloads/"))
    out.append(("Privacy mechanisms", ["mechanism", "clip", "noise multiplier (measured)", "epsilon claimed",
                                       "epsilon measured", "delta", "what the epsilon covers"],
                [[m["mechanism"] + (f" ({m['client']})" if "client" in m else ""), _f(m.get("clip")),
                  _f(m.get("noise_multiplier_measured", m.get("noise_multiplier"))), _f(m.get(EPSILON_CLAIMED.key)),
                  _f(m.get("epsilon_measured")), _f(m.get("delta")), m.get("covers", "")] for m in summary["mechanisms"]]
                or [["none found", "", "", "", "", "", ""]],
                "measured epsilons: privbench's RDP accountant over the rounds each client took part in; DP-SGD's by its engines' own accountant (PRV by default), at the delta they targeted"))
    out.append(_canary_table(summary.get("canaries")))
    out.append(_record_table(summary.get("record_canaries")))
    rows = []
    for u in summary["uploads"]:
        m, lab, rec = u.get("membership", {}), u.get("labels", {}), u.get("reconstruction", {})
        rows.append([u["client"], _f(u["round"]), _f(m.get("membership_auc")),
                     _f(m.get("membership_tpr_at_1pct_fpr")) + (f" [{_f(m['membership_tpr_at_1pct_fpr_interval'])}]"
                                                               if "membership_tpr_at_1pct_fpr_interval" in m else ""),
                     _f(lab.get(LABEL_SET_EXACT.key)) + f" ({_f(lab.get(LABEL_SET_EXACT_CHANCE.key))})",
                     _f(lab.get(LABEL_COUNT_ERROR.key)) + f" ({_f(lab.get(LABEL_COUNT_ERROR_CHANCE.key))})",
                     (f"{_f(rec.get(PSNR_MEAN.key))} ({_f(rec.get(PSNR_CHANCE.key))}), recovered "
                      f"{_f(rec.get(RECOVERED_FRACTION.key))}" if rec else "—"),
                     "; ".join(u.get("skipped", [])) or ""])
    out.append(("Attacks on each upload", ["client", "round", "membership AUC (chance 0.5)",
                                           "TPR at 1 % FPR [95 % CI] (chance 0.01)", "class set exact (prior)",
                                           "count error per class (prior)", "PSNR dB (chance)", "not run"], rows,
                "membership: loss change on the upload, members the records the client trained on that round, "
                "non-members as many of its own evaluation records; labels: per-class counts from the head's bias "
                "along the update, against a prior that knows the class frequencies; reconstruction: the FedAvg-aware inversion "
                "of the uploads of clients with at most --max-images records, matched one-to-one, chance from the "
                "client's evaluation records; recovered: the share rebuilt to 20 dB"))
    agg = summary.get("aggregates", {})
    out.append(("Attacks on each round's aggregate", ["test", "rounds", "(round, client) pairs (members)",
                                                     "AUC [95 % CI] (chance 0.5)", "informed chance",
                                                     "TPR at 1 % FPR [95 % CI] (chance 0.01)", "not run"],
                [["participation", _f(agg.get("rounds")), f"{_f(agg.get('pairs'))} ({_f(agg.get('members'))})",
                  f"{_f(agg.get('participation_auc'))} [{_f(agg.get('participation_auc_interval'))}]",
                  _f(agg.get("participation_auc_informed_chance")),
                  f"{_f(agg.get('participation_tpr_at_1pct_fpr'))} "
                  f"[{_f(agg.get('participation_tpr_at_1pct_fpr_interval'))}]",
                  agg.get("skipped") or "; ".join(agg.get("rounds_left_out", []))]],
                "the model a round started from and the model made from its uploads (under secure aggregation, the "
                "server's whole view of the round): each client's loss change on records it trained on; members the "
                "clients whose replies came back that round; interval: whole clients resampled; informed chance: the "
                "same test on each client's evaluation records"))
    out.append(_reported_table(summary))
    out.append(("Gate", ["rule", "verdict", "why"],
                [[g["rule"], "FAIL" if g["failed"] else "pass", g["why"]] for g in summary["gate"]]
                or [["(no --fail-on rules)", "", ""]], ""))
    return out


def _canary_table(c: dict[str, Any] | None) -> Table:
    """The canary clients' table (``--canaries``)."""
    row = (["none (--canaries K adds them)", "", "", "", "", "", ""] if c is None else
           [f"{c['canaries']} on {c.get('of', c['mechanism_kind'])}, {c['unseen']} unseen",
            _f(c.get("rounds_observed")), f"{_f(c.get('mu'))} [{_f(c.get('mu_interval'))}]",
            f"{_f(c.get('empirical_epsilon'))} [{_f(c.get('epsilon_interval'))}]", _f(c.get("epsilon_planned")),
            f"{_f(c.get('canary_shift'))} / {_f(c.get('noise_measured'))} ({_f(c.get('noise_multiplier_planned'))})",
            c.get("verdict", "")])
    return ("Canary clients: an empirical client-level epsilon",
            ["canaries", "rounds", "mu-GDP [95 % CI]", "epsilon [95 % CI]", "epsilon of its setting",
             "shift / noise in clip norms (setting)", "verdict"], [row],
            "the last K SuperNodes send, through the app's mods, the model received plus twice the clip along a "
            "direction of their own (Andrew et al., ICLR 2024); each round's release (central: the next model "
            "sent, times the updates received; local: each canary's upload) is projected on every canary's and on "
            "unseen directions; Student's t over the canaries gives the interval; BROKEN where its 99.5 % lower "
            "end passes the epsilon of the mechanism's setting over the rounds observed")


def _record_table(c: dict[str, Any] | None) -> Table:
    """The canary records' table (``--record-canaries``)."""
    row = (["none (--record-canaries K adds them)", "", "", "", "", "", ""] if c is None else
           [f"{c['canaries']} in {c['host']}'s {c.get('optimizer', 'DP-SGD')}, {c['unseen']} unseen",
            _f(c.get("rounds_observed")), f"{_f(c.get('mu'))} [{_f(c.get('mu_interval'))}] ({_f(c.get('mu_planned'))})",
            f"{_f(c.get('empirical_epsilon'))} [{_f(c.get('epsilon_interval'))}]", _f(c.get("epsilon_accountant")),
            f"{_f(c.get('canary_shift'))} / {_f(c.get('noise_measured'))} "
            f"({_f(c.get('shift_planned'))} / {_f(c.get('noise_planned'))})", c.get("verdict", "")])
    return ("Canary records: an empirical record-level epsilon of DP-SGD",
            ["canaries", "rounds", "mu-GDP [95 % CI] (setting's mean shift)", "epsilon [95 % CI]",
             "epsilon of its accountant", "shift / noise a round, in step units (setting)", "verdict"], [row],
            "each step of the first SuperNode's Opacus DP optimizer, every canary record joins at the accountant's "
            "rate with a gradient of twice the clip along its own direction, clipped by Opacus with the batch "
            "(gradient canaries, Nasr et al. 2023); each round its upload less the model it received is projected on "
            "every canary's and on unseen directions, in step units (the clip times the step's scale, a round's "
            "mean); a matched filter across rounds whitened by the unseen directions, bootstrapped over the canaries, "
            "gives the interval; BROKEN where its 99.5 % lower end passes the accountant's epsilon, or (plain SGD, "
            "whose scale is known) where the noise measured is below the setting's or a canary moves the release "
            "more than clipping allows")


def _reported_table(summary: dict[str, Any]) -> Table:
    """The reported-metrics attack's table."""
    return ("Attacks on each client's reported metrics",
            ["client", "figures read (reports)", "class proportions: TV distance (chance)",
             "largest share right (chance)", "misfit (figures)", "not run"],
            [_reported_row(r) for r in summary.get("reported_metrics", [])] or [["none", "", "", "", "", ""]],
            "each evaluate reply's loss and accuracy figures are mixtures of the evaluated model's per-class "
            "figures by the client's class shares: estimated on the other clients' evaluation records and "
            "fitted on the simplex, each figure weighed by its noise and the fit held to the public class "
            "frequencies until it explains the figures down to that noise (misfit = figures); scored against the "
            "records the client evaluated on; TV 0 is exact; chance: the stronger of the public class "
            "frequencies and uniform shares; a client whose figures no mixture explains is left out of the gate")


def _reported_row(r: dict[str, Any]) -> list[str]:
    """One client's row of the reported-metrics table."""
    why = [r["skipped"]] if "skipped" in r else [f"{k} not read: {w}" for k, w in r.get("not_read", {}).items()]
    if r.get("consistent") is False:
        why.append("its figures are no mixture of the model's per-class figures: left out of the gate")
    read = ", ".join(f"{k} as {v}" for k, v in r.get("read_as", {}).items())
    return [r["client"], f"{read} ({r['reports']})" if "reports" in r else "",
            f"{_f(r.get(CLASS_PROPORTION_ERROR.key))} ({_f(r.get(CLASS_PROPORTION_ERROR_CHANCE.key))})",
            f"{_f(r.get('top_class'))} ({_f(r.get('top_class_chance'))})",
            f"{_f(r.get('misfit'))} ({_f(r.get('equations'))})", "; ".join(why)]


def markdown(summary: dict[str, Any]) -> str:
    """``report.md``."""
    lines = [f"# privbench audit of the Flower app {summary['app']['name']}", "",
             f"{summary['app']['supernodes']} simulated SuperNodes, {summary['app']['rounds']} rounds, seed "
             f"{summary['app']['seed']}; strategy {summary['app']['strategy']}; client mods "
             f"{', '.join(summary['app']['mods']) or 'none'}. Reproduce: `{summary['command']}`", ""]
    lines += [f"- {n}" for n in summary.get("notes", [])]
    lines += [f"- **{p}**" for p in summary["problems"]] + ([""] if summary["problems"] or summary.get("notes") else [])
    for title, header, rows, note in tables(summary):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", note, ""] if note else [""]
    return "\n".join(lines)


def page(summary: dict[str, Any]) -> str:
    """``report.html``: the same tables."""
    e = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>privbench: {e(summary['app']['name'])}</title>",
             "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.3em .6em}.problem{color:#a00}</style>",
             f"<h1>privbench audit of the Flower app {e(summary['app']['name'])}</h1>",
             f"<p>Reproduce: <code>{e(summary['command'])}</code></p>"]
    parts += [f"<p>{e(n)}</p>" for n in summary.get("notes", [])]
    parts += [f"<p class='problem'>{e(p)}</p>" for p in summary["problems"]]
    for title, header, rows, note in tables(summary):
        parts.append(f"<h2>{e(title)}</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows]
        parts.append(f"</table><p>{e(note)}</p>")
    grids = [u for u in summary["uploads"] if "reconstruction" in u]
    if grids:
        parts.append("<h2>Reconstructions</h2><p>each upload's true records (top) and their matched reconstructions</p>")
        parts += [f"<figure><img src='reconstructions/r{u['round']:04d}-{e(u['client'])}/grid.png' "
                  f"alt='{e(u['client'])} round {u['round']}'><figcaption>{e(u['client'])}, round {u['round']}: "
                  f"{_f(u['reconstruction'].get(PSNR_MEAN.key))} dB</figcaption></figure>" for u in grids]
    return "\n".join(parts) + "\n"
