"""What the audit's attacker is assumed to hold and know (``threat_model.json``)."""
from __future__ import annotations

from typing import Any


def threat_model(summary: dict[str, Any], options: Any) -> dict[str, Any]:
    """The attacker of every figure in the report, and its budget."""
    sources: dict[str, str] = next((u["labels"]["training_from"] for u in summary["uploads"] if "labels" in u), {})
    return {
        "attacker": "the server, honest but curious: every message its grid carries, both ways (messages.jsonl)",
        "model": f"the app's own class {summary['app']['model']}, at the weights each client received",
        "membership": {"test": "loss change (Watson et al. 2022; the FL form of Nasr et al. 2019)",
                       "candidates": "the client's records of that round (members) and as many of its own "
                                     "evaluation records (non-members), by seed", "budget": "one message, no shadows"},
        "labels": {"attack": "per-class counts from the head's bias along the update",
                   "public_data": "the other clients' evaluation records, labelled",
                   "client_training_from": sources},
        "reconstruction": {"attack": "FedAvg-aware inversion (Dimitrov et al. 2022), the declared training replayed",
                           "budget": {"iterations": options.inversion_steps, "restarts": 1,
                                      "max_images": options.max_images},
                           "input_scale": "read from the range of the inputs (pixels in [0, 1] before an affine "
                                          "normalisation)"},
        "participation": {"test": "loss change of a client's records from a round's model to the next one the "
                                  "server sends (client-level membership; what secure aggregation leaves)",
                          "candidates": "every client that trained in some round, in every observed round; members "
                                        "the clients whose replies to the round's model came back without error",
                          "records": "up to 256 of the records each client trained on, by seed",
                          "budget": "the two models of each round, no shadows"},
        "reported_metrics": {"attack": "class proportions from each client's evaluate figures (metrics named "
                                       "with 'loss' read as a mean cross-entropy, with 'acc' as an accuracy) of the "
                                       "models sent alike to all, fitted on the simplex",
                             "public_data": "the other clients' evaluation records, labelled",
                             "budget": "every evaluate reply of the run, no shadows"},
        "privacy_mechanisms": "found on the app's objects (ClientApp mods, the strategy started); LocalDpMod "
                              "measured as a black box; epsilons by privbench's RDP accountant, DP-SGD's by "
                              "the accountant its Opacus engines used",
        "canary_clients": ("none" if summary.get("canaries") is None else
                           {"clients": f"the last {options.canaries} SuperNodes (partition ids), run as the app's "
                                       "own with their train reply planted before the app's mods",
                            "update": "twice the mechanism's clip along a random direction of each, a sign of its "
                                      "own each round", "unseen_directions": summary["canaries"]["unseen"],
                            "reads": "central: every model the server sends; local: each canary's upload",
                            "test": "Gaussian fit of each round's projections (Andrew et al., ICLR 2024), "
                                    "Student's t over the canaries"}),
        "canary_records": ("none" if summary.get("record_canaries") is None else
                           {"host": "the first SuperNode (partition 0), its uploads left out of the attacks",
                            "gradient": "each step of its Opacus DP optimizer, each canary joins at the rate the "
                                        "accountant is told, with a gradient of twice the clip along a random "
                                        "direction of its own (a sign of its own each round), before Opacus clips",
                            "unseen_directions": summary["record_canaries"]["unseen"],
                            "reads": "the host's upload less the model it received, each round",
                            "test": "matched filter of each canary's signs across rounds, whitened by the unseen "
                                    "directions, bootstrapped over the canaries (white-box gradient canaries, Nasr "
                                    "et al. 2023)"}),
        "reply_read_as": {"auto": "the client's trained model (a reply that is no model near the one sent is not "
                                  "attacked)", "model": "the client's trained model (--reply-kind model)",
                          "delta": "the model received plus the reply (--reply-kind delta)"
                          }[options.declared.reply_kind],
        "truth": "the records the clients' data loaders yielded during each message (the evaluator's, never sent)",
        "seed": options.seed, "delta": options.delta,
    }
