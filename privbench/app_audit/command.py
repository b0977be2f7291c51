"""``privbench audit-app PATH``: the command line (also ``python -m privbench.app_audit``)."""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

from privbench.errors import ConfigError, PrivbenchError

PROG = "privbench audit-app"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run a Flower app unmodified in simulation with privbench's "
                                "recording, attack every upload, measure its privacy mods, and gate on the result.",
                                epilog="example: privbench audit-app examples/quickstart-pytorch --fail-on "
                                       "'membership_auc>0.6' --fail-on misconfigured  (docs/audit-app.md)")
    p.add_argument("path", type=Path, help="the app's folder (or its pyproject.toml)")
    p.add_argument("--out", type=Path, default=Path("results/audit-app"), help="results go into a new folder under it")
    p.add_argument("--seed", type=int, default=0, help="the audit's seed (sampling of candidates, probes)")
    p.add_argument("--supernodes", type=int, help="SuperNodes (default: the app's federation's, else 2)")
    p.add_argument("--engine", choices=("auto", "simulation", "deployment"), default="auto",
                   help="Flower's simulation, or a loopback deployment on this machine (Flower's own SuperLink and "
                        "SuperNode processes); auto: a deployment where the app's default federation names one")
    p.add_argument("--run-config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the app's [tool.flwr.app.config] (TOML value), as flwr run --run-config")
    p.add_argument("--model", help="the app's model class, module:Class (default: found by the tensors it carries)")
    p.add_argument("--lr", type=float, help="the clients' learning rate, where the app does not state it")
    p.add_argument("--epochs", type=int, help="the clients' local epochs, where the app does not state it")
    p.add_argument("--batch-size", type=int, help="the clients' batch size, where the app does not state it")
    p.add_argument("--momentum", type=float, help="the clients' SGD momentum, where the app does not state it")
    p.add_argument("--reply-kind", choices=("auto", "model", "delta"), default="auto",
                   help="what a client's train reply carries: its trained model, or the change from the model it "
                        "received (auto: a model, checked against the model sent)")
    p.add_argument("--reply-timeout", type=float, default=300.0, help="seconds to wait for a batch of replies "
                   "before the audit says which ClientApp did not answer (default 300)")
    p.add_argument("--max-images", type=int, default=8, help="invert uploads of clients that trained on at most this "
                   "many records (the inversion rebuilds all of them; default 8)")
    p.add_argument("--inversion-steps", type=int, default=1600, help="signed-Adam steps of the FedAvg-aware "
                   "inversion (default 1600, its config's)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta of every epsilon the audit computes")
    p.add_argument("--canaries", type=int, default=0, metavar="K", help="make the last K of the app's SuperNodes "
                   "canary clients (each sends an update of twice the clip along a direction of its own, through the "
                   "app's mods) and measure the app's client-level DP mechanism's epsilon from them (default 0: none)")
    p.add_argument("--record-canaries", type=int, default=0, metavar="K", help="plant K (100 or more) canary "
                   "records in the Opacus DP-SGD of the app's first SuperNode (partition 0): each step, the "
                   "gradient of each record that joins (at the accountant's rate) is twice the clip along a direction "
                   "of its own; measure a record's empirical epsilon from the uploads (default 0: none; its uploads "
                   "are then not attacked)")
    p.add_argument("--fail-on", action="append", default=[], metavar="RULE",
                   help="epsilon-above-claim, misconfigured, or FIGURE>VALUE (membership_auc, "
                        "membership_tpr_at_1pct_fpr, label_set_exact, label_count_error_gain, psnr_gain, "
                        "epsilon_measured, epsilon_empirical_lower, ...): exit 1 if it holds")
    p.add_argument("--junit", type=Path, help="also write the gate's JUnit XML here")
    return p


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--run-config {pair!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value
    return out


def options(args: argparse.Namespace) -> tuple[Any, Any]:
    """The app and the audit's options, every flag checked before anything runs."""
    from privbench.app_audit.app import read_app
    from privbench.app_audit.audit import Options
    from privbench.app_audit.gate import Rule
    from privbench.app_audit.training import Declared

    if not (math.isfinite(args.reply_timeout) and args.reply_timeout > 0):
        raise ConfigError(f"--reply-timeout {args.reply_timeout}: must be a number of seconds > 0")
    for flag, value in (("--max-images", args.max_images), ("--inversion-steps", args.inversion_steps)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    if not (math.isfinite(args.delta) and 0 < args.delta < 1):
        raise ConfigError(f"--delta {args.delta}: must be in (0, 1)")
    rules = [Rule.parse(r) for r in args.fail_on]
    declared = Declared(args.lr, args.epochs, args.batch_size, args.momentum, args.reply_kind)
    declared.check()
    app = read_app(args.path, overrides=_overrides(args.run_config), supernodes=args.supernodes, engine=args.engine)
    if args.canaries and not 2 <= args.canaries < app.supernodes:
        raise ConfigError(f"--canaries {args.canaries}: needs at least 2 canary clients and at least one of the app's "
                          f"own among its {app.supernodes} SuperNodes (--supernodes N raises them)")
    if args.record_canaries and not 100 <= args.record_canaries <= 100_000:
        raise ConfigError(f"--record-canaries {args.record_canaries}: must be 100 to 100000 canary records (the "
                          "bootstrap over fewer raises false alarms)")
    if args.record_canaries and importlib.util.find_spec("opacus") is None:
        raise ConfigError("--record-canaries: Opacus is not installed here; the canary records ride in its DP-SGD")
    given = sys.argv[2:] if sys.argv[1:2] == ["audit-app"] else sys.argv[1:]
    command = " ".join([PROG, *(shlex.quote(a) for a in given)])
    return app, Options(seed=args.seed, model=args.model, declared=declared, delta=args.delta, rules=rules,
                        command=command, reply_timeout=args.reply_timeout, max_images=args.max_images,
                        inversion_steps=args.inversion_steps, canaries=args.canaries,
                        record_canaries=args.record_canaries)


def main(argv: list[str] | None = None) -> int:
    """Run the audit; 0 when the gate passes, 1 when a rule fails, 2 on bad input or a failed app."""
    from privbench.app_audit.audit import audit
    from privbench.io import new_run_folder

    args = parser().parse_args(argv)
    try:
        app, o = options(args)
        out = new_run_folder(args.out)
        out.rmdir()  # the audit writes beside it and renames when whole
        summary, failed = audit(app, out, o)
    except PrivbenchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 (anything else the app or an attack raised: one line, status 2, no result)
        line = str(exc).splitlines()[0] if str(exc) else ""
        print(f"{PROG}: error: the audit failed: {type(exc).__name__}: {line}", file=sys.stderr)
        return 2
    if args.junit is not None:
        from privbench.io import atomic_write_text

        atomic_write_text(args.junit, (out / "junit.xml").read_text())
    for note in summary["notes"]:
        print(f"{PROG}: note: {note}")
    for problem in summary["problems"]:
        print(f"{PROG}: {problem}")
    figures = {k: v for k, v in summary["figures"].items() if v is not None}
    print(f"{PROG}: {app.name}: {json.dumps(figures, default=str)}")
    for g in summary["gate"]:
        print(f"{PROG}: gate {'FAIL' if g['failed'] else 'pass'}: {g['rule']}: {g['why']}")
    print(f"results: {out}")
    return 1 if failed else 0
