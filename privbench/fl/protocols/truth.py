"""The evaluator's ground truth for a message recorded where it passes the server: which train-set images it was
computed from."""
from __future__ import annotations

from privbench.data import FederatedData
from privbench.payloads import Payload
from privbench.victim import Victim


def client_truth(payload: Payload, data: FederatedData, victim: Victim, *, seed: int) -> list[int]:
    """The evaluator's ground truth for ``payload``: the train-set indices it was computed from, as the
    protocol's clients compute them (``begin_round``, ``victim_step``, ``send_subspace``). For messages
    recorded where they pass the server (Flower), whose messages never carry it.
    """
    if payload.direction == "down" or payload.spec.aggregate or (payload.spec.carries == "secret"
                                                                   and payload.kind != "masked_upload"):
        return []
    agnostic = payload.phase == "agnostic"
    c = int(payload.sender.removeprefix("agnostic" if agnostic else "client"))
    held = (data.agnostic_clients if agnostic else data.clients)[c]
    if payload.kind == "subspace" or agnostic:
        return [int(i) for i in held]
    if payload.round == victim.round and victim.audits(c):
        batch = held[victim.batch_positions(len(held), seed=seed)]
        if payload.spec.carries == "gradient" or victim.update_data == "batch":
            return [int(i) for i in batch]
    return [int(i) for i in held]
