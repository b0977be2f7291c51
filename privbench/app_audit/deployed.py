"""The audit's side of Flower's own ``flwr-serverapp`` and ``flwr-clientapp`` processes in a loopback deployment
(``deployment``): the same commands, run by the SuperLink and the SuperNodes as they always are, with the app's
ServerApp and ClientApp (loaded by Flower from the installed FAB) wrapped as the simulation wraps them. The audit's
notes folder (``NOTES`` in the environment) holds its spec; the ServerApp's process writes what its grid recorded
there when the app's ServerApp returns (``RECORDING``), whole or not at all; each ClientApp call writes its notes."""
from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

#: The environment variable naming the audit's notes folder.
NOTES = "PRIVBENCH_AUDIT_NOTES"
#: The audit's spec in the notes folder: seed, canary clients, reply timeout.
SPEC = "deployment.json"
#: What the ServerApp's process recorded.
RECORDING = "recording.pt"


def _spec() -> tuple[Path, dict[str, Any]]:
    notes = Path(os.environ[NOTES])
    return notes, json.loads((notes / SPEC).read_text())


def picklable(obj: Any, depth: int = 2) -> Any:
    """``obj``, or where it does not pickle a shallow copy whose attributes that do not pickle are None (a strategy
    holding a user's lambda): the audit reads a strategy's settings, never calls it."""
    import copy

    try:
        pickle.dumps(obj)
        return obj
    except Exception:  # noqa: BLE001 (any pickling failure)
        if depth == 0 or not hasattr(obj, "__dict__"):
            return None
    out = copy.copy(obj)
    for name, value in list(vars(out).items()):
        setattr(out, name, picklable(value, depth - 1))
    return out


def _run(grid: Any, server_app_dir: str, server_app_attr: str, context: Any) -> Any:
    """Flower's ``run`` of the ServerApp, the app's wrapped in the audit's recording; what it recorded is written."""
    import torch
    from flwr.common.config import get_project_config
    from flwr.server.run_serverapp import run as flower_run
    from flwr.supercore.object_ref import load_app

    from privbench.app_audit import canaries
    from privbench.app_audit.simulation import ServerHooks, noting_strategies, recording_server_app, seeded
    from privbench.errors import PrivbenchError
    from privbench.io import atomic_write_bytes

    notes, spec = _spec()
    server_app = load_app(server_app_attr, ValueError, server_app_dir)
    client_attr = get_project_config(server_app_dir)["tool"]["flwr"]["app"]["components"]["clientapp"]
    client_app = load_app(client_attr, ValueError, server_app_dir)
    planner = canaries.planner(spec["canaries"], spec["supernodes"], seed=spec["seed"]) if spec["canaries"] else None
    outcome: dict[str, Any] = {}
    hooks = ServerHooks(server_app, client_app, planner, outcome)
    wrapper = recording_server_app(hooks, float(spec["reply_timeout"]))
    seeded(int(spec["seed"]))
    with noting_strategies() as started:
        hooks.notes, hooks.started = notes, started
        context = flower_run(grid=grid, server_app_dir=server_app_dir, loaded_server_app=wrapper, context=context)
    recorded = outcome.get("grid")
    error = outcome.get("error")
    out = {"messages": recorded.messages if recorded is not None else None,
           "models": recorded.models if recorded is not None else [],
           "strategies": [picklable(s) for s in hooks.strategies()], "plan": outcome.get("plan"),
           "clips": hooks.clips(),  # the app's error as words: its arguments may not pickle
           "error": None if error is None else (type(error).__name__, str(error).splitlines()[0] if str(error) else "",
                                                isinstance(error, PrivbenchError))}
    buffer = io.BytesIO()
    torch.save(out, buffer)
    atomic_write_bytes(notes / RECORDING, buffer.getvalue())
    return context


#: Where the ServerApp's process writes the line that says why it failed outside the app.
FAILED = "serverapp-failed.txt"


def _noted(grid: Any, server_app_dir: str, server_app_attr: str, context: Any) -> Any:
    try:
        return _run(grid, server_app_dir, server_app_attr, context)
    except BaseException as exc:
        import traceback

        (Path(os.environ[NOTES]) / FAILED).write_text("".join(traceback.format_exception(exc)))
        raise


def serverapp() -> None:
    """``flwr-serverapp`` with the audit's recording around the app's ServerApp."""
    import importlib

    from flwr.superlink.cli.flwr_serverapp import flwr_serverapp

    # the module itself (its package binds the name to the function it defines)
    runtime = importlib.import_module("flwr.superlink.runtime.run_serverapp")
    setattr(runtime, "run_", _noted)  # noqa: B010 (a module mypy reads as its package)
    flwr_serverapp()


def clientapp() -> None:
    """``flwr-clientapp`` with the app's ClientApp inside the audit's ``AuditedClientApp``."""
    import importlib

    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp

    from privbench.app_audit.client_side import AuditedClientApp

    notes, spec = _spec()
    runtime = importlib.import_module("flwr.supernode.runtime.run_clientapp")
    original = getattr(runtime, "get_load_client_app_fn")  # noqa: B009 (a module mypy reads as its package)

    def loader(*args: Any, **kwargs: Any) -> Any:
        load = original(*args, **kwargs)
        return lambda *a, **k: AuditedClientApp(load(*a, **k), str(notes), seed=int(spec["seed"]))

    setattr(runtime, "get_load_client_app_fn", loader)  # noqa: B010
    flwr_clientapp()

