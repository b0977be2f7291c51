"""The audit's side of each ClientApp: the app's ClientApp runs as it is, inside a wrapper that notes which records
its data loaders yielded (the evaluator's truth: what it trained and evaluated on) and the DP-SGD its Opacus engines
ran. None of it goes into the reply: the reply is the app's, byte for byte; the notes go to a folder only the
evaluator reads."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader

#: Most records noted per message and kind (trained, evaluated), as float32; a client's share of these apps fits.
MAX_RECORDS = 4096


def batch_records(batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The inputs and integer labels of one batch as a data loader yields it (a tuple, a list or a dict), or None
    when it has no floating input of at least two dimensions with one integer label per row."""
    values = list(batch.values()) if isinstance(batch, dict) else list(batch) if isinstance(batch, (list, tuple)) else []
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    inputs = next((t for t in tensors if t.is_floating_point() and t.ndim >= 2), None)
    if inputs is None:
        return None
    labels = next((t for t in tensors if not t.is_floating_point() and t.ndim == 1 and len(t) == len(inputs)), None)
    return (inputs, labels) if labels is not None else None


@dataclass
class Noted:
    """The records a call's loaders yielded: those yielded with gradients on (``trained``: fed to a training step)
    and those yielded under ``torch.no_grad`` (``evaluated``), each capped at ``MAX_RECORDS`` (``full``: whether
    the cap was reached)."""

    trained: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    evaluated: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    full: bool = False

    def add(self, pair: tuple[torch.Tensor, torch.Tensor]) -> None:
        into = self.trained if torch.is_grad_enabled() else self.evaluated
        if sum(len(y) for _, y in into) + len(pair[1]) > MAX_RECORDS:
            self.full = True
            return
        into.append((pair[0].detach().cpu().clone().float(), pair[1].detach().cpu().clone().long()))

    @staticmethod
    def joined(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not pairs:
            return torch.empty(0), torch.empty(0, dtype=torch.long)
        return torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs])


@contextlib.contextmanager
def noting_loaders() -> Iterator[Noted]:
    """Within the block, every batch any ``DataLoader`` yields is noted (inputs and labels, detached copies), as
    trained or evaluated by whether gradients are on where the app asks for it (a validation pass inside a train
    call runs under ``torch.no_grad``)."""
    seen = Noted()
    original = DataLoader.__iter__

    def __iter__(self: DataLoader) -> Iterator[Any]:  # noqa: N807 (the method it stands in for)
        for batch in original(self):
            pair = batch_records(batch)
            if pair is not None:
                seen.add(pair)
            yield batch

    DataLoader.__iter__ = __iter__  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        DataLoader.__iter__ = original  # type: ignore[method-assign]


#: Every Opacus engine this process has made (an app may keep one across rounds), with what it was given.
ENGINES: list[tuple[Any, dict[str, Any]]] = []


@contextlib.contextmanager
def noting_dp_sgd() -> Iterator[list[dict[str, Any]]]:
    """Within the block, every step an Opacus accountant takes is counted (noise multiplier, sample rate), by
    accountant; each ``PrivacyEngine.make_private*`` call is noted with the clip and targets it was given (the
    outermost call: ``make_private_with_epsilon`` calls ``make_private``). Counting steps, not reading histories, a
    history an app restores into a fresh engine is not counted twice."""
    notes: list[dict[str, Any]] = []
    if sys.modules.get("opacus") is None and importlib.util.find_spec("opacus") is not None:
        importlib.import_module("opacus")  # an app may import it inside its train function
    opacus = sys.modules.get("opacus")
    if opacus is None:
        yield notes
        return
    from opacus import accountants

    engine_cls = opacus.PrivacyEngine
    made = {name: getattr(engine_cls, name) for name in ("make_private", "make_private_with_epsilon")}
    stepped = {cls: cls.step for cls in (accountants.RDPAccountant, accountants.PRVAccountant,
                                         accountants.GaussianAccountant)}
    steps: Counter[tuple[int, str, float, float]] = Counter()
    depth = [0]

    def wrap(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if depth[0] == 0:
                if all(e is not self for e, _ in ENGINES):
                    ENGINES.append((self, {}))
                given = next(g for e, g in ENGINES if e is self)
                given.update({"call": name, "max_grad_norm": kwargs.get("max_grad_norm"),
                              "target_epsilon": kwargs.get("target_epsilon"),
                              "target_delta": kwargs.get("target_delta")})
            depth[0] += 1
            try:
                return made[name](self, *args, **kwargs)
            finally:
                depth[0] -= 1
        return call

    def counting(cls: type) -> Any:
        def step(self: Any, *, noise_multiplier: float, sample_rate: float) -> Any:
            steps[(id(self), self.mechanism(), float(noise_multiplier), float(sample_rate))] += 1
            return stepped[cls](self, noise_multiplier=noise_multiplier, sample_rate=sample_rate)
        return step

    for name in made:
        setattr(engine_cls, name, wrap(name))
    for cls in stepped:
        cls.step = counting(cls)
    try:
        yield notes
    finally:
        for name, fn in made.items():
            setattr(engine_cls, name, fn)
        for cls, fn in stepped.items():
            cls.step = fn
        for key in dict.fromkeys((k[0], k[1]) for k in steps):
            given = next((g for e, g in ENGINES if id(e.accountant) == key[0]), {})
            notes.append({**given, "accountant": key[1], "history": [(z, q, n) for (a, _, z, q), n in steps.items()
                                                                     if a == key[0]]})


class AuditedClientApp(ClientApp):
    """The app's ClientApp, called as it is; what its loaders yielded and its DP-SGD did are written to ``notes``
    (one file per message, written whole or not at all). A canary client's train call (``canary_client``) runs the
    app's train function planted."""

    def __init__(self, app: ClientApp, notes: str, *, seed: int = 0) -> None:
        super().__init__()
        self.app, self.notes, self.seed = app, notes, seed
        self.plan: Any = None  # the canary plan, once the server has written it

    def seed_numpy(self, message: Message, context: Context) -> None:
        """With canary clients planned: seed numpy's global generator for this call from the audit's seed, the
        client's partition, the round and the message type (a ``LocalDpMod`` draws its noise there, so the canaries'
        figures repeat; an app that seeds it itself still does). A call that states no round is left alone."""
        from privbench.app_audit.recording import stated_round

        round_ = stated_round(message)
        if round_ is None:
            return
        kind = {"train": 0, "evaluate": 1, "query": 2}.get(message.metadata.message_type.split(".")[0], 3)
        partition = int(context.node_config.get("partition-id", -1)) + 1
        np.random.seed(np.random.SeedSequence([self.seed, partition, round_, kind]).generate_state(1)[0])

    def __call__(self, message: Message, context: Context) -> Message:
        from privbench.app_audit.canary_client import CanaryPlan, canary_call
        from privbench.app_audit.record_canary_client import Planted, RecordPlan, planting
        from privbench.app_audit.recording import stated_round

        self.plan = plan = self.plan or CanaryPlan.read(Path(self.notes))
        if plan is not None:
            self.seed_numpy(message, context)
        train = message.metadata.message_type.startswith("train")
        plan = plan if train else None
        partition = int(context.node_config.get("partition-id", -1))
        canary = plan.index(partition) if plan is not None else None
        records = RecordPlan.read(Path(self.notes)) if train else None
        round_ = stated_round(message)
        hosting = records is not None and records.host == partition
        unplanted = Planted(round=-1, problem="a train message states no round (no server-round, no numeric group "
                                              "id), so a canary's sign cannot be drawn") if hosting else None
        with noting_loaders() as seen, noting_dp_sgd() as dp_sgd, \
                (planting(records, round_) if hosting and records and round_ is not None
                 else contextlib.nullcontext(unplanted)) as planted:
            if plan is not None and canary is not None:
                reply = canary_call(self.app, message, context, plan, canary, Path(self.notes))
            else:
                reply = self.app(message, context)
        inputs, labels = seen.joined(seen.trained)
        held_inputs, held_labels = seen.joined(seen.evaluated)
        note = {"node": int(context.node_id), "partition": int(context.node_config.get("partition-id", -1)),
                "type": message.metadata.message_type.split(".")[0], "group": message.metadata.group_id,
                "message_id": message.metadata.message_id, "inputs": inputs, "labels": labels,
                "held_inputs": held_inputs, "held_labels": held_labels, "capped": seen.full,
                "batches": [len(y) for _, y in seen.trained], "dp_sgd": dp_sgd, "canary": canary,
                "record_canaries": planted.as_dict() if planted is not None else None}
        folder = Path(self.notes)
        name = f"{note['node']}-{note['type']}-{note['group'] or 'x'}-{uuid.uuid4().hex[:12]}"
        tmp = folder / f".{name}.tmp"
        torch.save(note, tmp)
        tmp.replace(folder / f"{name}.pt")
        return reply
