"""Canary clients in a Flower app (Andrew et al., "One-shot empirical privacy estimation for federated learning",
ICLR 2024), the client's side: the last ``count`` partitions of the app's SuperNodes run the app's own train function
and then, before the app's mods see the reply, its arrays are replaced by the model received plus ``norm`` along the
canary's own random direction, times its sign of the round. The app's mods (``LocalDpMod``, ``fixedclipping_mod``,
``secaggplus_mod``) then clip, noise or mask it as any client's update. The server's side writes the plan
(``CANARIES``) before the first train message leaves, and under adaptive clipping each round's clip (``CLIPS``)
before that round's train messages leave; nothing of it travels in a message.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from privbench.app_audit.recording import arrays_of, stated_round
from privbench.defenses.client_dp.canary_clients import CanaryClients

#: The plan's file in the audit's notes folder.
CANARIES = "canaries.json"
#: Under adaptive clipping: each round's clip (round -> clip), in the same folder.
CLIPS = "clips.json"


@dataclass(frozen=True)
class CanaryPlan:
    """``count`` canary clients among ``partitions`` (the last ``count`` partition ids), each sending an update of
    norm ``norm`` (the clip ``clip`` of the mechanism, ``central`` or ``local``, times the canaries' scale),
    directions drawn from ``seed``. ``adaptive``: the clip moves every round, and a round's norm is the scale times
    the clip of that round (``norm_at``)."""

    count: int
    partitions: int
    norm: float
    clip: float
    seed: int
    mechanism: str = "central"
    adaptive: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.norm) and self.norm > 0 and self.count >= 1):
            raise ValueError(f"privbench canaries: {self.count} canaries of norm {self.norm}: needs a positive count "
                             "and a positive finite norm (the mechanism's clip)")

    def index(self, partition: int) -> int | None:
        """The canary index of ``partition`` (0 for the first canary), or None for a client of the app's own."""
        first = self.partitions - self.count
        return partition - first if first <= partition < self.partitions else None

    def write(self, folder: Path) -> None:
        tmp = folder / f".{CANARIES}.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(folder / CANARIES)

    @classmethod
    def read(cls, folder: Path) -> CanaryPlan | None:
        path = folder / CANARIES
        return cls(**json.loads(path.read_text())) if path.exists() else None

    def norm_at(self, round_: int, folder: Path | None) -> float:
        """A canary's norm in round ``round_``: ``norm``, or under adaptive clipping the scale times the clip the
        server noted for that round (``CLIPS`` in ``folder``)."""
        if not self.adaptive:
            return self.norm
        path = folder / CLIPS if folder is not None else None
        clips = json.loads(path.read_text()) if path is not None and path.exists() else {}
        if str(round_) not in clips:
            raise ValueError(f"privbench canaries: no adaptive clip was noted for round {round_} before its train "
                             "messages left, so a canary's norm cannot follow it")
        return self.norm / self.clip * float(clips[str(round_)])


def canary_change(plan: CanaryPlan, index: int, round_: int, shapes: dict[str, torch.Size], *,
                  norm: float | None = None) -> dict[str, torch.Tensor]:
    """Canary ``index``'s update in round ``round_``: ``norm`` (default ``plan.norm``) along its direction, times its
    sign."""
    canaries = CanaryClients(plan.count, shapes=shapes, seed=plan.seed)
    u = canaries.directions(index, index + 1)[0]
    return canaries.state(canaries.sign(index, round_) * (plan.norm if norm is None else norm) * u)


def unwrapped(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[Any]]:
    """The function a ClientApp registered and the mods Flower wrapped around it (outermost first), read from the
    closures Flower's ``make_ffn`` builds."""
    mods = []
    while getattr(fn, "__name__", "") == "new_ffn" and getattr(fn, "__closure__", None):
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        if "_mod" not in cells or "_ffn" not in cells:
            break
        mods.append(cells["_mod"])
        fn = cells["_ffn"]
    return fn, mods


def planted(fn: Callable[..., Any], plan: CanaryPlan, index: int, notes: Path | None = None) -> Callable[..., Any]:
    """``fn`` (the app's train function), its reply's floating arrays replaced by the model received plus the
    canary's update and its other arrays by the model received (a canary trains nothing); every other part of the
    reply (metrics, its ``num-examples``) is the app's. ``notes``: the audit's folder (an adaptive clip's rounds)."""
    from flwr.app import Array, ArrayRecord

    def call(message: Any, context: Any) -> Any:
        reply = fn(message, context)
        every, _ = arrays_of(message, keep=True)
        received = {n: t for n, t in every.items() if t.is_floating_point()}
        round_ = stated_round(message)
        if round_ is None:
            raise ValueError("privbench canaries: the train message states no round (no server-round, no numeric "
                             "group id), so a canary's sign cannot be drawn")
        change = canary_change(plan, index, round_, {n: t.shape for n, t in received.items()},
                               norm=plan.norm_at(round_, notes))
        records = [(k, r) for k, r in reply.content.items() if isinstance(r, ArrayRecord)]
        several = len(records) > 1
        names = [f"{k}/{n}" if several else n for k, r in records for n in r]
        if not received or set(names) != set(every):
            raise ValueError(f"privbench canaries: the train reply's arrays ({', '.join(sorted(names)[:4])}) are not "
                             f"named as the model received ({', '.join(sorted(every)[:4])}), so a canary cannot "
                             "stand in for them")
        for key, record in records:
            for name in list(record):
                full = f"{key}/{name}" if several else name
                value = every[full]
                if full in received:
                    value = (value.double() + change[full].double()).to(value.dtype)
                record[name] = Array(value.numpy())
        return reply

    return call


def canary_call(app: Any, message: Any, context: Any, plan: CanaryPlan, index: int,
                notes: Path | None = None) -> Any:
    """Call ``app`` on ``message`` as canary ``index``: its train function for the message's type, planted, inside
    the same mods and the app's lifespan (the app itself is left as it is)."""
    from flwr.client.mod.utils import make_ffn

    kind = message.metadata.message_type
    full = kind if "." in kind else f"{kind}.default"
    original = app._call if getattr(app, "_call", None) is not None else app._registered_funcs.get(full)
    if original is None:
        return app(message, context)  # Flower's own error for an unregistered type
    fn, mods = unwrapped(original)
    with app._lifespan(context):
        try:
            return make_ffn(planted(fn, plan, index, notes), mods)(message, context)
        except Exception as exc:
            if str(exc).startswith("privbench canaries"):
                raise
            raise RuntimeError(f"privbench canaries: the app's mods failed on canary {index}'s update (twice the "
                               f"clip, always clipped): {type(exc).__name__}: {exc}") from exc
