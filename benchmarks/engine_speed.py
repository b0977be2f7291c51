"""Federated training on privbench's in-process engine against Flower's simulation engine (same run, same messages).

Builds the default audit's protocol (GENE-FL, 10 known clients, 10 rounds of 5) and times
its training (``protocol.run`` on the plan's engine launcher: subspaces, rounds, every
message recorded) once per ``fl.engine``. For Flower it also gives the start-up (Ray, the simulated SuperNodes of
the 10 known and 2 agnostic clients, one query per node) and the time per round after it,
and the messages that crossed the grid. The FedAvg reference and the agnostic clients'
fine-tuning are not part of it. Figures depend on
the machine; run it alone.

Example:
    python benchmarks/engine_speed.py --rounds 10
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

import privbench
from privbench.audit.plan import plan, prepare
from privbench.audit.run import agnostic_count
from privbench.fl.wire import Wire
from privbench.payloads import PayloadStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="fl.rounds")
    parser.add_argument("overrides", nargs="*", help="more privbench overrides")
    args = parser.parse_args()

    import privbench.flower.launch as flower_launch
    from privbench.flower.engine import FlowerEngine

    ready: dict[str, object] = {}

    class TimedEngine(FlowerEngine):
        """Notes when every SuperNode has answered its query (the end of the start-up)."""

        def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, **k)
            ready["at"], ready["engine"] = time.perf_counter(), self

    flower_launch.FlowerEngine = TimedEngine  # type: ignore[misc]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads here, Flower ClientApps on 1 thread each; "
          f"GENE-FL training, {args.rounds} rounds, {' '.join(args.overrides) or 'default config'}")
    print(f"{'engine':>10} {'train s':>8} {'start-up s':>11} {'per round s':>12} {'messages':>9} "
          f"{'up B':>10} {'down B':>10} {'accuracy':>9}")
    for engine in ("inprocess", "flower"):
        cfg = privbench.compose(["attack=none", f"fl.rounds={args.rounds}", f"engine={engine}", *args.overrides])
        p = plan(cfg)
        data, model, policy = prepare(p)
        with tempfile.TemporaryDirectory() as tmp:
            wire = Wire.for_protocol(p.protocol, PayloadStore(Path(tmp)), policy)
            start = time.perf_counter()
            result = p.launcher.launch(lambda engine: p.protocol.run(
                model=model, data=data, victim=p.victim, wire=wire, seed=p.seed, engine=engine),
                config=OmegaConf.to_yaml(p.cfg, resolve=True), wire=wire, num_clients=data.num_clients,
                num_agnostic=agnostic_count(p, data))
            seconds = time.perf_counter() - start
        totals = wire.totals()
        if engine == "flower":
            startup = float(ready["at"]) - start  # type: ignore[arg-type]
            per_round, messages = (seconds - startup) / args.rounds, str(ready["engine"].grid.messages)  # type: ignore[attr-defined]
        else:
            startup, per_round, messages = 0.0, seconds / args.rounds, "-"
        print(f"{engine:>10} {seconds:>8.1f} {startup:>11.1f} {per_round:>12.2f} {messages:>9} "
              f"{totals.uplink_bytes:>10,} {totals.downlink_bytes:>10,} {result.accuracy:>9.3f}", flush=True)


if __name__ == "__main__":
    main()
