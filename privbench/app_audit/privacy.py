"""The app's privacy mechanisms, found and measured: Flower's DP mods on its ClientApp, the DP wrappers around its
strategy, and the DP-SGD its clients' Opacus engines ran; each with what it claims and what privbench measures.

``LocalDpMod`` is measured as a black box: called on a probe with a change far under any clip (what comes out,
less that change, is its noise alone) and, with numpy's generator reseeded so the same noise is drawn again and
with a change far past any clip (its component along the change is the clip), so its noise multiplier is the
measured noise over the measured clip, whatever it was configured with. Epsilons are privbench's RDP accountant's
(``defenses.calibration.epsilon``) at the audit's delta, composed over the rounds each client took part in, except
DP-SGD's: the accountant its Opacus engines used (PRV by default), at the delta it targeted.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import torch

from privbench.app_audit.adaptive_clipping import ClipTrajectory, as_run, stated_noise
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
            if callable(value) and getattr(value, "__module__", "").startswith(("flwr.clientapp.mod", "flwr.client.mod")):
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
    any_two = _epsilon(z / 2, rounds, delta)  # two updates clipped to C can differ by 2C
    problems: list[str] = []
    out: dict[str, Any] = {"mechanism": "LocalDpMod", "covers": "each client's whole update, before it leaves the node", "clip": float(mod.clipping_norm), "sensitivity": float(mod.sensitivity),
           EPSILON_CLAIMED.key: float(mod.epsilon), "delta": delta, "noise_std_measured": std, "clip_measured": clip,
           "noise_multiplier_measured": z, "epsilon_measured_per_round": per_round, "rounds": rounds,
           "epsilon_measured": total, "epsilon_measured_any_two_updates": any_two,
           "neighbouring": "a client's update present or absent (sensitivity C, as DP-FedAvg counts it); any two "
                           "updates (2C, local DP's strict sense) in epsilon_measured_any_two_updates",
           "problems": problems}
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


def strategy_dp(strategy: Any, *, sent: list[int], delta: float, secure: bool = False,
                clips: ClipTrajectory | None = None, rounds_sent: list[int] | None = None) -> dict[str, Any] | None:
    """A DP wrapper around the app's strategy (Flower's fixed or adaptive clipping), or None for a plain strategy.

    ``sent`` is the number of train messages of each round. The wrapper's noise is ``z C / num_sampled_clients`` on
    the mean of the updates it received; with fewer clients than it was told, one client moves that mean by
    ``C / received``, so its noise multiplier is ``z received / num_sampled_clients``. No amplification by sampling
    is counted (Flower samples a fixed number of clients; its own accountant refuses to count it either). ``secure``:
    the updates reach the server through secure aggregation (their sum only). An adaptive-clipping wrapper's
    epsilon is the one its rounds spent (``adaptive_clipping.as_run``: the clipped count and the clip each round
    was noised at) from ``clips``, the trajectory the audit noted, ``rounds_sent`` naming the rounds of ``sent``;
    its noise multiplier is the one it was given (its ``noise_multiplier`` attribute is the mean's share of it)."""
    from privbench.defenses.calibration import epsilon

    name = type(strategy).__name__
    if not name.startswith("DifferentialPrivacy"):
        return None
    z = float(getattr(strategy, "noise_multiplier", 0.0))
    declared = int(getattr(strategy, "num_sampled_clients", 0) or 0)
    rounds = len(sent)
    fewest = min(sent, default=declared)
    effective = z * fewest / declared if declared else z
    eps = epsilon(effective, [(1.0, rounds)], delta=delta) if effective > 0 and rounds else math.inf
    clips_by = ("the server clips each update" if "ServerSide" in name else
                "each client clips its update (fixedclipping_mod or adaptiveclipping_mod)")
    sees = ("under secure aggregation it sees only their sum, still without the noise" if secure else
            "so it sees every update without the noise (the attacks on each upload are its view)")
    problems = []
    adaptive = "AdaptiveClipping" in name
    if declared and fewest < declared and not adaptive:  # adaptive: as_run counts each round's clients
        problems.append(f"{name}: told {declared} clients a round but sent to {fewest}: its noise multiplier is "
                        f"{effective:.3g}, not {z:g}, and its epsilon over {rounds} rounds {eps:.3g}")
    row = {"mechanism": name, "covers": f"the models the server releases: {clips_by} and the server adds the noise; "
           f"{sees}", "inner_strategy": type(getattr(strategy, "strategy", None)).__name__, "noise_multiplier": z,
           "noise_multiplier_measured": effective,
           "clip": float(getattr(strategy, "clipping_norm", getattr(strategy, "initial_clipping_norm", math.nan))),
           "num_sampled_clients": declared, "clients_sent": sent, "rounds": rounds, "delta": delta,
           "epsilon_measured": eps, "epsilon_sampling": "none counted", "problems": problems}
    if adaptive:
        sigma_b = float(getattr(strategy, "clipped_count_stddev", 0.0) or 0.0)
        spent: dict[str, Any] = (as_run(clips, z_delta=z, sigma_b=sigma_b, declared=declared, delta=delta,
                                        received=dict(zip(rounds_sent or range(1, rounds + 1), sent)))
                                 if clips is not None and declared else {"epsilon_as_run": math.inf, "problems": [
                                     f"{name}: no clip was noted round by round, so what its rounds spent is not "
                                     "bounded here"]})
        problems += spent.pop("problems")
        row.update({**spent, "noise_multiplier": stated_noise(z, sigma_b), "epsilon_measured": spent["epsilon_as_run"],
                    "clip": clips.used(min(clips.clips)) if clips is not None and clips.clips else row["clip"]})
    return row


#: A metric that reports an epsilon: ``eps``, ``epsilon``, ``epsilon_spent``, ``eps-total`` (not ``steps``).
EPSILON_KEY = re.compile(r"^(eps|epsilon)([-_ ].*)?$", re.IGNORECASE)


def _composed(history: list[tuple[float, float, int]], mechanism: str, delta: float) -> float:
    """Epsilon at ``delta`` after ``history`` by Opacus's accountant ``mechanism`` (RDP where it cannot)."""
    import warnings

    from opacus.accountants import create_accountant

    merged: dict[tuple[float, float], int] = {}
    for z, q, n in history:
        merged[(z, q)] = merged.get((z, q), 0) + n
    entries = [(z, q, n) for (z, q), n in merged.items()]
    # Opacus's GDP accountant reads only its last entry: with several, RDP composes them
    first = mechanism if not (mechanism == "gdp" and len(entries) > 1) else "rdp"
    for name in dict.fromkeys((first, "rdp")):
        try:
            acc = create_accountant(mechanism=name)
            acc.history = entries
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return float(acc.get_epsilon(delta=delta))
        except (MemoryError, ValueError, OverflowError):
            continue
    return math.inf


def dp_sgd(run: AppRun, client: str, node: int, *, delta: float) -> dict[str, Any] | None:
    """The DP-SGD a client's Opacus engines ran over all its rounds, composed by the accountant its engines used, at
    the delta it targeted (else ``delta``), against the largest epsilon it reported."""
    notes = [d for n in run.notes if n["node"] == node and n["type"] == "train" for d in n["dp_sgd"]]
    if not notes:
        return None
    history = [(float(z), float(q), int(steps)) for d in notes for z, q, steps in d["history"]]
    mechanism = str(notes[-1].get("accountant") or "rdp")
    targeted = {float(d["target_delta"]) for d in notes if d.get("target_delta")}
    delta = targeted.pop() if len(targeted) == 1 else delta
    total = _composed(history, mechanism, delta)
    reported = [float(v) for m in run.messages if m.direction == "up" and m.node == node
                for k, v in {**m.metrics, **m.config}.items() if EPSILON_KEY.match(k) and isinstance(v, (int, float))
                and not isinstance(v, bool)]
    problems: list[str] = []
    out = {"mechanism": "Opacus DP-SGD", "client": client, "covers": "each record of the client, in everything it sends",
           "engines": len(notes), "accountant": mechanism, "noise_multiplier": sorted({z for z, _, _ in history}),
           "clip": sorted({d["max_grad_norm"] for d in notes if d.get("max_grad_norm") is not None}),
           "steps": sum(s for _, _, s in history), "delta": delta,
           EPSILON_CLAIMED.key: max(reported) if reported else None, "epsilon_measured": total, "problems": problems}
    if reported and total > max(reported) * 1.01:
        problems.append(f"{client}: reports epsilon {max(reported):.3g} but its DP-SGD over {len(notes)} rounds composes "
                        f"to {total:.3g} ({mechanism.upper()}, its engines' accountant, delta {delta:g}): each "
                        "report counts only its own round")
    return out
