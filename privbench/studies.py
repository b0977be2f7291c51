"""The committed studies, outside the installed package: ``studies/<name>/`` in a clone (or the folder named by
``$PRIVBENCH_STUDIES``), each a Hydra config root holding ``experiment/<name>.yaml``, its arms under
``experiment/<name>/`` and a ``README.md``. Each root is appended to Hydra's search path (a registered
``SearchPathPlugin``), so ``python -m privbench -m experiment=<name>`` composes a study as it composes a config of
the package; a wheel ships none."""
from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

#: The variable naming another folder of studies (a copy, or a user's own) instead of the clone's ``studies/``.
STUDIES_ENV = "PRIVBENCH_STUDIES"
#: The search path's provider name for a study's root (``--info searchpath`` shows it).
PROVIDER = "privbench-studies"


def studies_root() -> Path | None:
    """``$PRIVBENCH_STUDIES``, else the ``studies/`` folder beside the ``privbench`` package (a clone, or an
    editable install of one); None when neither is a folder."""
    named = os.environ.get(STUDIES_ENV)
    root = Path(named) if named else Path(__file__).resolve().parents[1] / "studies"
    return root.resolve() if root.is_dir() else None


def study_folders() -> list[Path]:
    """Every study under the root, by name: a folder holding ``experiment/<its name>.yaml``."""
    root = studies_root()
    if root is None:
        return []
    return sorted(d for d in root.iterdir() if (d / "experiment" / f"{d.name}.yaml").is_file())


class StudySearchPath(SearchPathPlugin):
    """Appends each study's root to the search path, after the package's configs (which win a name clash)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for folder in study_folders():
            search_path.append(provider=PROVIDER, path=f"file://{folder}")


def register_studies() -> None:
    """Register ``StudySearchPath`` with Hydra (idempotent): every later search path Hydra builds mounts the
    studies, the launch's and the checks' alike."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(StudySearchPath)
