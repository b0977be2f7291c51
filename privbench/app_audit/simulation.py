"""The app run unmodified in Flower's simulation, with the audit's wrappers around its grid, its ClientApp and its
strategy's ``start``; what it sent, what its clients trained on and the strategies it chose come back together."""
from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.app_audit.adaptive_clipping import ClipTrajectory, adaptive_wrapper
from privbench.app_audit.app import AppError, FlowerApp, load_component
from privbench.app_audit.canary_client import CLIPS, CanaryPlan
from privbench.app_audit.client_side import AuditedClientApp
from privbench.app_audit.record_canary_client import RecordPlan
from privbench.app_audit.recording import Broadcast, RecordingGrid, Sent
from privbench.errors import PrivbenchError
from privbench.flower.simulation import environment
from privbench.io import atomic_write_text


@dataclass
class AppRun:
    """One audited run: the messages in the order they crossed, each client message's notes (the evaluator's),
    the strategies the ServerApp started, and the ClientApp (for its mods)."""

    messages: list[Sent]
    notes: list[dict[str, Any]]
    strategies: list[Any] = field(default_factory=list)
    client_app: Any = None
    partitions: dict[int, int] = field(default_factory=dict)  # node -> partition id
    #: the model each batch sent down carried, in send order
    models: list[Broadcast] = field(default_factory=list)
    #: the canary clients' plan (``canary_client``) and their nodes (node -> canary index)
    canary_plan: CanaryPlan | None = None
    canaries: dict[int, int] = field(default_factory=dict)
    #: an adaptive-clipping DP wrapper's clip, round by round (None: the app runs none)
    clips: ClipTrajectory | None = None
    #: the canary records planted in a client's DP-SGD (``record_canary_client``), or None
    record_plan: RecordPlan | None = None

    def without(self, nodes: set[int]) -> AppRun:
        """This run with ``nodes``' messages, notes and partitions left out (what the attacks read when ``nodes``
        are the audit's canary clients)."""
        return AppRun([m for m in self.messages if m.node not in nodes], [n for n in self.notes if n["node"] not in nodes],
                      self.strategies, self.client_app, {k: v for k, v in self.partitions.items() if k not in nodes},
                      self.models, self.canary_plan, {}, self.clips, self.record_plan)


@contextlib.contextmanager
def noting_strategies() -> Iterator[list[Any]]:
    """Within the block, every Flower strategy whose ``start`` is called is noted (the outermost: a DP wrapper
    holds the strategy it wraps), and every strategy a ``LegacyContext`` is given (the workflows' apps)."""
    from flwr.serverapp.strategy import Strategy

    started: list[Any] = []
    original = Strategy.start

    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        started.append(self)
        return original(self, *args, **kwargs)

    from flwr.server import LegacyContext

    legacy_init = LegacyContext.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:  # a workflow's strategy (DefaultWorkflow, SecAgg+)
        legacy_init(self, *args, **kwargs)
        started.append(self.strategy)

    Strategy.start = start  # type: ignore[method-assign]
    LegacyContext.__init__ = init  # type: ignore[method-assign]
    try:
        yield started
    finally:
        Strategy.start = original  # type: ignore[method-assign]
        LegacyContext.__init__ = legacy_init  # type: ignore[method-assign]


#: Plans the canary clients when the first train message is about to leave: given the strategies started so far and
#: the ClientApp, the plan (or None for none); may raise a ``PrivbenchError`` (the audit's one line).
Planner = Callable[[list[Any], Any], "CanaryPlan | None"]


def run_app(app: FlowerApp, *, seed: int, slots: int = 2, reply_timeout: float = 300.0,
            canaries: Planner | None = None, records: RecordPlan | None = None) -> AppRun:
    """Run ``app`` in Flower's simulation with the audit's wrappers (and canary clients where ``canaries`` plans
    them, canary records in a client's DP-SGD where ``records`` plans them); one error line if the app fails."""
    from flwr.app import Context, RecordDict
    from flwr.common.config import get_fused_config_from_dir
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity

    server_app, client_app = load_component(app, "serverapp"), load_component(app, "clientapp")
    outcome: dict[str, Any] = {}
    hooks = ServerHooks(server_app, client_app, canaries, outcome)
    wrapper = recording_server_app(hooks, reply_timeout)
    run = Run.create_empty(run_id=seed + 1)
    run.override_config = dict(app.run_config)
    run.primary_task_id, run.federation_id = seed + 1, NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run.run_id, SUPERLINK_NODE_ID  # as Flower's
    fused = get_fused_config_from_dir(app.root, dict(app.run_config))
    context = Context(run_id=run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=fused)
    backend: dict[str, Any] = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                               "init_args": {"num_cpus": slots, "include_dashboard": False, "log_to_driver": False}}
    path = os.pathsep.join(p for p in (str(app.root), os.environ.get("PYTHONPATH", "")) if p)
    seeded(seed)  # the ServerApp runs in this process
    with tempfile.TemporaryDirectory(prefix="privbench-app-notes-") as notes, \
            environment(PYTHONPATH=path, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"), noting_strategies() as started:
        hooks.notes, hooks.started = Path(notes), started
        if records is not None:
            records.write(Path(notes))
        _run_simulation(num_supernodes=app.supernodes, exit_event=_leave_event(), client_app=AuditedClientApp(
            client_app, notes, seed=seed), server_app=wrapper, backend_config=backend, app_dir=str(app.root), is_app=True,
            run=run, server_app_context=context)
        read = [torch.load(p, weights_only=True) for p in sorted(Path(notes).glob("*.pt"))]
    grid = outcome.get("grid")
    checked(app, outcome.get("error"), grid.messages if grid is not None else None, reply_timeout)
    assert grid is not None
    return assembled(grid.messages, grid.models, read, hooks.strategies(), client_app, outcome.get("plan"),
                     hooks.clips(), records)


def assembled(messages: list[Sent], models: list[Broadcast], read: list[dict[str, Any]], strategies: list[Any],
              client_app: Any, plan: CanaryPlan | None, clips: ClipTrajectory | None,
              records: RecordPlan | None) -> AppRun:
    """The run from what the grid recorded and the clients' notes (``read``)."""
    return AppRun(messages, read, strategies, client_app, {int(n["node"]): int(n["partition"]) for n in read}, models,
                  plan, {int(n["node"]): int(n["canary"]) for n in read if n.get("canary") is not None}, clips,
                  records)


def seeded(seed: int) -> None:
    """Seed torch's, numpy's and Python's generators in the ServerApp's process (a DP wrapper's noise, a strategy's
    sampling)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def recording_server_app(hooks: ServerHooks, reply_timeout: float) -> Any:
    """A ServerApp that runs the app's with its grid recorded (``outcome["grid"]``) and its error kept
    (``outcome["error"]``, raised again in the audit as one line)."""
    from flwr.app import Context
    from flwr.serverapp import ServerApp

    wrapper = ServerApp()
    outcome = hooks.outcome

    @wrapper.main()
    def main(grid: Any, context: Context) -> None:
        outcome["grid"] = recording = RecordingGrid(grid, reply_timeout=reply_timeout, before_train=hooks.before_train)
        try:
            hooks.server_app(recording, context)
        except BaseException as exc:
            outcome["error"] = exc

    return wrapper


class ServerHooks:
    """What the audit does in the server's process as the app runs: plan the canary clients when the first train
    message is about to leave, and note an adaptive-clipping wrapper's clip as each round's leave (written for the
    canary clients where there are some)."""

    def __init__(self, server_app: Any, client_app: Any, canaries: Planner | None, outcome: dict[str, Any]) -> None:
        self.server_app, self.client_app, self.canaries, self.outcome = server_app, client_app, canaries, outcome
        self.notes: Path | None = None
        self.started: list[Any] = []
        self.trajectory = ClipTrajectory()

    def strategies(self) -> list[Any]:
        """The strategies started so far, and a legacy ``ServerApp(server_fn=...)``'s (set when it runs)."""
        legacy = getattr(self.server_app, "_strategy", None)
        return [*self.started, *([legacy] if legacy is not None else [])]

    def before_train(self, messages: list[Any], round_: int) -> None:
        assert self.notes is not None
        if self.canaries is not None and "plan" not in self.outcome:
            self.outcome["plan"] = plan = self.canaries(self.strategies(), self.client_app)
            if plan is not None:
                plan.write(self.notes)
        adaptive = adaptive_wrapper(self.strategies())
        if adaptive is not None:  # the clip this round's updates will be clipped to, noted before they leave
            self.trajectory.note(round_, adaptive)
            if self.outcome.get("plan") is not None:
                clips = {str(r): c for r, c in self.trajectory.clips.items()}
                atomic_write_text(self.notes / CLIPS, json.dumps(clips))

    def clips(self) -> ClipTrajectory | None:
        """After the run: the adaptive wrapper's clip each round and after the last (None: the app ran none)."""
        adaptive = adaptive_wrapper(self.strategies())
        if adaptive is None:
            return None
        self.trajectory.final = float(adaptive.clipping_norm)
        return self.trajectory


def checked(app: FlowerApp, error: BaseException | tuple[str, str, bool] | None, messages: list[Sent] | None,
            reply_timeout: float, *, engine: str = "Flower's simulation") -> None:
    """Nothing where the run is a result; else the one line that says why not (``error``: the exception the
    ServerApp raised, or its type name, first line and whether it is privbench's own)."""
    if isinstance(error, PrivbenchError):
        raise error
    if isinstance(error, BaseException):
        error = (type(error).__name__, str(error).splitlines()[0] if str(error) else "", False)
    if error is not None:
        name, line, own = error
        raise AppError(line if own else f"{app.serverapp}: the ServerApp failed: {name}: {line}")
    if messages is None:
        raise AppError(f"{app.name}: {engine} ended before the ServerApp started")
    failed = next((m for m in messages if m.error), None)
    if failed is not None:
        raise AppError(f"{app.clientapp}: the ClientApp on node {failed.node} failed: {failed.error}")
    answered = {m.message_id for m in messages if m.direction == "up"}
    silent = [m for m in messages if m.direction == "down" and m.message_id not in answered]
    if silent:
        raise AppError(f"{app.clientapp}: the ClientApp on node {silent[0].node} sent no reply Flower accepts to a "
                       f"{silent[0].message_type} message within {reply_timeout:g} s (Flower's log above says why)")


def _leave_event() -> Any:
    from flwr.supercore.telemetry import EventType

    return EventType.PYTHON_API_RUN_SIMULATION_LEAVE
