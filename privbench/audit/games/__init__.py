"""The evaluator's side of each attack family, one game per module, registered by the view kinds it stages.

A ``Game`` checks before training what its family needs (``check``) and stages the play after it (``stage``):
which messages are attacked, the attacker's view of each and the evaluator's answer. Its module also registers
the scorer of its finding type (``privbench.audit.score.register_scorer``) and its lines of the printed summary
(``register_summary``). The audit core names no family: it
asks ``game_for(attack.view)``, and the modules of this package are found on first use (``discover``), so a new
family adds a module here, or registers its game from anywhere before the audit runs.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from torch import nn

from privbench.data import FederatedData
from privbench.errors import ConfigError
from privbench.payloads import Payload, PayloadStore


@dataclass
class Play:
    """One victim's play: the attacked message, the attacker's view of it, the train images it was computed from
    (the evaluator's truth) and any other answer the evaluator holds (``Truth`` fields by name)."""

    payload: Payload
    view: Any
    records: list[int]
    answer: dict[str, Any] = field(default_factory=dict)


class Game:
    """The evaluator's side of a family. ``p`` is the audit's ``Plan``; the one-message games (gradient, model,
    basis, labels) read only its ``cfg``, ``attack``, ``choice``, ``victim`` and ``seed``, which a file attack's
    setting gives too (``privbench.file_game``)."""

    #: whether its figures stay honest when the victim holds another domain's photographs (``victim.photos``): the
    #: message games rebuild or count the victim's own images; a membership, source or canary game would set them
    #: against the other clients' records, a test of the domain.
    photographs: ClassVar[bool] = False

    def check(self, p: Any, data: FederatedData, model: nn.Module, policy: Any) -> None:
        """Refuse (``ConfigError``, one line) settings this game cannot stage, before training (none by default)."""

    def stage(self, p: Any, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        """One play per audited client (``clients``, the headline victim first), or one for the whole run."""
        raise NotImplementedError(f"{type(self).__name__} stages no play")

    def play(self, p: Any, victim: Any, payload: Payload, base: Payload | None, records: list[int],
             model: nn.Module, data: FederatedData) -> Play:
        """The play of one message alone (``payload`` and the download ``base`` it started from): what a file
        attack plays. Games that rerun a round or read a whole run have none."""
        raise ConfigError(f"the {type(self).__name__.lower()} game reads a whole run, not one message: audit a run "
                          "with python -m privbench instead")


class MessageGame(Game):
    """A game whose every play is one message's: each audited client's message, played alone (``play``)."""

    def stage(self, p: Any, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        return [self.play(p, p.victim.alone(c), payload, base, records, model, data)
                for c, (payload, base, records) in zip(clients, messages(p, store, clients))]


def messages(p: Any, store: PayloadStore, clients: list[int]) -> Iterator[tuple[Payload, Payload | None, list[int]]]:
    """Each audited client's attacked message as the run's payload choice selects it, the download it started from
    (None for a message with no base) and the train images it was computed from (the evaluator's truth)."""
    for c in clients:
        payload, base = p.choice.select(store, p.victim.alone(c))
        yield payload, base, p.choice.truth(store, payload)


G = TypeVar("G", bound=type[Game])
_GAMES: dict[str, Game] = {}


def register_game(*kinds: str) -> Callable[[G], G]:
    """Class decorator: an instance of the game stages the views ``kinds`` (``Attack.view``)."""
    def add(cls: G) -> G:
        for kind in kinds:
            if kind in _GAMES and type(_GAMES[kind]) is not cls:
                raise ValueError(f"view {kind!r} already has a game ({type(_GAMES[kind]).__name__})")
            _GAMES[kind] = cls()
        return cls
    return add


#: A family's lines of the printed summary: (label, text) pairs from a run's ``privacy`` and ``threat_model``.
SummaryLines = Callable[[dict[str, Any], dict[str, Any]], list[tuple[str, str]]]
_SUMMARIES: list[tuple[int, SummaryLines]] = []
S = TypeVar("S", bound=SummaryLines)


def register_summary(order: int) -> Callable[[S], S]:
    """Decorator: a family's summary lines, printed after the run's and the server's in ``order`` (reconstruction 10,
    membership 20, source 25, one-run 30, class sets 40, label counts 45)."""
    def add(fn: S) -> S:
        if fn not in (f for _, f in _SUMMARIES):
            _SUMMARIES.append((order, fn))
        return fn
    return add


def summary_sections() -> list[SummaryLines]:
    """Every family's summary lines, in order (the game modules found first)."""
    discover()
    return [fn for _, fn in sorted(_SUMMARIES, key=lambda entry: entry[0])]


def discover() -> None:
    """Import every game module of this package (each registers its game and scorers)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def game_for(kind: str) -> Game:
    """The game that stages view ``kind``."""
    if kind not in _GAMES:
        discover()
    if kind not in _GAMES:
        raise ConfigError(f"no game stages the view {kind!r} (privbench.audit.games.register_game); the views with "
                          f"one: {', '.join(sorted(_GAMES))}")
    return _GAMES[kind]
