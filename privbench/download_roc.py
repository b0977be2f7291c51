"""``python -m privbench.download_roc --out DIR [--seeds 0 1 2] [--rounds 6]``: the client's check as a detector.

Honest downloads: fresh initialisations of FedAvg's 2NN (``model=mlp``) and every global and cluster model FedAvg
and GENE-FL sent over ``--rounds`` rounds on the embedded data (every round and client captured). Crafted
downloads: each honest one as each active server crafts it (trap weights at 1 % of public images, half the rows
trapped, the PCA trap, the imprint block; ``privbench.attacks``), and the quiet download a non-victim receives
under model inconsistency (the half-trapped rows, or the PCA trap's second-layer rows, zeroed; the disguised trap's
hushed). Each crafted download also gives what its server reads from it (``download_read.recovered``: the
victim's one-step gradient on 8 of the client's images, the share recovered at 20 dB). Each download is
scored on 64 of the client's images (``defenses.detector.download_scores``; ``drift`` against the model the same run
sent the round before, the same cluster's where it had one) and checked by the shipped check
(``inspect_download``). The table gives, per family, the shipped check's flag rate, each score's AUROC against
the honest downloads, and a cautious client's checks: the shipped ones or any score above ``MARGIN`` times the
largest value an honest download of the other seeds reached (leave one seed out: the false-positive rate is that
of the held-out seed's honest downloads). The operating points: that cautious client at several margins, each
with its false-positive rate and the share of the victim's images each server still recovers past it.
"""
from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import io
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.disguised_trap import DisguisedTrapAttack
from privbench.attacks.active.imprint import ImprintAttack
from privbench.attacks.active.trap_behind_pca import TrapBehindPCAAttack
from privbench.attacks.active.trap_weights import TrapWeightsAttack
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.defenses.detector import download_scores, inspect_download
from privbench.download_read import recovered
from privbench.io import atomic_write_text
from privbench.metrics.membership import auc
from privbench.models import MLP
from privbench.pixels import normalise

SCORES = ("architecture", "aligned", "silent", "off_centre", "dead_rows", "rare_units", "bias_scale", "drift")
#: A cautious client flags a score above this many times the largest honest value it has seen (chosen after a
#: first run at 1x flagged 8 % of held-out honest downloads; the operating points give the others).
MARGIN = 2.0
#: The margins of the operating points (``points``).
MARGINS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
#: The victim's batch each crafted download is read on (the first of the client's images).
VICTIM = 8
#: The families whose quiet download (model inconsistency's, to every member but the victim) is scored too.
QUIETED = ("trap_partial", "trap_behind_pca", "disguised_trap", "disguised_trap, few rows")
#: The disguised trap that also knows ``rare_units``: the share of the second layer's rows it traps, their firing rate.
FEW = (0.05, 0.06)


def _servers() -> dict[str, ActiveAttack]:
    return {"trap_weights": TrapWeightsAttack(fire_rate=0.01), "trap_partial": TrapWeightsAttack(
        fire_rate=0.01, rows_trapped=0.5), "trap_behind_pca": TrapBehindPCAAttack(),
        "imprint": ImprintAttack(bins=128, scale=1.0), "disguised_trap": DisguisedTrapAttack(),
        "disguised_trap, few rows": DisguisedTrapAttack(fire_rate=FEW[1], rows_trapped=FEW[0])}


Honest = tuple[str, dict[str, torch.Tensor], "dict[str, torch.Tensor] | None"]


def _honest(seed: int, rounds: int, inits: int, work: Path) -> list[Honest]:
    """Fresh initialisations and, with ``rounds``, every full model FedAvg and GENE-FL sent; each with the model a
    client of that run received the round before (the same cluster's where it had one; None in the first round)."""
    out: list[Honest] = []
    for k in range(inits):  # a stream of their own: a run at seed s starts from torch.manual_seed(s)
        torch.manual_seed(1_000_003 + 1_000 * seed + k)
        out.append((f"init{k}", MLP(in_channels=1, image_size=28, num_classes=10).state_dict(), None))
    if rounds < 1:
        return out
    import privbench
    from privbench.payloads import PayloadStore

    names = set(out[0][1]) if out else set(MLP(in_channels=1, image_size=28, num_classes=10).state_dict())
    for fl in ("fedavg", "genefl"):
        run = privbench.run([f"fl={fl}", "model=mlp", f"fl.rounds={rounds}", "attack=none", "metrics.lpips=false",
                             "capture.rounds=all", "capture.clients=all"], results_dir=work / fl, seed=seed)
        store, seen = PayloadStore.open(run.payloads), set()
        sent: dict[tuple[int, Any], dict[str, torch.Tensor]] = {}  # (round, cluster) -> the model sent
        for record in store.records(direction="down", stored=True):
            payload = store.load(record["id"])
            key = (fl, payload.round, payload.cluster, payload.kind)
            if payload.spec.carries == "model" and payload.tensors is not None and set(payload.tensors) == names \
                    and key not in seen:
                seen.add(key)
                before = previous(sent, payload.round, payload.cluster)
                sent[(payload.round, payload.cluster)] = state = dict(payload.tensors)
                out.append((f"{fl} round {payload.round} {payload.kind}", state, before))
    return out


def previous(sent: dict[tuple[int, Any], dict[str, torch.Tensor]], round_: int,
             cluster: Any) -> dict[str, torch.Tensor] | None:
    """The model a client of ``cluster`` received the round before ``round_``: of the latest earlier round, its
    cluster's, else the last one that round sent (``sent`` in send order by ``(round, cluster)``); None in a first
    round.

    Example:
        >>> a, b, c = ({"w": torch.full((1,), float(v))} for v in range(3))
        >>> sent = {(0, None): a, (1, 0): b, (1, 1): c}
        >>> [previous(sent, 2, k)["w"].item() for k in (0, 1, 5)], previous(sent, 1, 0)["w"].item()
        ([1.0, 2.0, 2.0], 0.0)
        >>> previous(sent, 0, None) is None
        True
    """
    earlier = [r for r, _ in sent if r < round_]
    if not earlier:
        return None
    last = max(earlier)
    return sent.get((last, cluster)) or next(v for (r, _), v in reversed(list(sent.items())) if r == last)


def collect(seeds: Sequence[int], *, rounds: int, inits: int = 5, work: Path) -> list[dict[str, Any]]:
    """One row per download: its seed, family (``honest`` or the server), source, shipped verdict and scores."""
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    mean, std = tuple(train.mean), tuple(train.std)
    local = normalise(train.images[:64].float() / 255, train.mean, train.std)
    victim, labels = local[:VICTIM], train.labels[:VICTIM].long()
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    rows, seen = [], set()
    for seed in seeds:
        for source, state, before in _honest(seed, rounds, inits, work / f"seed{seed}"):
            content = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in state.values())).digest()
            if content in seen:  # a model sent twice (GENE-FL clusters that agree) is one download
                continue
            seen.add(content)
            model = MLP(in_channels=1, image_size=28, num_classes=10)
            model.load_state_dict(state)
            expected = {n: list(t.shape) for n, t in state.items()}
            downloads: list[tuple[str, nn.Module, float]] = [("honest", model, 0.0)]
            for family, server in _servers().items():
                crafted = server.craft(model, public, seed=seed, mean=mean, std=std)
                read = recovered(server, copy.deepcopy(crafted), victim, labels, mean=mean, std=std, seed=seed)
                downloads.append((family, crafted, read))
                if family in QUIETED:  # a non-victim's download reads nothing of the victim
                    downloads.append((f"quiet ({family})", server.quiet(crafted), 0.0))
            for family, net, read in downloads:
                sent = net.state_dict()
                verdict = inspect_download(sent, expected, model=net, local=local)
                rows.append({"seed": seed, "family": family, "source": source, "shipped": float(verdict.flagged),
                             "previous": float(before is not None), "recovered": read,
                             **download_scores(sent, expected, model=net, local=local, previous=before)})
    return rows


def cautious(rows: list[dict[str, Any]], margin: float = MARGIN) -> Callable[[dict[str, Any]], bool]:
    """The cautious client's verdict on a row: the shipped check, or any score above ``margin`` times the largest
    value an honest download of the other seeds reached (leave the row's seed out)."""
    seeds = sorted({r["seed"] for r in rows})
    if len(seeds) < 2:
        raise ValueError("download_roc: leaving one seed out needs rows of at least two seeds")
    flagged: dict[int, dict[str, float]] = {}
    for held in seeds:  # thresholds: from the honest downloads of the other seeds only
        others = [r for r in rows if r["family"] == "honest" and r["seed"] != held]
        flagged[held] = {s: margin * max(r[s] for r in others) for s in SCORES}
    return lambda r: bool(r["shipped"]) or any(r[s] > flagged[r["seed"]][s] for s in SCORES)


def _read(mine: list[dict[str, Any]], passes: Callable[[dict[str, Any]], bool]) -> str:
    """The mean share the server recovers over ``mine``, a flagged download reading nothing."""
    return f"{np.mean([float(r.get('recovered', 0.0)) * passes(r) for r in mine]):.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """Per family: downloads, the shipped check's flag rate, the cautious client's (leave one seed out), what the
    server recovers when the download is accepted and past each check, each score's AUROC against the honest
    downloads."""
    union = cautious(rows)

    def scored(r: dict[str, Any], s: str) -> bool:  # drift reads the round before: a first round has none
        return s != "drift" or bool(r.get("previous", 1.0))

    header = [f"AUROC {s}" + (" (downloads with a round before)" if s == "drift" else "") for s in SCORES]
    lines = [f"| downloads | n | shipped check flags | shipped or a score over {MARGIN:g} x the honest max "
             f"(leave one seed out) | recovered of {VICTIM}, accepted | past the shipped check | past the cautious "
             "client | " + " | ".join(header) + " |", "|---" * (7 + len(SCORES)) + "|"]
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        cells = [family, str(len(mine)), f"{np.mean([r['shipped'] for r in mine]):.2f}",
                 f"{np.mean([union(r) for r in mine]):.2f}", _read(mine, lambda r: True),
                 _read(mine, lambda r: not r["shipped"]), _read(mine, lambda r: not union(r))]
        for s in SCORES:
            crafted = [r[s] for r in mine if scored(r, s)]
            honest = [r[s] for r in rows if r["family"] == "honest" and scored(r, s)]
            if family == "honest" or not crafted or not honest:
                cells.append("-")
                continue
            labels = np.r_[np.ones(len(crafted), bool), np.zeros(len(honest), bool)]
            cells.append(f"{auc(np.r_[crafted, honest], labels):.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def points(rows: list[dict[str, Any]], margins: Sequence[float] = MARGINS) -> str:
    """The cautious client at each of ``margins``: the share of held-out honest downloads it flags (its
    false-positive rate) and, per crafted family, the share of the victim's images its server still recovers."""
    families = [f for f in dict.fromkeys(r["family"] for r in rows) if f != "honest" and not f.startswith("quiet")]
    lines = ["| margin (x the honest max) | honest downloads flagged | " +
             " | ".join(f"{f}: recovered past it" for f in families) + " |", "|---" * (2 + len(families)) + "|"]
    honest = [r for r in rows if r["family"] == "honest"]
    for margin in margins:
        union = cautious(rows, margin)
        cells = [f"{margin:g}", f"{np.mean([union(r) for r in honest]):.3f}"]
        cells += [_read([r for r in rows if r["family"] == f], lambda r: not union(r)) for f in families]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m privbench.download_roc", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for table.md and scores.csv")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each honest run (0: fresh inits only)")
    parser.add_argument("--inits", type=int, default=5, help="fresh initialisations per seed")
    args = parser.parse_args(argv)
    if args.rounds < 0 or args.inits < 0 or len(set(args.seeds)) < 2:
        parser.error("--rounds and --inits must be >= 0, and --seeds must name at least two seeds (leave one out)")
    with tempfile.TemporaryDirectory() as work:
        rows = collect(args.seeds, rounds=args.rounds, inits=args.inits, work=Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(args.out / "scores.csv", buffer.getvalue())
    command = (f"python -m privbench.download_roc --out {args.out} --seeds {' '.join(map(str, args.seeds))} "
               f"--rounds {args.rounds} --inits {args.inits}")
    text = (f"{(__doc__ or '').split(chr(10), 1)[1].strip()}\n\nWritten by `{command}`; one row per download in "
            f"`scores.csv`. AUROC: the chance that a crafted download scores above an honest one (ties 1/2; 0.5 "
            f"is no signal, below 0.5 the score points the other way); recovered: the share of the {VICTIM} images "
            f"the server reads from its victim's one-step gradient, a flagged download reading nothing.\n\n{table(rows)}"
            f"\nOperating points (the cautious client at other margins; leave one seed out):\n\n{points(rows)}")
    atomic_write_text(args.out / "table.md", text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
