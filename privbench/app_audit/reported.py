"""Property inference on the app's metrics messages: what each client's reported evaluation figures say about its
class proportions (``attacks/property/reported_metrics.py``).

Each client's evaluate replies carry figures of the model its evaluate message carried (the same to every client:
``Broadcast.same``); metrics named with ``loss`` are read as a mean cross-entropy, with ``acc`` as an accuracy,
others are not read. The attacker estimates the per-class figures of each such model on public records (the other
clients' evaluation records, less any the client evaluated on itself) and fits the proportions, weighing each
figure by its noise (the public estimates', and the client's own records' given its ``num-examples``, else the
other clients' mean count) and holding the fit to the class-frequency prior as far as that noise allows
(``discrepancy_fit``). A key whose figures cannot be such means (``off_hull``) is not read; a client whose figures
no mixture explains (``INCONSISTENT``) is reported so and left out of the gate. Scored by the evaluator against the
classes of the records the client's loaders yielded in the evaluate calls it reported on: total variation (0
exact), and whether the largest share is the client's most frequent class, each beside chance (the stronger of the
public class frequencies and the uniform shares).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from privbench.app_audit.attacks import num_examples
from privbench.app_audit.recording import Sent
from privbench.app_audit.simulation import AppRun
from privbench.attacks.property.reported_metrics import (
    INCONSISTENT,
    discrepancy_fit,
    equation_variance,
    figure_of,
    off_hull,
    per_class_means,
    total_variation,
)
from privbench.errors import AttackNotApplicableError
from privbench.figures import CLASS_PROPORTION_ERROR as ERROR
from privbench.figures import CLASS_PROPORTION_ERROR_CHANCE as CHANCE

Records = tuple[torch.Tensor, torch.Tensor]
Report = tuple[str, dict[str, torch.Tensor], dict[str, float], int | None]
NO_FIGURE = "no evaluate reply with a loss or accuracy figure of a model sent alike to all"


def evaluated(run: AppRun, client: str, message_ids: set[str]) -> Records | None:
    """The records ``client``'s loaders yielded in the evaluate calls ``message_ids`` answered (each call's records
    as it yielded them: a reported figure is their mean), the evaluator's truth."""
    node = next((n for n, p in run.partitions.items() if f"client{p}" == client), None)
    mine = [n for n in run.notes
            if n["node"] == node and n["type"] == "evaluate" and n.get("message_id") in message_ids]
    if any(n.get("capped") for n in mine):
        raise AttackNotApplicableError("its loaders yielded more evaluation records than the audit notes per message: "
                                       "the truth would be a part")
    rows = [(torch.cat([n["held_inputs"], n["inputs"]]), torch.cat([n["held_labels"], n["labels"]]))
            if "held_labels" in n else (n["inputs"], n["labels"]) for n in mine]
    rows = [(x, y) for x, y in rows if len(y)]
    return (torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows])) if rows else None


def _replies(run: AppRun, client: str) -> Iterator[Sent]:
    """``client``'s evaluate replies that came back without error."""
    return (m for m in run.messages if m.direction == "up" and m.kind == "evaluate" and not m.error
            and f"client{run.partitions.get(m.node, m.node)}" == client)


def _figures(m: Sent) -> dict[str, float]:
    """A reply's finite figures read as a loss or an accuracy."""
    return {k: float(v) for k, v in m.metrics.items() if figure_of(k) is not None
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def reports(run: AppRun, client: str, names: set[str]) -> list[Report]:
    """``(message id, model evaluated, {metric: value}, its num-examples)`` for each of ``client``'s evaluate replies
    that came back with a figure read as a loss or an accuracy, of a model every client received alike (all of
    ``names``, and only those kept)."""
    sent = {i: b for b in run.models if b.message_type.split(".")[0] == "evaluate" and b.same
            and names <= b.arrays.keys() for i in b.message_ids}
    return [(m.message_id, {n: sent[m.message_id].arrays[n] for n in names}, figures, num_examples(m.metrics))
            for m in _replies(run, client) if m.message_id in sent and (figures := _figures(m))]


def _equations(net: nn.Module, told: list[Report], public: Records, classes: int, prior: torch.Tensor,
               fallback: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per key: one row per reported figure (the public per-class figures of the model it was reported for), the
    figures, and the standard deviation of each one's noise at the prior's shares (``equation_variance``; the
    client's own records counted by its ``num-examples``, else ``fallback``)."""
    out: dict[str, list[tuple[torch.Tensor, float, float]]] = {}
    counts = torch.bincount(public[1].long(), minlength=classes).double()
    for _, arrays, figures, records in told:
        net.load_state_dict({**net.state_dict(), **arrays})
        means = per_class_means(net, public[0], public[1], classes)
        for key, value in sorted(figures.items()):
            kind = figure_of(key) or "loss"  # reports() kept only the figures read as one or the other
            noise = equation_variance(means[f"{kind}_var"], counts, prior, records or fallback)
            out.setdefault(key, []).append((means[kind], value, max(noise, 1e-12) ** 0.5))
    if any(bool(row.isnan().any()) for rows in out.values() for row, _, _ in rows):
        missing = sorted(set(range(classes)) - set(public[1].long().tolist()))
        raise AttackNotApplicableError(f"the public records hold no record of class(es) {missing}: their figures "
                                       "cannot be estimated")
    return {k: (torch.stack([r for r, _, _ in v]), torch.tensor([x for _, x, _ in v], dtype=torch.float64),
                torch.tensor([s for _, _, s in v], dtype=torch.float64)) for k, v in out.items()}


def _top_right(guess: torch.Tensor, true: torch.Tensor) -> float:
    """The chance that the class with ``guess``'s largest share (ties broken at random) is ``true``'s largest."""
    tied = torch.nonzero(guess >= guess.max() - 1e-12).flatten().tolist()
    return float(int(true.argmax()) in tied) / len(tied)


def _public_without(public: Records, own: Records) -> Records:
    """``public`` less the records the client evaluated on itself (clients may share an evaluation set)."""
    mine = {row.tobytes() for row in own[0].reshape(len(own[0]), -1).numpy()}
    keep = torch.tensor([row.tobytes() not in mine for row in public[0].reshape(len(public[0]), -1).numpy()])
    return public[0][keep], public[1][keep]


def client_proportions(run: AppRun, model: Callable[[], nn.Module], client: str, public: Records, *,
                       peers: int = 1) -> dict[str, Any]:
    """The proportions ``client``'s reported figures imply, scored; refused, with why, where none can be fitted.
    ``peers``: the clients whose evaluation records make up ``public`` (their mean count stands in for a missing
    ``num-examples``)."""
    net = model()
    told = reports(run, client, {n for n, t in net.state_dict().items() if t.is_floating_point()})
    if not told:
        raise AttackNotApplicableError(NO_FIGURE if not any(_figures(m) for m in _replies(run, client)) else
                                       "its loss or accuracy figures are of models not sent alike to every client "
                                       "with the model's tensors (per-client or no arrays): not read")
    truth = evaluated(run, client, {i for i, *_ in told})
    if truth is None:
        raise AttackNotApplicableError("its loaders yielded no evaluation records (no truth to score against)")
    public = _public_without(public, truth)
    if not len(public[1]):
        raise AttackNotApplicableError("every public record is one it evaluated on itself (a shared evaluation set)")
    with torch.no_grad():
        classes = int(net.eval()(public[0][:1]).shape[-1])
    if classes < 2 or int(public[1].max()) >= classes or int(truth[1].max()) >= classes:
        raise AttackNotApplicableError(f"the model's {classes} output(s) are not one logit per class of the records")
    prior = torch.bincount(public[1].long(), minlength=classes).double() / len(public[1])
    keys = _equations(net, told, public, classes, prior, fallback=max(1, round(len(public[1]) / max(peers, 1))))
    not_read = {k: why for k, (a, b, s) in keys.items() if (why := off_hull(a, b, s, figure_of(k) or "loss"))}
    kept = [v for k, v in keys.items() if k not in not_read]
    if not kept:
        raise AttackNotApplicableError("; ".join(f"{k}: {why}" for k, why in not_read.items()))
    a, b, sigma = (torch.cat(parts) for parts in zip(*kept))
    p, ridge, best_misfit = discrepancy_fit(a, b, sigma, prior)
    true = torch.bincount(truth[1].long(), minlength=classes).double() / len(truth[1])
    uniform = torch.full((classes,), 1.0 / classes, dtype=torch.float64)
    return {"client": client, "equations": len(b), "reports": len(told),
            "read_as": {k: figure_of(k) for k in keys if k not in not_read}, "not_read": not_read,
            "noise_model": "public estimates and the client's own records (its num-examples)"
                           if all(r is not None for *_, r in told) else
                           "public estimates and the client's own records (the other clients' mean count)",
            "consistent": best_misfit / len(b) <= INCONSISTENT,
            "proportions": [round(float(v), 4) for v in p],
            "true_proportions": [round(float(v), 4) for v in true],
            # to 1e-4: an app's reported floats vary in their last digits between runs (its threads' sums)
            ERROR.key: round(total_variation(p, true), 4),
            CHANCE.key: round(min(total_variation(prior, true), total_variation(uniform, true)), 4),
            "class_proportion_error_prior": round(total_variation(prior, true), 4),
            "top_class": _top_right(p, true), "top_class_chance": max(_top_right(prior, true), 1.0 / classes),
            "ridge": None if math.isinf(ridge) else float(f"{ridge:.4g}"), "held_at_prior": math.isinf(ridge),
            "misfit": round(float((((a @ p - b) / sigma) ** 2).sum()), 4), "best_misfit": round(best_misfit, 4),
            "records": len(truth[1])}


def reported_metrics(run: AppRun, model: Callable[[], nn.Module], publics: dict[str, Records | None]
                     ) -> list[dict[str, Any]]:
    """Every client's proportions from its reported figures (or, per client, why not)."""
    out: list[dict[str, Any]] = []
    peers = max(1, sum(p is not None for p in publics.values()) - 1)
    for client, public in sorted(publics.items(), key=lambda kv: int(kv[0].removeprefix("client"))):
        try:
            if public is None:
                raise AttackNotApplicableError("no other client's evaluation records to serve as public data")
            out.append(client_proportions(run, model, client, public, peers=peers))
        except AttackNotApplicableError as exc:
            out.append({"client": client, "skipped": str(exc)})
    return out


def gain(rows: list[dict[str, Any]]) -> list[float] | None:
    """The gate's per-client gains (chance's total variation less the attack's) of the clients whose figures are
    consistent; ``[0.0]`` when no client reported a figure (nothing exposed), None when none could be scored."""
    scored = [r[CHANCE.key] - r[ERROR.key] for r in rows if ERROR.key in r and r["consistent"]]
    if scored:
        return scored
    return [0.0] if rows and all(r.get("skipped") == NO_FIGURE for r in rows) else None
