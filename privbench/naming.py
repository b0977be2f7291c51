"""The default run name, ``${privbench_name:fl,payload,attack,defense}``: what ran, in a folder name."""
from __future__ import annotations

from omegaconf import OmegaConf


def run_name(fl: str, payload: str, attack: str, defense: str) -> str:
    """``fl-payload-attack-defense``; without an attack, ``fl-noattack-defense`` (no payload is attacked).

    Example:
        >>> run_name("genefl", "learngene", "idlg", "none"), run_name("local", "learngene", "none", "none")
        ('genefl-learngene-idlg-none', 'local-noattack-none')
    """
    if attack == "none":
        return f"{fl}-noattack-{defense}"
    return f"{fl}-{payload}-{attack}-{defense}"


def register() -> None:
    """Make ``privbench_name`` and ``privbench_keys`` (``--help``'s annotated config) available to configs (idempotent)."""
    if not OmegaConf.has_resolver("privbench_name"):
        OmegaConf.register_new_resolver("privbench_name", run_name)
    if not OmegaConf.has_resolver("privbench_keys"):
        from privbench.keys import help_config

        OmegaConf.register_new_resolver("privbench_keys", help_config)
