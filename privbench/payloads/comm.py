"""Communication accounting from the payload index: per round, per client, per kind, and ratios."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from privbench.figures import DOWNLINK_BYTES, TOTAL_BYTES, TOTAL_RATIO, UPLINK_BYTES
from privbench.payloads.kinds import kind


def _client(record: dict[str, Any]) -> str:
    return record["receiver"] if record["direction"] == "down" else record["sender"]


def comm_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Byte totals of a run's recorded messages (``PayloadStore.records()``).

    ``protocol`` counts every message except audit-only kinds; ``training`` further
    excludes the agnostic phase, so it compares directly with another protocol's training
    traffic. ``by_round`` and ``by_client`` split protocol bytes.
    """
    out: dict[str, Any] = {"protocol": defaultdict(int), "training": defaultdict(int), "audit_only": defaultdict(int),
                           "by_kind": defaultdict(int), "messages_by_kind": defaultdict(int)}
    by_round: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_client: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for rec in records:
        key = f"{'uplink' if rec['direction'] == 'up' else 'downlink'}_bytes"
        out["by_kind"][rec["kind"]] += rec["nbytes"]
        out["messages_by_kind"][rec["kind"]] += 1
        if kind(rec["kind"]).audit_only:
            out["audit_only"][key] += rec["nbytes"]
            continue
        out["protocol"][key] += rec["nbytes"]
        if rec["phase"] == "training":
            out["training"][key] += rec["nbytes"]
        by_round[rec["round"]][key] += rec["nbytes"]
        by_client[_client(rec)][key] += rec["nbytes"]
    for section in ("protocol", "training", "audit_only"):
        s = out[section]
        s[TOTAL_BYTES.key] = s[UPLINK_BYTES.key] + s[DOWNLINK_BYTES.key]  # defaultdict: absent directions read 0
    out["by_round"] = {str(r): dict(v) for r, v in sorted(by_round.items())}
    out["by_client"] = {c: dict(v) for c, v in sorted(by_client.items())}
    return {k: dict(v) if isinstance(v, defaultdict) else v for k, v in out.items()}


def ratios(training: dict[str, int], reference: dict[str, int]) -> dict[str, float]:
    """This protocol's training bytes over a reference's (e.g. GENE-FL / FedAvg), uplink-only and total."""
    return {
        "uplink_ratio": training[UPLINK_BYTES.key] / reference[UPLINK_BYTES.key],
        "downlink_ratio": training[DOWNLINK_BYTES.key] / reference[DOWNLINK_BYTES.key],
        TOTAL_RATIO.key: training[TOTAL_BYTES.key] / reference[TOTAL_BYTES.key],
    }
