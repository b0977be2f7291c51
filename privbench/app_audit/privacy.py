"""The app's privacy mechanisms, found and measured: Flower's DP mods on its ClientApp, the DP wrappers around its
strategy, and the DP-SGD its clients' Opacus engines ran; each with what it claims and what privbench measures.

``LocalDpMod`` is measured as a black box: called on a probe with a change far under any clip (what comes out,
less that change, is its noise alone) and, with numpy's generator reseeded so the same noise is drawn again and
with a change far past any clip (its component along the change is the clip), so its noise multiplier is the
measured noise over the measured clip, whatever it was configured with. Epsilons are privbench's RDP accountant's
(``defenses.calibration.epsilon``) at the app's delta, composed over the rounds each client took part in.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from privbench.app_audit.simulation import AppRun
from privbench.figures.one_run import EPSILON_CLAIMED


def client_mods(app: Any) -> list[Any]:
    """The mods of a ClientApp: its own list and those wrapped around each registered function (in their closures)."""
    found, stack, seen = list(getattr(app, "_mods", [])), list(getattr(app, "_registered_funcs", {}).values()), set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            if callable(value) and getattr(value, "__module__", "").startswith("flwr.clientapp.mod"):
                found.append(value)
            if callable(value) and getattr(value, "__closure__", None):
                stack.append(value)
    unique = {id(m): m for m in found}
    return list(unique.values())


def probe_local_dp(mod: Any, received: dict[str, torch.Tensor], *, seed: int) -> tuple[float, float]:
    """The measured noise std and clip of a ``LocalDpMod`` (module docstring), on the shapes of ``received``.

    The two probes draw the same noise (numpy's global generator, which the mod draws from, reseeded before each),
    so their difference is the clipped change alone; a mod drawing elsewhere leaves the noise's component along the
    change in the clip's measure."""
    from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
    from flwr.app.message_type import MessageType

    base = {n: t.numpy().astype(np.float32) for n, t in received.items()}
    size = sum(a.size for a in base.values())
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(size)
    direction /= np.linalg.norm(direction)
    far = 1e3 * max(float(getattr(mod, "clipping_norm", 1.0)), 1.0)

    def through(change: np.ndarray) -> np.ndarray:
        chunks, start = {}, 0
        for n, a in base.items():
            chunks[n] = (a + change[start:start + a.size].reshape(a.shape)).astype(np.float32)
            start += a.size

        def inner(msg: Message, ctx: Context) -> Message:
            return Message(RecordDict({"arrays": ArrayRecord({n: Array(v) for n, v in chunks.items()})}), reply_to=msg)

        msg = Message(RecordDict({"arrays": ArrayRecord({n: Array(a) for n, a in base.items()})}), dst_node_id=1,
                      message_type=MessageType.TRAIN)
        out = mod(msg, Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}), inner)
        return np.concatenate([(out.content["arrays"][n].numpy().astype(np.float64) - a).ravel()
                               for n, a in base.items()])

    state = np.random.get_state()
    try:
        small = 1e-6 * float(getattr(mod, "clipping_norm", 1.0)) * direction  # under the clip (a zero change
        np.random.seed(seed)                                                   # divides by zero in Flower's clip)
        noise = through(small) - small
        np.random.seed(seed)
        clipped = float((through(far * direction) - noise) @ direction)
    finally:
        np.random.set_state(state)
    return float(noise.std()), clipped


def _epsilon(z: float, rounds: int, delta: float) -> float:
    from privbench.defenses.calibration import epsilon

    if z <= 0 or rounds < 1:
        return math.inf if rounds else 0.0
    return epsilon(z, [(1.0, rounds)], delta=delta)


def local_dp(run: AppRun, mod: Any, *, rounds: int, seed: int) -> dict[str, Any]:
    """A ``LocalDpMod``: its settings, its measured noise and clip, and claimed against measured epsilon."""
    received = next(m.arrays for m in run.messages if m.direction == "down" and m.arrays)
    std, clip = probe_local_dp(mod, received, seed=seed)
    z = std / clip if clip > 0 else 0.0
    delta = float(mod.delta)
    per_round, total = _epsilon(z, 1, delta), _epsilon(z, rounds, delta)
    problems: list[str] = []
    out: dict[str, Any] = {"mechanism": "LocalDpMod", "covers": "each client's whole update, before it leaves the node", "clip": float(mod.clipping_norm), "sensitivity": float(mod.sensitivity),
           EPSILON_CLAIMED.key: float(mod.epsilon), "delta": delta, "noise_std_measured": std, "clip_measured": clip,
           "noise_multiplier_measured": z, "epsilon_measured_per_round": per_round, "rounds": rounds,
           "epsilon_measured": total, "problems": problems}
    if not math.isclose(float(mod.sensitivity), float(mod.clipping_norm), rel_tol=1e-6):
        problems.append(
            f"LocalDpMod: noise scaled for sensitivity {mod.sensitivity:g} but updates clipped to {mod.clipping_norm:g}: "
            f"measured noise multiplier {z:.3g}, epsilon {per_round:.3g} per round and {total:.3g} over {rounds} "
            f"(RDP, delta {delta:g}) against the {mod.epsilon:g} it claims")
    if float(mod.epsilon) >= 1:
        problems.append(f"LocalDpMod: its noise formula sqrt(2 ln(1.25/delta))/epsilon holds only for epsilon "
                               f"< 1, and it was given {mod.epsilon:g}")
    if rounds > 1:
        problems.append(f"LocalDpMod: its epsilon is per round and composes nothing; over {rounds} rounds a "
                               f"client spends {total:.3g}")
    return out


def strategy_dp(strategy: Any, *, clients: int, rounds: int, delta: float) -> dict[str, Any] | None:
    """A DP wrapper around the app's strategy (Flower's fixed or adaptive clipping), or None for a plain strategy."""
    name = type(strategy).__name__
    if not name.startswith("DifferentialPrivacy"):
        return None
    z = float(getattr(strategy, "noise_multiplier", 0.0))
    sampled = int(getattr(strategy, "num_sampled_clients", clients))
    from privbench.defenses.calibration import epsilon

    q = min(1.0, sampled / max(clients, 1))
    eps = epsilon(z, [(q, rounds)], delta=delta) if z > 0 else math.inf
    where = "the server" if "ServerSide" in name else "each client (fixedclipping_mod), unnoised until the server adds"
    return {"mechanism": name, "covers": f"the models the server releases: {where} clips, the server adds the noise, "
                                         "so the server itself sees every update without it (the attacks on each "
                                         "upload are its view)", "inner_strategy": type(getattr(strategy, "strategy", None)).__name__,
            "noise_multiplier": z, "clip": float(getattr(strategy, "clipping_norm", getattr(strategy,
                                                 "initial_clipping_norm", math.nan))),
            "num_sampled_clients": sampled, "rounds": rounds, "delta": delta,
            "epsilon_measured": eps, "epsilon_sampling": f"Poisson rate {q:.3g} assumed", "problems": []}


def dp_sgd(run: AppRun, client: str, node: int, *, delta: float) -> dict[str, Any] | None:
    """The DP-SGD a client's Opacus engines ran over all its rounds, composed, against the epsilon it reported."""
    from privbench.defenses.calibration import epsilon

    notes = [d for n in run.notes if n["node"] == node and n["type"] == "train" for d in n["dp_sgd"]]
    if not notes:
        return None
    history = [(z, q, steps) for d in notes for z, q, steps in d["history"]]
    zs = {z for z, _, _ in history}
    total = (epsilon(zs.pop(), [(q, s) for _, q, s in history], delta=delta) if len(zs) == 1 else math.nan)
    reported = [float(v) for m in run.messages if m.direction == "up" and m.node == node
                for k, v in m.metrics.items() if "eps" in k.lower() and isinstance(v, (int, float))]
    out = {"mechanism": "Opacus DP-SGD", "client": client, "covers": "each record of the client, in everything it sends", "engines": len(notes),
           "noise_multiplier": sorted({z for z, _, _ in history}), "clip": sorted({d["max_grad_norm"] for d in notes
                                                                                   if d["max_grad_norm"] is not None}),
           "steps": sum(s for _, _, s in history), "delta": delta, EPSILON_CLAIMED.key: max(reported) if reported else None,
           "epsilon_measured": total, "problems": []}
    if reported and total > max(reported) * 1.01:
        out["problems"].append(f"{client}: reports epsilon {max(reported):.3g} but its {len(notes)} DP-SGD runs compose "
                               f"to {total:.3g} (RDP, delta {delta:g}): a fresh engine each round forgets the rounds "
                               "before")
    return out
