"""docs/extending.md's recipes, followed alone: a root ``Attack`` on an existing view and finding, and a whole new
family (view, finding, attack, game and scorer, all defined in this module) run through a real audit with no
edit outside this file.

The attacks here are toys; the point is the contract: a view in, a finding out, staged by the game registered for
the view kind and scored by the scorer registered for the finding type.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
import torch
from omegaconf import OmegaConf

from privbench import api
from privbench.attacks.base import Attack
from privbench.attacks.findings import Finding
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.views import ModelView, ViewKind
from privbench.audit.games import Game, Play, register_game, register_summary
from privbench.audit.score import register_scorer
from privbench.audit.summary import summary
from privbench.errors import ConfigError
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


# A whole new family, defined here alone: which round an upload was sent in.


@dataclass
class RoundView:
    """What the attacker is given: the upload's tensors, and the round numbers it could have come from."""

    tensors: dict[str, torch.Tensor]
    rounds: list[int]
    knowledge: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuessedRound(Finding):
    round: int = -1


class LargestRound(Attack):
    """Guesses the last round it was told about (a deliberately naive member of the family)."""

    name = "largest_round"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "round_of_upload"

    def attack(self, view: RoundView, *, seed: int) -> GuessedRound:
        return GuessedRound(round=max(view.rounds))


@register_game("round_of_upload")
class RoundOfUpload(Game):
    def check(self, p: Any, data: Any, model: Any, policy: Any) -> None:
        if p.protocol.rounds < 2:
            raise ConfigError("round_of_upload needs fl.rounds >= 2")

    def stage(self, p: Any, store: Any, model: Any, data: Any, clients: list[int]) -> list[Play]:
        payload, _ = p.choice.select(store, p.victim.alone(clients[0]))
        view = RoundView(dict(payload.tensors), list(range(p.protocol.rounds)), {"payload": payload.id})
        return [Play(payload, view, p.choice.truth(store, payload), {"owners": torch.tensor([payload.round])})]


@register_scorer(GuessedRound)
def _score_round(finding: GuessedRound, view: Any, attack: Any, truth: Any, how: Any) -> dict[str, Any]:
    return {"round_guess_right": float(finding.round == int(truth.owners[0])), "round_guess_chance": 1 / len(view.rounds)}


@register_summary(50)
def _round_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    if "round_guess_right" not in privacy:
        return []
    return [("round", f"guessed right {privacy['round_guess_right']:.0f} (chance {privacy['round_guess_chance']:.2f})")]


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_new_family_with_its_own_view_game_and_scorer_runs_through_a_real_audit(tmp_path):
    base = ["fl=fedavg", "payload=update", "attack=none", "data.num_clients=4", "fl.participants=2",
            "victim.num_images=1", f"results_dir={tmp_path}"]
    for rounds, victim_round, right in ((2, 1, 1.0), (2, 0, 0.0)):
        cfg = api.compose([*base, f"fl.rounds={rounds}", f"victim.round={victim_round}"])
        cfg.attack = OmegaConf.create({"_target_": f"{__name__}.LargestRound"})
        metrics = api.run(config=cfg, run_dir=tmp_path / f"r{victim_round}").metrics
        privacy = metrics["privacy"]
        assert privacy["round_guess_right"] == right and privacy["round_guess_chance"] == 0.5
        assert f"round    guessed right {right:.0f} (chance 0.50)" in summary(metrics)  # its own summary lines
        threat = json.loads((tmp_path / f"r{victim_round}" / "threat_model.json").read_text())
        assert threat["server"] == "honest-but-curious" and threat["payload"]  # the view's knowledge, recorded
    cfg = api.compose([*base, "fl.rounds=1"])
    cfg.attack = OmegaConf.create({"_target_": f"{__name__}.LargestRound"})
    with pytest.raises(ConfigError, match="round_of_upload needs fl.rounds >= 2"):  # the game's check, before training
        api.run(config=cfg, run_dir=tmp_path / "refused")
    assert not (tmp_path / "refused" / "metrics.json").exists()
