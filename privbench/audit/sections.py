"""The sections of an audit's ``metrics.json`` that describe the run: what ran (``run``), the defence and its
accounting (``defense``), utility and bytes."""
from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig

from privbench.audit.plan import Plan
from privbench.data import FederatedData
from privbench.figures import (
    ACCURACY,
    CLUSTER_RAND_INDEX,
    DOWNLOADED_ACCURACY,
    EPSILON,
    EPSILON_ACCOUNTED,
    EPSILON_MAX,
    GLOBAL_ACCURACY,
    MIA_TPR_BOUND_01,
    MIA_TPR_BOUND_1,
    PERSONAL_ACCURACY,
    TOTAL_BYTES,
)
from privbench.fl.protocols import ProtocolResult
from privbench.metrics.clustering import rand_index
from privbench.metrics.lpips_metric import lpips_network
from privbench.provenance import versions


def _overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except ValueError:  # composed outside a Hydra app (tests)
        return []


def _choice(cfg: DictConfig, group: str) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().runtime.choices.get(group) or group
    except ValueError:  # composed outside a Hydra app (the Python API with a config)
        if group == "data" and "source" in cfg.data:
            return str(cfg.data.source)
        return str(cfg[group].get("_target_", group)).rsplit(".", 1)[-1].lower()


def defense_section(p: Plan) -> dict[str, Any]:
    """The defence's settings, every read of private data and its protection, and for DP-SGD the
    epsilon of the victim (and the largest over clients): unbounded (inf) where a read every known client makes is
    uncovered, with what the accountants recorded beside it."""
    trainer = p.protocol.trainer
    out = {**p.defense.describe(), "aggregation": p.protocol.aggregation.describe(),
           "reads": [r.as_dict() for r in trainer.reads()],
           "uncovered_reads": trainer.uncovered_reads()}
    out.update(out["aggregation"].get("figures", {}))  # an aggregation's own reported figures (client-level DP)
    per_client = out.get("epsilon_per_client")
    if per_client is not None:
        covers = not out["uncovered_reads"]
        accounted = per_client.get(p.victim.name, float("nan"))
        out[EPSILON_ACCOUNTED.key], out["epsilon_max_accounted"] = accounted, out.get(EPSILON_MAX.key)
        out[EPSILON.key] = accounted if covers else math.inf
        if not covers:
            out[EPSILON_MAX.key] = math.inf
        out["epsilon_covers_all_reads"] = covers
    bounds = getattr(trainer, "tpr_bounds", None)
    if bounds is not None:  # the f-DP bound of what the victim's accountant recorded
        out[MIA_TPR_BOUND_1.key], out[MIA_TPR_BOUND_01.key] = bounds(p.victim.name, [0.01, 0.001])
    return out


def run_section(p: Plan, key: str) -> dict[str, Any]:
    """What ran: protocol, payload, attack, defence, model, data, seed, victim, overrides."""
    net = lpips_network() if p.cfg.metrics.lpips and p.attacking else None
    return {"name": str(p.cfg.name), "config_key": key, "overrides": _overrides(), "fl": p.protocol.name,
            "payload": p.choice.kind if p.attacking else None, "attack": p.attack.name, "defense": p.defense.name,
            "aggregation": p.protocol.aggregation.name,
            "model": _choice(p.cfg, "model"), "data": _choice(p.cfg, "data"), "seed": p.seed,
            "num_images": p.victim.num_images, "victim_client": p.victim.client, "victim_round": p.victim.round,
            "victim_photos": p.victim.photos, "lpips_backbone": getattr(net, "source", None), "versions": versions()}


def utility(fl: ProtocolResult, agnostic: dict[str, Any], data: FederatedData) -> dict[str, Any]:
    """Known-client accuracy (and global where it exists), agnostic accuracies per init, history.

    For clustered protocols also ``cluster_rand_index``: how well the clusters agree with the
    grouping of clients by the set of classes they hold (1.0: clients with the same classes
    together, different ones apart; a ground truth only the evaluator has).
    """
    out: dict[str, Any] = {ACCURACY.key: fl.accuracy}
    if fl.global_accuracy is not None:
        out[GLOBAL_ACCURACY.key] = fl.global_accuracy
    if fl.personal_accuracy is not None:
        out[PERSONAL_ACCURACY.key] = fl.personal_accuracy
    if fl.downloaded_accuracy is not None:
        out[DOWNLOADED_ACCURACY.key] = fl.downloaded_accuracy
    if fl.clustering is not None:
        out["clusters"] = list(fl.clustering.labels)
        class_sets = [tuple(data.client_classes(c)) for c in range(data.num_clients)]
        out[CLUSTER_RAND_INDEX.key] = rand_index(fl.clustering.labels, class_sets)
    return {**out, "client_accuracy": {f"client{c}": a for c, a in fl.client_accuracy.items()},
            **{f"agnostic_{k}": v for k, v in agnostic.items() if k.startswith("accuracy_")},
            "agnostic_clients": agnostic.get("clients"), "history": [h.as_dict() for h in fl.history]}


def bytes_section(comm: dict[str, Any], payload_bytes: int | None) -> dict[str, Any]:
    """Training bytes by direction, ratios vs FedAvg, the attacked payload's and mean learnGene size."""
    out = {**comm["training"], "protocol_total_bytes": comm["protocol"][TOTAL_BYTES.key], "payload_bytes": payload_bytes,
           **comm.get("vs_fedavg", {})}
    if "learngene" in comm["by_kind"]:
        out["learngene_mean_bytes"] = comm["by_kind"]["learngene"] / comm["messages_by_kind"]["learngene"]
    return out
