"""A Flower app as ``flwr run`` reads it: its ``pyproject.toml`` names the ServerApp and ClientApp, the run config
and the federation; everything is checked here, before anything runs, with one line per problem."""
from __future__ import annotations

import importlib
import ipaddress
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privbench.errors import ConfigError

#: Run-config values a Flower app may hold (``flwr.common.typing.UserConfigValue``).
SCALARS = (bool, int, float, str)


class AppError(ConfigError):
    """The path is not a Flower app this audit can run, or the app failed."""


@dataclass(frozen=True)
class FlowerApp:
    """A Flower app's declaration.

    Attributes:
        root: the folder holding its ``pyproject.toml`` (put first on ``sys.path``, as ``flwr run`` does).
        serverapp: the ServerApp reference, ``module:attribute``.
        clientapp: the ClientApp reference.
        run_config: ``[tool.flwr.app.config]``, flattened to dotted keys, with the audit's overrides.
        supernodes: ``options.num-supernodes`` of the default federation (or the audit's override).
        name: the project name.
        notes: what the audit runs differently from what the app asks, one line each.
        deployment: run in a loopback deployment (the app's default federation names a loopback address, or the
            audit was asked to), not Flower's simulation.
    """

    root: Path
    serverapp: str
    clientapp: str
    run_config: dict[str, Any] = field(default_factory=dict)
    supernodes: int = 2
    name: str = ""
    notes: tuple[str, ...] = ()
    deployment: bool = False


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _reference(value: Any, what: str, pyproject: Path) -> str:
    module, _, attribute = str(value).partition(":")
    if not isinstance(value, str) or not module or not attribute.isidentifier():
        raise AppError(f"{pyproject}: [tool.flwr.app.components] {what} = {value!r}: expected 'module:attribute'")
    return value


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _federation(flwr: dict[str, Any], pyproject: Path) -> dict[str, Any]:
    """The default federation's table; one that names an address beyond loopback is refused."""
    federations = flwr.get("federations", {})
    if not isinstance(federations, dict):
        raise AppError(f"{pyproject}: [tool.flwr.federations] must be a table")
    chosen = federations.get(str(federations.get("default", "")), {})
    for name, table in federations.items():
        if isinstance(table, dict) and "address" in table and not _loopback(str(table["address"])):
            if table is chosen:
                raise AppError(f"{pyproject}: federation {name!r} connects to {table['address']}, beyond this "
                               "machine: privbench audits an app in simulation on this machine only")
    return chosen if isinstance(chosen, dict) else {}


def _flower_checks(root: Path) -> None:
    """Flower's own checks of the app's ``pyproject.toml`` (``flwr run`` refuses what they refuse), as one line."""
    from flwr.common.config import get_project_config

    try:
        get_project_config(root)
    except ValueError as exc:
        problems = [ln.strip(" -") for ln in str(exc).splitlines()[1:] if ln.strip(" -")] or [str(exc)]
        raise AppError(f"{root / 'pyproject.toml'}: Flower refuses it: {'; '.join(problems)}") from None


def read_app(path: Path, *, overrides: dict[str, Any] | None = None, supernodes: int | None = None,
             engine: str = "auto") -> FlowerApp:
    """The app at ``path`` (its folder or its ``pyproject.toml``), with run-config ``overrides``; run in a loopback
    deployment where its default federation names one (``engine="auto"``) or ``engine="deployment"``."""
    path = Path(path)
    pyproject = path if path.name == "pyproject.toml" else path / "pyproject.toml"
    if not path.exists():
        raise AppError(f"{path}: no such file or folder")
    if not pyproject.is_file():
        raise AppError(f"{path}: not a Flower app (no pyproject.toml)")
    try:
        toml = tomllib.loads(pyproject.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AppError(f"{pyproject}: not valid TOML ({exc})") from None
    flwr = toml.get("tool", {}).get("flwr", {})
    components = flwr.get("app", {}).get("components") if isinstance(flwr, dict) else None
    if not isinstance(components, dict) or not {"serverapp", "clientapp"} <= set(components):
        raise AppError(f"{pyproject}: not a Flower app (no [tool.flwr.app.components] with serverapp and clientapp)")
    config = _flatten(flwr["app"].get("config", {}) or {})
    for key, value in {**config, **(overrides or {})}.items():
        if not isinstance(value, SCALARS):
            raise AppError(f"run config {key} = {value!r}: a Flower run config holds numbers, strings and booleans")
    unknown = sorted(set(overrides or {}) - set(config))
    if unknown:
        raise AppError(f"--run-config {unknown[0]}: the app's [tool.flwr.app.config] has no such key "
                       f"(it has: {', '.join(sorted(config)) or 'none'})")
    server, client = (_reference(components[k], k, pyproject) for k in ("serverapp", "clientapp"))
    _flower_checks(pyproject.parent)
    federation = _federation(flwr, pyproject)
    options = federation.get("options", {})
    deployment = engine == "deployment" or (engine == "auto" and "address" in federation)
    notes: tuple[str, ...] = ()
    if "address" in federation:
        notes = (f"the app's default federation names a deployment at {federation['address']}; "
                 + ("the audit deploys it on this machine: a SuperLink and a SuperNode per partition, insecure, on "
                    "free loopback ports" if deployment else "the audit runs it in Flower's simulation (--engine)"),)
    nodes = supernodes if supernodes is not None else options.get("num-supernodes", 2)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 2 <= nodes <= 64:
        raise AppError(f"num-supernodes = {nodes!r}: the audit runs 2 to 64 SuperNodes")
    return FlowerApp(root=pyproject.parent.resolve(), serverapp=server, clientapp=client,
                     run_config={**config, **(overrides or {})}, supernodes=nodes,
                     name=str(toml.get("project", {}).get("name", pyproject.parent.name)), notes=notes,
                     deployment=deployment)


def load_component(app: FlowerApp, which: str) -> Any:
    """Import the app's ServerApp (``which="serverapp"``) or ClientApp from its folder, as a SuperNode would."""
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    reference = getattr(app, which)
    module_name, _, attribute = reference.partition(":")
    root = str(app.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    top = module_name.split(".")[0]
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        loaded = getattr(sys.modules[name], "__file__", None) or ""
        if not loaded.startswith(root):  # another app's module of the same name: not this app's
            del sys.modules[name]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the app's own import failed: one line, the app's error
        raise AppError(f"{reference}: importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    obj = getattr(module, attribute, None)
    expected = ServerApp if which == "serverapp" else ClientApp
    if not isinstance(obj, expected):
        raise AppError(f"{reference}: {attribute} is {type(obj).__name__}, not a Flower {expected.__name__}")
    return obj
