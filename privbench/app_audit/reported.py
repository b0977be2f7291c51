"""Property inference on the app's metrics messages: what each client's reported evaluation figures say about its
class proportions (``attacks/property/reported_metrics.py``).

Each client's evaluate replies carry figures of the model its evaluate message carried (the same to every client:
``Broadcast.same``); metrics named with ``loss`` are read as a mean cross-entropy, with ``acc`` as an accuracy,
others are not read. The attacker estimates the per-class figures of each such model on public records (the other
clients' evaluation records, none of the client's) and fits the proportions, weighing each figure by its noise
(the public estimates', and the client's own records' given its ``num-examples``) and holding the fit to the
class-frequency prior as far as that noise allows (``discrepancy_fit``). Scored by the evaluator against the
classes of the records the client's loaders yielded in the evaluate calls it reported on: total variation (0 exact), and whether
the largest share is the client's most frequent class, each beside the class-frequency prior of the public records.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from privbench.app_audit.simulation import AppRun
from privbench.attacks.property.reported_metrics import (
    discrepancy_fit,
    equation_variance,
    figure_of,
    per_class_means,
    total_variation,
)
from privbench.errors import AttackNotApplicableError

Records = tuple[torch.Tensor, torch.Tensor]


def evaluated(run: AppRun, client: str, message_ids: set[str]) -> torch.Tensor | None:
    """The labels of the records ``client``'s loaders yielded in the evaluate calls ``message_ids`` answered (each
    call's records as it yielded them: a reported figure is their mean), the evaluator's truth."""
    node = next((n for n, p in run.partitions.items() if f"client{p}" == client), None)
    labels = [torch.cat([n.get("held_labels", n["labels"][:0]), n["labels"]]) for n in run.notes
              if n["node"] == node and n["type"] == "evaluate" and n.get("message_id") in message_ids]
    labels = [y for y in labels if len(y)]
    return torch.cat(labels) if labels else None


Report = tuple[str, dict[str, torch.Tensor], dict[str, float], int | None]


def _count(value: object) -> int | None:
    """A reply's ``num-examples`` where it is a plausible count."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 10**7:
        return int(value)
    return None


def reports(run: AppRun, client: str, names: set[str]) -> list[Report]:
    """``(message id, model evaluated, {metric: value}, its num-examples)`` for each of ``client``'s evaluate replies
    that came back with a figure read as a loss or an accuracy, of a model every client received alike (all of
    ``names``)."""
    sent = {i: b for b in run.models if b.message_type.split(".")[0] == "evaluate" and b.same
            and names <= b.arrays.keys() for i in b.message_ids}
    out = []
    for m in run.messages:
        if (m.direction != "up" or m.kind != "evaluate" or m.error or m.message_id not in sent
                or f"client{run.partitions.get(m.node, m.node)}" != client):
            continue
        figures = {k: float(v) for k, v in m.metrics.items() if figure_of(k) is not None
                   and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if figures:
            records = _count(m.metrics.get("num-examples", m.metrics.get("num_examples")))
            out.append((m.message_id, sent[m.message_id].arrays, figures, records))
    return out


def _equations(net: nn.Module, told: list[Report], public: Records, classes: int, prior: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One row per reported figure: the public per-class figures of the model it was reported for, the figure,
    and the standard deviation of its noise at the prior's shares (``equation_variance``)."""
    rows, values, sigma = [], [], []
    counts = torch.bincount(public[1].long(), minlength=classes).double()
    for _, arrays, figures, records in told:
        net.load_state_dict({**net.state_dict(), **arrays})
        means = per_class_means(net, public[0], public[1], classes)
        for key, value in sorted(figures.items()):
            kind = figure_of(key) or "loss"  # reports() kept only the figures read as one or the other
            rows.append(means[kind])
            values.append(value)
            sigma.append(max(equation_variance(means[f"{kind}_var"], counts, prior, records), 1e-12) ** 0.5)
    a = torch.stack(rows)
    if bool(a.isnan().any()):
        missing = sorted({c for c in range(classes) if bool(a[:, c].isnan().any())})
        raise AttackNotApplicableError(f"the public records hold no record of class(es) {missing}: their figures "
                                       "cannot be estimated")
    return a, torch.tensor(values, dtype=torch.float64), torch.tensor(sigma, dtype=torch.float64)


def _top_right(guess: torch.Tensor, true: torch.Tensor) -> float:
    """The chance that the class with ``guess``'s largest share (ties broken at random) is ``true``'s largest."""
    tied = torch.nonzero(guess >= guess.max() - 1e-12).flatten().tolist()
    return float(int(true.argmax()) in tied) / len(tied)


def client_proportions(run: AppRun, model: Callable[[], nn.Module], client: str, public: Records
                       ) -> dict[str, Any]:
    """The proportions ``client``'s reported figures imply, scored; refused, with why, where none can be fitted."""
    net = model()
    told = reports(run, client, {n for n, t in net.state_dict().items() if t.is_floating_point()})
    if not told:
        raise AttackNotApplicableError("no evaluate reply with a loss or accuracy figure of a model sent alike to all")
    truth = evaluated(run, client, {i for i, *_ in told})
    if truth is None:
        raise AttackNotApplicableError("its loaders yielded no evaluation records (no truth to score against)")
    with torch.no_grad():
        classes = int(net.eval()(public[0][:1]).shape[-1])
    prior = torch.bincount(public[1].long(), minlength=classes).double() / len(public[1])
    a, b, sigma = _equations(net, told, public, classes, prior)
    p, ridge = discrepancy_fit(a, b, sigma, prior)
    true = torch.bincount(truth.long(), minlength=classes).double() / len(truth)
    return {"client": client, "equations": len(b), "reports": len(told),
            "read_as": {k: figure_of(k) for k in sorted({k for _, _, f, _ in told for k in f})},
            "noise_model": "public estimates and the client's own records (its num-examples)"
                           if all(r is not None for *_, r in told) else "public estimates only (no num-examples)",
            "proportions": [round(float(v), 4) for v in p], "true_proportions": [round(float(v), 4) for v in true],
            # to 1e-4: an app's reported floats vary in their last digits between runs (its threads' sums)
            "class_proportion_error": round(total_variation(p, true), 4),
            "class_proportion_error_chance": round(total_variation(prior, true), 4),
            "top_class": _top_right(p, true), "top_class_chance": _top_right(prior, true),
            "ridge": float(f"{ridge:.4g}"), "misfit": round(float((((a @ p - b) / sigma) ** 2).sum()), 4),
            "records": len(truth)}


def reported_metrics(run: AppRun, model: Callable[[], nn.Module], publics: dict[str, Records | None]
                     ) -> list[dict[str, Any]]:
    """Every client's proportions from its reported figures (or, per client, why not)."""
    out: list[dict[str, Any]] = []
    for client, public in sorted(publics.items(), key=lambda kv: int(kv[0].removeprefix("client"))):
        try:
            if public is None:
                raise AttackNotApplicableError("no other client's evaluation records to serve as public data")
            out.append(client_proportions(run, model, client, public))
        except AttackNotApplicableError as exc:
            out.append({"client": client, "skipped": str(exc)})
    return out
