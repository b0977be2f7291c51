"""A user's app in a loopback deployment on this machine: a SuperLink and one SuperNode per partition as Flower's
own processes (``flower-superlink``, ``flower-supernode``; insecure, on free loopback ports, runtime dependency
installation off), ``flwr run`` submitting the app as its FAB, and the audit's ``flwr-serverapp`` and
``flwr-clientapp`` (``deployed``: Flower's commands with the audit's wrappers) first on the processes' PATH. What the
ServerApp's grid recorded and what each ClientApp call noted come back through the audit's notes folder."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from privbench.app_audit.app import AppError, FlowerApp, load_component
from privbench.app_audit.deployed import FAILED, NOTES, RECORDING, SPEC
from privbench.app_audit.record_canary_client import RecordPlan
from privbench.app_audit.simulation import AppRun, assembled, checked

#: Seconds the SuperLink has to listen.
START_WAIT = 60.0
#: What the copy of the app leaves out (Flower's FAB leaves them out too).
COPY_IGNORED = (".git", ".venv", "__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", ".ruff_cache")
_SHIM = "#!{python}\nimport sys\nfrom privbench.app_audit.deployed import {name}\nsys.exit({name}())\n"


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports nothing listens on now."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _tail(log: Path) -> str:
    """The log's last line that says something, for an error line."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.is_file() else []
    return lines[-1][-300:] if lines else "nothing logged"


def _wait_for(port: int, seconds: float, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    if process.poll() is not None:
        raise AppError(f"the loopback deployment's SuperLink exited ({process.returncode}) before it listened: "
                       f"{_tail(log)}")
    raise AppError(f"the loopback deployment's SuperLink did not listen on 127.0.0.1:{port} within {seconds:g} s")


def _stop(procs: list[subprocess.Popen[bytes]], notes: Path) -> None:
    """Stop the deployment's processes: their groups (SIGTERM, then SIGKILL for what does not stop in 30 s), then,
    on Linux, anything left that carries the audit's notes folder in its environment (the SuperLink starts its
    executor in a session of its own; SIGKILL: its parent is gone). Without ``/proc`` that last sweep finds
    nothing, and Flower's own parent-process watch is what ends the executor."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    marker = f"{NOTES}={notes}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError):
            if marker in environ.read_bytes().split(b"\0") and int(environ.parent.name) != os.getpid():
                os.kill(int(environ.parent.name), signal.SIGKILL)


def flower_said(output: str) -> str:
    """What ``flwr run`` said went wrong, in one line: its error box's first paragraph, else its last line."""
    lines = output.strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("╭") and "Error" in ln), None)
    if start is None:
        return lines[-1].strip() if lines else "flwr run said nothing"
    said: list[str] = []
    for ln in lines[start + 1:]:
        text = ln.strip().strip("│╰╯─").strip()
        if not text:
            if said:
                break
            continue
        said.append(text)
    return " ".join(said)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _prepare(app: FlowerApp, folder: Path, *, seed: int, reply_timeout: float, canaries: int,
             records: RecordPlan | None) -> tuple[dict[str, str], Path, int]:
    """The deployment's folders, the audit's shims, spec and run config; its environment, notes folder and port."""
    notes, home, shims = folder / "notes", folder / "flwr", folder / "bin"
    for d in (notes, home, shims):
        d.mkdir()
    # flwr run migrates an app's [tool.flwr.federations] into its own config by rewriting its pyproject.toml: it
    # runs on a copy, so that the app's files stay as they are
    shutil.copytree(app.root, folder / "app", ignore=shutil.ignore_patterns(*COPY_IGNORED))
    for name, command in (("serverapp", "flwr-serverapp"), ("clientapp", "flwr-clientapp")):
        (shims / command).write_text(_SHIM.format(python=sys.executable, name=name))
        (shims / command).chmod(0o755)
    (notes / SPEC).write_text(json.dumps({"seed": seed, "canaries": canaries, "supernodes": app.supernodes,
                                          "reply_timeout": reply_timeout}))
    if records is not None:
        records.write(notes)
    (folder / "run-config.toml").write_text("".join(f"{k} = {_toml(v)}\n" for k, v in app.run_config.items()))
    (link,) = free_ports(1)
    (home / "config.toml").write_text(f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
                                      f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    package = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           NOTES: str(notes),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PATH": os.pathsep.join([str(shims), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH", "")) if p)}
    return env, notes, link


def deploy_app(app: FlowerApp, *, seed: int, reply_timeout: float = 300.0, canaries: int = 0,
               records: RecordPlan | None = None, wait: float | None = None) -> AppRun:
    """Run ``app`` in a loopback deployment with the audit's wrappers; one error line if it fails (``wait``:
    seconds ``flwr run`` may take, None for no limit: each batch of replies is held to ``reply_timeout``)."""
    with tempfile.TemporaryDirectory(prefix="privbench-app-deployment-") as tmp:
        folder = Path(tmp)
        env, notes, link = _prepare(app, folder, seed=seed, reply_timeout=reply_timeout, canaries=canaries,
                                    records=records)
        log = (folder / "processes.log").open("wb")
        procs: list[subprocess.Popen[bytes]] = []

        def start(*command: str) -> subprocess.Popen[bytes]:
            procs.append(subprocess.Popen(list(command), env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            return procs[-1]

        try:
            link_process = start("flower-superlink", "--insecure", "--port", str(link),
                                 "--disable-runtime-dependency-installation")
            _wait_for(link, START_WAIT, link_process, folder / "processes.log")
            for i, port in enumerate(free_ports(app.supernodes)):
                start("flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}", "--port", str(port),
                      "--node-config", f"partition-id={i} num-partitions={app.supernodes}")
            try:
                done = subprocess.run(["flwr", "run", str(folder / "app"), "loopback", "--stream", "--run-config",
                                       str(folder / "run-config.toml")], env=env, cwd=folder, capture_output=True,
                                      text=True, timeout=wait)
                said = flower_said(done.stdout + done.stderr).replace(str(folder / "app"), str(app.root))
            except subprocess.TimeoutExpired:
                said = f"flwr run did not return within {wait:g} s"
        finally:
            _stop(procs, notes)
            log.close()
        failed = (notes / FAILED).read_text().strip().splitlines() if (notes / FAILED).is_file() else []
        if failed:  # the audit's own ServerApp process failed outside the app
            said = failed[-1]
        if not (notes / RECORDING).is_file():
            raise AppError(f"{app.name}: the loopback deployment ended before the ServerApp returned: {said}")
        recorded = torch.load(notes / RECORDING, weights_only=False)  # written by the audit's own ServerApp process
        read = [torch.load(p, weights_only=True) for p in sorted(notes.glob("*.pt")) if p.name != RECORDING]
    checked(app, recorded["error"], recorded["messages"], reply_timeout, engine="the loopback deployment")
    return assembled(recorded["messages"], recorded["models"], read, recorded["strategies"],
                     load_component(app, "clientapp"), recorded["plan"], recorded["clips"], records)
