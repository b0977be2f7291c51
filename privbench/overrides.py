"""Check command-line overrides against the real config tree before Hydra runs anything."""
from __future__ import annotations

import copy
import os
from collections.abc import Collection, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

from omegaconf import DictConfig, OmegaConf

from privbench.config_dir import config_dir, hydra_session
from privbench.errors import ConfigError, did_you_mean, shown
from privbench.hydra_keys import check_folder, check_hydra_override, check_hydra_paths, hydra_context

GROUPS = ("data", "model", "fl", "payload", "attack", "defense", "aggregation", "engine", "experiment")


def options(group: str) -> list[str]:
    """Option names of a config group: the installed ``privbench.conf`` package's, and the studies' (``studies/``)."""
    from privbench.studies import study_folders

    folders = [resources.files("privbench.conf").joinpath(group), *(s.joinpath(group) for s in study_folders())]
    return sorted({p.name.removesuffix(".yaml") for folder in folders if folder.is_dir() for p in folder.iterdir()
                   if p.name.endswith(".yaml")})


def compose_with_hydra(overrides: list[str]) -> DictConfig:
    """The config Hydra composes for ``overrides``, its ``hydra`` node included (a fresh copy each call)."""
    from privbench.studies import studies_root

    return copy.deepcopy(_composed(tuple(overrides), config_dir(), studies_root()))


@lru_cache(maxsize=4)
def _composed(overrides: tuple[str, ...], folder: str | None, studies: object = None) -> DictConfig:
    """Composed on privbench's configs, the ``--config-dir`` ``folder`` and the studies mounted from ``studies``
    (both part of the cache key)."""
    from hydra import compose

    from privbench.naming import register

    register()
    with hydra_session():
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def _unknown_key(key: str, overrides: list[str]) -> ConfigError:
    parent, _, leaf = key.rpartition(".")
    groups = [o for o in overrides if o.split("=", 1)[0] in GROUPS or o.startswith("hydra.searchpath")]
    cfg = compose_with_hydra(groups)
    node = OmegaConf.select(cfg, parent) if parent else cfg
    allowed = sorted(str(k) for k in node) if node is not None and OmegaConf.is_dict(node) else []
    where = f"{parent}." if parent else ""
    hint = did_you_mean(leaf, allowed, prefix=where)
    return ConfigError(f"{where}{leaf}: unknown key{hint}; allowed keys: {', '.join(allowed) or '(none)'}")


def _message(exc: Exception) -> ConfigError:
    """One line for a Hydra composition error: the option or key and what is allowed."""
    from hydra.errors import MissingConfigException

    cause = exc.__cause__ or exc
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        hint = did_you_mean(option, exc.options, prefix=f"{group}=")
        if group.split("/")[0] == "experiment" and not hint:
            from privbench.studies import STUDIES_ENV, studies_root

            mounted, named = studies_root(), os.environ.get(STUDIES_ENV)
            hint = (f" (studies are mounted from {mounted})" if mounted else
                    f" (${STUDIES_ENV}={named} is not a folder)" if named else
                    f" (the committed studies are in a clone's studies/ folder, or set ${STUDIES_ENV})")
        return ConfigError(f"{group}={option}: unknown option{hint}; allowed: {', '.join(sorted(exc.options))}")
    return ConfigError(str(cause).strip().splitlines()[0] if str(cause).strip() else "the overrides do not compose")


def _sweep_values(override: Any) -> list[str]:
    """Every value a sweep override takes; a ``glob(...)`` over a config group is expanded on its options."""
    from hydra.core.override_parser.types import Glob

    value = override.value()
    if isinstance(value, Glob):
        group = override.key_or_group.lstrip("+~")
        chosen = list(value.filter(options(group)))
        if not chosen:
            raise ConfigError(f"{override.input_line}: the glob matches no option of {group}")
        return chosen
    return list(override.sweep_string_iterator())


def check_overrides(args: list[str]) -> DictConfig:
    """Raise a one-line ``ConfigError`` for an unknown group option or key, or a parse error (``checked``); return
    the first job's composed config."""
    return checked(args)[0]


def checked(args: list[str]) -> tuple[DictConfig, list[str]]:
    """Raise a one-line ``ConfigError`` for an unknown group option or key, or a parse error.

    The overrides are composed by Hydra itself, ``hydra.searchpath`` included, so config
    options a user adds through the search path are accepted. Sweeps (``a=x,y``) are
    composed with the first value of each, and again for every other value of a group.
    Values themselves are checked later, per job (``privbench.values``). Returns the first job's composed config
    and the overrides it was composed from (each sweep at its first value).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for arg in args:
        if arg.lstrip("+~").startswith("="):
            raise ConfigError(f"cannot parse {arg[:60]!r}: an override is key=value")
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from None
    first: list[str] = []
    alternatives: list[tuple[int, str]] = []  # (position in first, override) for other values of group sweeps
    for o in parsed:
        values = _sweep_values(o) if o.is_sweep_override() else [o.get_value_element_as_str()]
        if o.is_hydra_override():
            check_hydra_override(o.key_or_group, values)
            first.append(str(o.input_line))
            continue
        first.append(f"{o.get_key_element()}={values[0]}" if values else o.get_key_element())
        if not o.is_delete():
            alternatives += [(len(first) - 1, f"{o.get_key_element()}={v}") for v in values[1:]]
    composed = _check_composes(list(first))
    for position, override in alternatives:  # every value of a sweep, not only the first job's, before any job runs
        overrides = list(first)
        overrides[position] = override
        _check_values(_check_composes(overrides))
    return composed, first


def _check_composes(overrides: list[str]) -> DictConfig:
    from hydra.errors import HydraException

    try:
        cfg = compose_with_hydra(overrides)
    except HydraException as exc:
        cause = exc.__cause__ or exc
        text = str(cause)
        if "not in struct" in text or "Could not override" in str(exc) or "Could not delete" in str(exc):
            key = getattr(cause, "full_key", None) or str(exc).split("'")[1]
            raise _unknown_key(str(key), overrides) from None
        raise _message(exc) from None
    except Exception as exc:  # omegaconf validation errors
        raise ConfigError(str(exc).splitlines()[0]) from None
    check_destination(cfg)
    check_hydra_paths(cfg)
    check_targets(overrides, cfg)
    return cfg


def _check_values(full: DictConfig) -> None:
    """``privbench.values.check_values`` on a composed config (its job part; ``name`` is Hydra's to resolve)."""
    from privbench.values import check_values

    job = OmegaConf.masked_copy(full, [str(k) for k in full if k != "hydra"])
    check_values(job)


#: Longest run name (it becomes a folder name).
NAME_LIMIT = 120


def check_destination(cfg: DictConfig) -> None:
    """``results_dir`` must be a folder privbench can create and write; ``name`` a short folder name."""

    from omegaconf.errors import OmegaConfBaseException

    try:  # resolved as Hydra will (the default name reads Hydra's runtime choices)
        with hydra_context(cfg):
            name = cfg.get("name")
    except OmegaConfBaseException as exc:
        raise ConfigError(f"name: cannot be resolved ({str(exc).strip().splitlines()[0][:200]})") from None
    if name is not None and (len(str(name)) > NAME_LIMIT or "/" in str(name) or str(name) in (".", "..")):
        raise ConfigError(f"name={shown(name)}: must be a folder name of at most {NAME_LIMIT} characters, no '/'")
    try:
        raw = OmegaConf.select(cfg, "results_dir", default=None)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"results_dir: cannot be resolved ({str(exc).strip().splitlines()[0][:200]})") from None
    check_folder("results_dir", raw)


#: Extra ``_target_`` prefixes a user may name on the command line (config key ``allow_targets``).
ALLOW_KEY = "allow_targets"


def config_targets(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every ``(key, _target_)`` in a config (a container from ``OmegaConf.to_container``), nested values included."""
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}{key}"
            if key == "_target_" and isinstance(value, str):
                out.append((name, value))
            else:
                out += config_targets(value, f"{name}.")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += config_targets(value, f"{prefix}{i}.")
    return out


def _allowed(target: str, allowed: Collection[str], prefixes: list[str]) -> bool:
    return target in allowed or any(target == p or target.startswith(p.rstrip(".") + ".") for p in prefixes)


def check_received_targets(cfg: DictConfig, *, allow: Sequence[str] = ()) -> None:
    """A config that arrived from elsewhere (a Flower message) may instantiate only privbench's own targets, or
    ones under ``allow`` (the receiver's choice; the config's own ``allow_targets`` is not trusted)."""
    allowed = tree_targets()
    plain = OmegaConf.to_container(cfg, resolve=False)
    for key, target in config_targets(plain):
        if not _allowed(target, allowed, list(allow)):
            raise ConfigError(f"{key}={shown(target)}: the received config names a _target_ privbench's configs do "
                              "not use; refused")


def check_targets(overrides: list[str], cfg: DictConfig) -> None:
    """Every ``_target_`` the composed config will instantiate, nested values and ``hydra.*`` included, must come
    from a config file (privbench's, or one added through ``hydra.searchpath``), or start with an entry of
    ``allow_targets``; a target that only the command line put there is refused
    (``payload._target_=builtins.open``, ``victim.clients={_target_:builtins.open}`` would run arbitrary callables).
    """
    extra = [str(p) for p in (OmegaConf.select(cfg, ALLOW_KEY, default=None) or [])]
    unknown = [(key, value) for key, value in config_targets(OmegaConf.to_container(cfg, resolve=False))
               if not _allowed(value, tree_targets(), extra)]
    if not unknown:
        return
    # a target privbench's configs do not name may still come from a config on hydra.searchpath
    files = OmegaConf.to_container(compose_with_hydra(_file_overrides(overrides)), resolve=False)
    allowed = tree_targets() | {t for _, t in config_targets(files)}
    for key, value in unknown:
        if not _allowed(value, allowed, extra):
            raise ConfigError(f"{key}={shown(value)}: a _target_ given on the command line must be one the configs "
                              f"use (e.g. {sorted(tree_targets())[0]}) or start with an entry of {ALLOW_KEY}; add a "
                              "config option through hydra.searchpath for your own classes")


def _file_overrides(overrides: list[str]) -> list[str]:
    """The overrides that only choose config files: group options (a study's arm groups, ``experiment/<name>/...``,
    included) and ``hydra.searchpath``."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~").split("/")[0] in GROUPS
            or o.startswith("hydra.searchpath") or o.split("=", 1)[0].lstrip("+~").startswith("hydra/")]


@lru_cache(maxsize=1)
def tree_targets() -> frozenset[str]:
    """Every ``_target_`` named in privbench's config files (read once per process)."""
    import re

    root = resources.files("privbench.conf")
    out: set[str] = set()
    stack = [root]
    while stack:
        for entry in stack.pop().iterdir():
            if entry.is_dir():
                stack.append(entry)
            elif entry.name.endswith(".yaml"):
                out |= set(re.findall(r"_target_:\s*([\w.]+)", entry.read_text()))
    return frozenset(out)


def compose_full(overrides: Sequence[str]) -> DictConfig:
    """``overrides`` checked and composed by Hydra (its ``hydra`` node included), a fresh copy."""
    composed, first = checked(list(overrides))
    # the checked composition is the one asked for where no value was rewritten (no sweep, no respelling)
    return composed if first == list(overrides) else compose_with_hydra(list(overrides))


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The job config that ``python -m privbench OVERRIDES`` would run, resolved, without Hydra's own node.

    Raises:
        privbench.errors.ConfigError: an unknown option or key, or an override that does not parse.
    """
    full = compose_full(overrides)
    with hydra_context(full):
        return job_config(full)


def job_config(full: DictConfig) -> DictConfig:
    """``full`` without its hydra node, writable, resolved (inside ``hydra_context``)."""
    from omegaconf.errors import OmegaConfBaseException

    from privbench.values import unresolvable

    job = OmegaConf.masked_copy(full, [str(k) for k in full if k != "hydra"])
    OmegaConf.set_readonly(job, False)
    try:
        OmegaConf.resolve(job)
    except OmegaConfBaseException as exc:
        raise unresolvable(job, exc) from None
    OmegaConf.set_struct(job, True)  # a misspelt key fails, as on the command line
    return job
