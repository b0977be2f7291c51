"""The client's local training as the attacker declares it: read from the app's train messages and run config where
they state it, from the audit's flags where they do not; each value's source is kept for ``threat_model.json``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privbench.errors import ConfigError
from privbench.payloads import LocalTraining

#: The keys apps use for each value, in the order they are looked up (Flower's examples use the first).
KEYS: dict[str, tuple[str, ...]] = {
    "lr": ("lr", "learning-rate", "learning_rate"),
    "epochs": ("local-epochs", "local_epochs", "epochs"),
    "batch_size": ("batch-size", "batch_size"),
    "momentum": ("momentum",),
}


#: What a client's train reply may carry: ``model`` (its trained model, as Flower's examples send), ``delta`` (the
#: change from the model it received), ``auto`` (a model, refused per upload where it does not look like one).
REPLY_KINDS = ("auto", "model", "delta")
#: ``auto``: a reply farther than this share of the sent model's norm from it, and smaller than it by as much, is
#: not read as a model (a delta or a gradient: near zero, far from the model).
NOT_A_MODEL = 0.5


def as_model(received: dict[str, Any], reply: dict[str, Any], kind: str) -> tuple[dict[str, Any], str | None]:
    """The model a train reply stands for (``reply`` itself, or ``received + reply`` for a delta), or ``({}, why)``
    where ``auto`` finds the reply is not a model near the one sent.

    Example:
        >>> import torch
        >>> sent = {"w": torch.ones(4)}
        >>> as_model(sent, {"w": torch.full((4,), 1.1)}, "auto")[1] is None
        True
        >>> as_model(sent, {"w": torch.full((4,), 0.01)}, "auto")[1][:33]
        'its reply is 0.99 of the sent mod'
        >>> as_model(sent, {"w": torch.full((4,), 0.01)}, "delta")[0]["w"]
        tensor([1.0100, 1.0100, 1.0100, 1.0100])
    """
    if kind == "delta":
        return {n: received[n] + t if n in received and t.is_floating_point() else t for n, t in reply.items()}, None
    if kind == "model":
        return dict(reply), None
    names = [n for n, t in reply.items() if n in received and t.is_floating_point() and t.shape == received[n].shape]
    norm = sum(float(received[n].double().norm()) ** 2 for n in names) ** 0.5
    away = sum(float((reply[n].double() - received[n].double()).norm()) ** 2 for n in names) ** 0.5
    size = sum(float(reply[n].double().norm()) ** 2 for n in names) ** 0.5
    if norm > 0 and away > NOT_A_MODEL * norm and size < NOT_A_MODEL * norm:
        return {}, (f"its reply is {away / norm:.2f} of the sent model's norm away from it and {size / norm:.2g} of "
                    "it in size: not a model trained from it (a delta or a gradient?); give --reply-kind delta if "
                    "it is the change from the model sent (gradients: python -m privbench.attack on the message)")
    return dict(reply), None


@dataclass(frozen=True)
class Declared:
    """The values the audit was given on its command line (None: read from the app)."""

    lr: float | None = None
    epochs: int | None = None
    batch_size: int | None = None
    momentum: float | None = None
    reply_kind: str = "auto"  # what a train reply carries: auto, model, delta (``REPLY_KINDS``)

    def check(self) -> None:
        if self.reply_kind not in REPLY_KINDS:
            raise ConfigError(f"--reply-kind {self.reply_kind}: must be one of {', '.join(REPLY_KINDS)}")
        for name, value in (("--lr", self.lr), ("--epochs", self.epochs), ("--batch-size", self.batch_size)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} {value}: must be a positive number")
        if self.momentum is not None and not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise ConfigError(f"--momentum {self.momentum}: must be in [0, 1)")


def _look_up(name: str, flags: Declared, config: dict[str, Any], run_config: dict[str, Any]) -> tuple[Any, str]:
    given = getattr(flags, name)
    if given is not None:
        return given, f"--{name.replace('_', '-')}"
    for where, table in (("the train message's config", config), ("the run config", run_config)):
        for key in KEYS[name]:
            value = table.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value, f"{where} '{key}'"
    return None, "not stated"


def local_training(flags: Declared, config: dict[str, Any], run_config: dict[str, Any], num_samples: int
                   ) -> tuple[LocalTraining | None, dict[str, str]]:
    """The declared training of one upload of ``num_samples`` records (the client's own count, read only for its
    own figures) and where each value came from; None when the learning rate or the batch size is not stated."""
    values, sources = {}, {}
    for name in KEYS:
        values[name], sources[name] = _look_up(name, flags, config, run_config)
    if values["lr"] is None or values["batch_size"] is None or num_samples < 1:
        return None, sources
    batch = min(int(values["batch_size"]), num_samples)
    epochs = int(values["epochs"] or 1)
    if values["epochs"] is None:
        sources["epochs"] = "not stated: 1 assumed"
    steps = epochs * math.ceil(num_samples / batch)
    return LocalTraining(lr=float(values["lr"]), steps=steps, batch_size=batch, num_samples=num_samples, epochs=epochs,
                         momentum=float(values["momentum"] or 0.0)), sources


def ask(sources: dict[str, str]) -> str:
    """The one line that says which values the app did not state and the flags that give them."""
    missing = [n for n in ("lr", "batch_size") if sources.get(n) == "not stated"]
    return ("the app states no " + " and no ".join(n.replace("_", " ") for n in missing) + " for its clients' training; "
            "give " + " and ".join(f"--{n.replace('_', '-')}" for n in missing))
