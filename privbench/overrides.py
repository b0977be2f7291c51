"""Check command-line overrides against the real config tree before Hydra runs anything."""
from __future__ import annotations

from importlib import resources

from omegaconf import DictConfig, OmegaConf

from privbench.errors import ConfigError

GROUPS = ("data", "model", "fl", "payload", "attack", "defense", "experiment")


def options(group: str) -> list[str]:
    """Option names of a config group, from the installed ``configs`` package."""
    folder = resources.files("configs").joinpath(group)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def _compose(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="configs", version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _unknown_key(key: str, overrides: list[str]) -> ConfigError:
    parent, _, leaf = key.rpartition(".")
    groups = [o for o in overrides if o.split("=", 1)[0] in GROUPS]
    cfg = _compose(groups)
    node = OmegaConf.select(cfg, parent) if parent else cfg
    allowed = sorted(str(k) for k in node) if node is not None and OmegaConf.is_dict(node) else []
    where = f"{parent}." if parent else ""
    return ConfigError(f"{where}{leaf}: unknown key; allowed keys: {', '.join(allowed) or '(none)'}")


def check_overrides(args: list[str]) -> None:
    """Raise a one-line ``ConfigError`` for an unknown group option or key, or a parse error.

    Sweeps (``a=x,y``) are checked value by value for groups, and composed with the
    first value of each; values themselves are checked later, per job.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from None
    first: list[str] = []
    for o in parsed:
        if o.is_hydra_override():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        if o.key_or_group in GROUPS and not o.is_delete():
            allowed = options(o.key_or_group)
            for value in values:
                if value not in allowed and value != "null":
                    raise ConfigError(f"{o.key_or_group}={value}: unknown option; allowed: {', '.join(allowed)}")
        first.append(f"{o.get_key_element()}={values[0]}" if values else o.get_key_element())
    try:
        _compose(first)
    except HydraException as exc:
        cause = exc.__cause__ or exc
        text = str(cause)
        if "not in struct" in text or "Could not override" in str(exc) or "Could not delete" in str(exc):
            key = getattr(cause, "full_key", None) or str(exc).split("'")[1]
            raise _unknown_key(str(key), first) from None
        raise ConfigError(str(exc).splitlines()[0]) from None
    except Exception as exc:  # omegaconf validation errors
        raise ConfigError(str(exc).splitlines()[0]) from None
