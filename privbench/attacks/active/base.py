"""The active server's attack: craft the victim's download, read its reply."""
from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.isolation import Isolation, quiet
from privbench.attacks.active.views import ActiveView
from privbench.attacks.base import Attack
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.views import ViewKind
from privbench.figures import CRAFTED_UPLOADED, RECOVERED_FRACTION
from privbench.payloads.kinds import Carries


class ActiveAttack(Attack[ActiveView, Reconstruction]):
    """An active server's attack: it crafts the victim's download of the audited round (``craft``), the victim
    trains on it as usual, and the attack reads the reply (an ``ActiveView``, ``privbench.audit.games.active``).

    Subclasses name the layer the read needs (``crafted_layer``) and say what they changed (``describe``, for
    ``threat_model.json``). A reply that left that layer out (a learnGene) gives nothing: 0 recovered.
    """

    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "active"
    #: test-split images the server may use to set its crafted weights (public data).
    public: int = 1000
    #: how the server isolates the victim inside a secure aggregate (``attacks.active.isolation``; none by default).
    isolation: Isolation = Isolation()
    #: whether each crafted row fires for few inputs (trap weights): then an isolated read drops the rows whose
    #: change is within the secure sum's rounding (``attacks.active.isolation.within_noise``).
    sparse_rows: ClassVar[bool] = False
    #: whether ``member_downloads`` gives each member of a cohort its own download (``downloads=per_client``).
    per_member: ClassVar[bool] = False
    #: what ``quiet`` does to the crafted rows, as ``threat_model.json`` says it.
    quieted: ClassVar[str] = "its crafted rows zeroed"

    @abstractmethod
    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...],
              std: tuple[float, ...]) -> nn.Module:
        """The download the server sends instead of ``model``; ``public`` in model input space, normalised by
        ``mean`` and ``std`` (the run's public normalisation)."""

    @abstractmethod
    def crafted_layer(self, crafted: nn.Module) -> str:
        """The layer of ``crafted`` (as ``privbench.fl.layers`` names layers) whose reply the read needs."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What the server changed and the attack's budget, for ``threat_model.json``."""

    def designed_against(self) -> dict[str, str]:
        """What the crafted download assumes of the client's checks (``defenses.detector.inspect_download``): for
        each, whether it was built to pass it, and why (``threat_model.json``'s ``client_checks``)."""
        return {check: "not designed to pass" for check in CLIENT_CHECKS}

    def member_downloads(self, crafted: nn.Module, count: int) -> list[nn.Module] | None:
        """Each of a cohort's ``count`` members' own download, in cohort order (``isolation.downloads=per_client``);
        None: the isolation's crafted and quiet downloads."""
        return None

    def quiet(self, crafted: nn.Module) -> nn.Module:
        """The download every member but the victim gets under model inconsistency: ``crafted`` with its crafted
        rows zeroed (``attacks.active.isolation.quiet``); an attack may hush them otherwise."""
        return quiet(crafted, self.crafted_layer(crafted), self.crafted_rows(crafted))

    def crafted_rows(self, crafted: nn.Module) -> torch.Tensor:
        """The output units of ``crafted_layer`` the server crafted (all of them by default)."""
        weight = crafted.get_submodule(self.crafted_layer(crafted)).get_parameter("weight")
        return torch.arange(weight.shape[0])

    def withheld(self, view: Any) -> bool:
        """Whether the reply left the crafted layer out (GENE-FL kept it back)."""
        return not any(name.startswith(f"{view.crafted_layer}.") for name in view.observed)

    def kept_back(self, view: Any) -> bool:
        """Whether GENE-FL's layer choice kept the crafted layer home (the reply is a learnGene without it), or the
        cohort abandoned the round (``aggregation.agreed_download``: nothing was aggregated)."""
        return self.withheld(view) and (view.knowledge.get(CRAFTED_UPLOADED.key) is False
                                        or bool(view.knowledge.get("abandoned_by")))

    def evaluate(self, view: Any, truth: torch.Tensor) -> dict[str, Any]:
        """The victim's own check of the crafted download (reported beside the attack's figures); a reply without
        the crafted layer, or a round the cohort abandoned (``aggregation.agreed_download``), returns no image, and
        that is 0 recovered."""
        out = dict(getattr(view, "client_check", {}))
        if self.withheld(view) or view.knowledge.get("abandoned_by"):  # kept home, or the cohort abandoned the round
            out[RECOVERED_FRACTION.key] = 0.0
        return out

    def nothing(self, status: str) -> Reconstruction:
        """The finding of a read that gave no image (``status`` says why)."""
        return Reconstruction([{"objective": math.nan, "status": status, "iterations": 0, "evaluations": 0}],
                              label_source="none")


#: The client's checks of a download an active attack may be built to pass (``defenses.detector``): the three the
#: client ships (``inspect_download``) and the scores a cautious client adds (``download_scores``, past their honest
#: range).
CLIENT_CHECKS = ("architecture", "aligned_rows", "first_relu_firing", "cautious_scores")
