"""docs/extending.md's attack recipe, followed alone: a root ``Attack`` of a new family runs through the audit.

The attack here is a toy (it reads labels off the head's bias change of an update); the point is the
contract: a ``ModelView`` in, an ``InferredLabels`` finding out, scored by the registered scorer, with
no change to the attack phase.
"""
from __future__ import annotations

import json
from typing import ClassVar

import torch
from omegaconf import OmegaConf

from privbench import api
from privbench.attacks.base import Attack
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.views import ModelView, ViewKind
from privbench.models import classifier_head
from privbench.payloads.kinds import Carries


class HeadBiasLabels(Attack):
    """Classes whose head bias rose during local training, each credited with an equal share of the samples."""

    name = "head_bias_labels"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "model"

    def attack(self, view: ModelView, *, seed: int) -> InferredLabels:
        bias = view.delta[f"{classifier_head(view.model)}.bias"]
        rose = [int(c) for c in torch.nonzero(bias > 0).flatten()]
        n = view.training.num_samples if view.training is not None else 0
        counts = {c: n // len(rose) + (1 if i < n % len(rose) else 0) for i, c in enumerate(rose)} if rose else {}
        return InferredLabels(counts=counts, info={"rose": rose})


def test_a_root_attack_of_a_new_family_runs_through_the_audit(tmp_path):
    cfg = api.compose(["fl=fedavg", "payload=update", "attack=none", "fl.rounds=1", "data.num_clients=4",
                       "fl.participants=2", "victim.num_images=1", f"results_dir={tmp_path}"])
    cfg.attack = OmegaConf.create({"_target_": f"{__name__}.HeadBiasLabels"})
    result = api.run(config=cfg, run_dir=tmp_path / "run")
    privacy = result.metrics["privacy"]
    # one image of one class (update_data=batch): the bias of its class rises, the others fall
    assert privacy["label_set_exact"] == 1.0 and privacy["label_counts_exact"] == 1.0
    assert privacy["label_count_error"] == 0.0 < privacy["label_count_error_chance"]
    assert privacy["num_true"] == 1 and sum(privacy["inferred_counts"].values()) == 1
    threat = json.loads((tmp_path / "run" / "threat_model.json").read_text())
    assert threat["payload_kind"] == "update" and threat["labels"] == "not given"
    assert "truth" not in json.dumps(threat)
