"""One audit: validate the config, train the protocol, attack the chosen payload, score, write."""
from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from privbench.audit.agnostic import evaluate_agnostic
from privbench.audit.attack_phase import attack_victims
from privbench.audit.output import write_metrics
from privbench.audit.plan import Plan, plan, prepare
from privbench.audit.reference import fedavg_reference
from privbench.audit.resume import config_key, config_lock, finished, finished_runs, trained, training_key
from privbench.audit.sections import bytes_section, defense_section, run_section, utility
from privbench.audit.summary import summary
from privbench.data import FederatedData
from privbench.device import choose_threads, forward_macs
from privbench.errors import PrivbenchError
from privbench.fl.engine import Engine, Launcher
from privbench.fl.protocols import ProtocolResult
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.protocols.truth import client_truth
from privbench.fl.wire import Totals, Wire
from privbench.io import atomic_write_text, claim, release
from privbench.payloads import PayloadStore
from privbench.payloads.capture import AnyOf
from privbench.payloads.comm import comm_summary, ratios
from privbench.payloads.signing import results_key
from privbench.progress import OVERALL, log, phase, run_log


def _agnostic_phase(p: Plan, fl: ProtocolResult, model: nn.Module, data: FederatedData, wire: Wire,
                    out: Path, engine: Engine) -> tuple[dict[str, Any], Totals | None]:
    """Agnostic clients join a clustered protocol's result; the FedAvg reference runs first if asked for.

    Returns the agnostic evaluation (empty without agnostic clients) and the reference's bytes.
    """
    protocol = p.protocol
    if not isinstance(protocol, ClusteredProtocol) or not data.agnostic_clients:
        return {}, None
    reference, totals = None, None
    if protocol.agnostic.fedavg_reference:
        reference, totals = fedavg_reference(protocol, model=model, data=data, root=out / "payloads_fedavg_reference",
                                             seed=p.seed)
    with phase("agnostic fine-tuning", total=len(data.agnostic_clients), unit="client"):
        agnostic = evaluate_agnostic(fl, protocol=protocol, round_=protocol.rounds, model=model, data=data, wire=wire,
                                     seed=p.seed, reference=reference, engine=engine, victim=p.victim)
    wire.store.flush()
    return agnostic, totals


def _recorded(p: Plan, tkey: str, runs: list[tuple[Path, dict[str, Any]]]) -> tuple[Path, PayloadStore] | None:
    """A finished run with the same training whose store kept the payload this run attacks, if any."""
    if not p.attacking:
        return None
    source = trained(runs, tkey)
    if source is None:
        return None
    try:
        store = PayloadStore.open(source / "payloads")
        p.choice.select(store, p.victim)
    except (PrivbenchError, KeyError, FileNotFoundError):
        return None  # that run did not keep what this attack reads: train again
    return source, store


def agnostic_count(p: Plan, data: FederatedData) -> int:
    """Agnostic clients that join run ``p`` after training (those of a clustered protocol)."""
    return len(data.agnostic_clients) if isinstance(p.protocol, ClusteredProtocol) else 0


def run_audit(cfg: DictConfig, out: Path, *, launcher: Launcher | None = None, jobs: int = 1) -> dict[str, Any]:
    """Run the audit that ``cfg`` describes and write its files (``run.log`` included) under ``out``.

    With ``resume`` (default), a config that already finished is skipped, and a run whose
    training already finished under ``results_dir`` (same config but for payload, attack and
    metrics) attacks that run's recorded payloads instead of training again (``run.trained_in``).
    ``launcher`` brings up where the clients run instead of the config's ``engine`` (a Flower
    deployment's ServerApp passes its grid's). ``jobs`` audits run at once beside this one (a parallel
    sweep) share the cores for ``threads=auto``.
    """
    with ExitStack() as stack:
        try:
            return _run(cfg, out, stack, launcher, jobs)
        finally:
            OVERALL.close()


def _set_threads(p: Plan, model: nn.Module, data: FederatedData, jobs: int) -> None:
    """Give torch the threads ``threads=`` chooses for this run, and say so in the run log."""
    c, h, w = data.train.shape
    sample = torch.zeros(1, c, h, w, device=p.device)
    macs = forward_macs(model, sample) * p.protocol.sgd.batch_size
    threads = choose_threads(p.cfg.get("threads", "auto"), step_macs=macs, device=p.device, jobs=jobs)
    torch.set_num_threads(threads.count)
    log.info("threads: %s", threads)


def _run(cfg: DictConfig, out: Path, stack: ExitStack, launcher: Launcher | None, jobs: int) -> dict[str, Any]:
    start = time.perf_counter()
    p = plan(cfg)
    key, tkey = config_key(cfg), training_key(cfg)
    if cfg.get("resume", True):  # an identical run already going: wait for it, then reuse its result
        stack.enter_context(config_lock(Path(cfg.results_dir), key))
    runs = finished_runs(Path(cfg.results_dir)) if cfg.get("resume", True) else []
    done = finished(runs, key)
    if done is not None:
        print(f"skipped: the same config finished in {done} (resume=false reruns it)")
        return json.loads((done / "metrics.json").read_text())
    OVERALL.plan(_phases(p))
    data, model, policy = prepare(p)
    out = claim(out)  # a folder no other running audit holds
    stack.callback(release, out)
    stack.push(_refusal_recorder(out))
    stack.enter_context(run_log(out))
    stack.callback(torch.set_num_threads, torch.get_num_threads())  # the caller's count back after the run
    _set_threads(p, model, data, jobs)
    atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    recorded = _recorded(p, tkey, runs)
    if recorded is not None:
        return _attack_recorded(p, out, *recorded, model=model, data=data, keys=(key, tkey), start=start)
    extra = p.choice.capture(p.victim) if p.attacking else None
    results_key(Path(str(cfg.results_dir)))  # the results folder's store key: the nearest above every run's store
    wire = Wire.for_protocol(p.protocol, PayloadStore(out / "payloads"), AnyOf((policy, extra)) if extra else policy,
                             transform=p.transform,
                             truth_of=lambda payload: client_truth(payload, data, p.victim, seed=p.seed))

    def session(engine: Engine) -> tuple[ProtocolResult, dict[str, Any], Totals | None]:
        fl = p.protocol.run(model=model, data=data, victim=p.victim, wire=wire, seed=p.seed, engine=engine)
        return (fl, *_agnostic_phase(p, fl, model, data, wire, out, engine))

    fl, agnostic, reference_totals = (launcher or p.launcher).launch(
        session, config=OmegaConf.to_yaml(p.cfg, resolve=True), wire=wire, num_clients=data.num_clients,
        num_agnostic=agnostic_count(p, data))
    trained_at = time.perf_counter()
    privacy, threat, nbytes = attack_victims(p, wire.store, model, data, out) if p.attacking else ({}, {}, None)
    attacked = time.perf_counter()

    comm = comm_summary(wire.store.records())
    if reference_totals is not None:
        comm["fedavg_reference"] = reference_totals.as_dict()
        comm["vs_fedavg"] = ratios(comm["training"], comm["fedavg_reference"])
    atomic_write_text(out / "comm.json", json.dumps(comm, indent=2))
    metrics = {
        "run": {**run_section(p, key), "training_key": tkey},
        "privacy": privacy,
        "utility": utility(fl, agnostic, data),
        "bytes": bytes_section(comm, nbytes),
        "timing": {"train_s": trained_at - start, "attack_s": attacked - trained_at,
                   "total_s": time.perf_counter() - start},
        "threat_model": threat,
        "defense": defense_section(p),
    }
    return _finish(out, metrics)


def _attack_recorded(p: Plan, out: Path, source: Path, store: PayloadStore, *, model: nn.Module, data: FederatedData,
                     keys: tuple[str, str], start: float) -> dict[str, Any]:
    """Attack the payloads an earlier run of the same training recorded (``source``), reusing its utility, bytes and
    defence figures."""
    key, tkey = keys
    previous = json.loads((source / "metrics.json").read_text())
    trained_at = time.perf_counter()
    privacy, threat, payload_bytes = attack_victims(p, store, model, data, out)
    attacked = time.perf_counter()
    atomic_write_text(out / "comm.json", (source / "comm.json").read_text())
    run = {**run_section(p, key), "training_key": tkey, "trained_in": str(source)}
    metrics = {"run": run, "privacy": privacy, "utility": previous["utility"],
               "bytes": {**previous["bytes"], "payload_bytes": payload_bytes},
               "timing": {"train_s": 0.0, "attack_s": attacked - trained_at, "total_s": attacked - start},
               "threat_model": threat, "defense": previous["defense"]}
    log.info("attacked the payloads recorded by %s (same training; resume=false trains again)", source)
    return _finish(out, metrics)


def _refusal_recorder(out: Path) -> Any:
    """An exit callback that writes a refusal (a ``PrivbenchError`` once the run's folder holds its files) to
    ``out/error.txt`` as one line, so the folder says why it has no results."""

    def record(kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, PrivbenchError) and out.is_dir():
            atomic_write_text(out / "error.txt", f"privbench: error: {exc}\n")
        return False

    return record


def _phases(p: Plan) -> int:
    """Phases an audit plans: data, training, the FedAvg reference and agnostic clients (GENE-FL), and per
    audited client attack restarts (at most) and scoring."""
    protocol = p.protocol
    clustered = isinstance(protocol, ClusteredProtocol)
    reference = isinstance(protocol, ClusteredProtocol) and protocol.agnostic.fedavg_reference
    victims = len(p.victim.listed) if p.victim.clients != "all" else protocol.participants
    restarts = int(getattr(p.attack, "restarts", 1)) if p.attacking else 0
    return 2 + int(reference) + int(clustered) + victims * (restarts + int(p.attacking))


def _finish(out: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    OVERALL.complete()
    OVERALL.close()
    write_metrics(out, metrics)
    log.info("finished: %s", out)
    print(summary(metrics))
    print(f"results: {out}")
    return metrics
