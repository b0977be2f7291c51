"""``--config-dir``: the extra config folder Hydra adds to its search path, added the same way to the compositions
privbench checks before Hydra starts (so an option defined there composes and is checked like any other)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from privbench.errors import ConfigError

#: The absolute ``--config-dir`` folder of this launch (None: no ``--config-dir``); set by ``use_config_dir``.
_chosen: dict[str, str | None] = {"dir": None}


def use_config_dir(folder: str | None) -> str | None:
    """Add ``folder`` (``--config-dir``, made absolute as Hydra makes it) to every later check's composition; None
    removes it. A folder that is not there is refused, as Hydra refuses it. Returns the absolute folder."""
    absolute = None if folder is None else os.path.abspath(folder)
    if absolute is not None and not os.path.isdir(absolute):
        raise ConfigError(f"--config-dir {folder}: no such folder ({absolute})")
    _chosen["dir"] = absolute
    return absolute


def config_dir() -> str | None:
    """The absolute ``--config-dir`` folder the checks compose with, or None."""
    return _chosen["dir"]


@contextmanager
def hydra_session() -> Iterator[None]:
    """Hydra initialised on privbench's configs (as ``initialize_config_module("privbench.conf")``), with the
    ``--config-dir`` folder where ``hydra._internal.utils._run_hydra`` puts it: prepended before the ``schema``
    provider (after Hydra's and privbench's own configs, which therefore win a name clash)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    from privbench.studies import register_studies

    register_studies()
    GlobalHydra.instance().clear()
    version.setbase("1.3")
    search_path = create_automatic_config_search_path(None, "privbench.conf.app", None)
    folder = config_dir()
    if folder is not None:
        search_path.prepend(provider="command-line", path=f"file://{folder}",
                            anchor=SearchPathQuery(provider="schema"))
    Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
