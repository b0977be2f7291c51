"""The committed studies, outside the installed package: ``studies/<name>/`` in a clone (or the folder named by
``$PRIVBENCH_STUDIES``), each holding ``experiment/<name>.yaml``, its arms under ``experiment/<name>/`` and a
``README.md``. One search-path entry serves them all (``StudiesConfigSource``: config ``experiment/<name>...`` is read
from ``<root>/<name>/experiment/<name>...``), appended by a registered ``SearchPathPlugin``, so
``python -m privbench -m experiment=<name>`` composes a study as it composes a config of the package; a wheel ships
none."""
from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

#: The variable naming another folder of studies (a copy, or a user's own) instead of the clone's ``studies/``.
STUDIES_ENV = "PRIVBENCH_STUDIES"
#: The search path's provider name and scheme for the studies (``--info searchpath`` shows them).
PROVIDER = SCHEME = "privbench-studies"
GROUP = "experiment"


def studies_root() -> Path | None:
    """``$PRIVBENCH_STUDIES``, else the ``studies/`` folder beside the ``privbench`` package (a clone, or an
    editable install of one); None when neither is a folder."""
    named = os.environ.get(STUDIES_ENV)
    root = Path(named) if named else Path(__file__).resolve().parents[1] / "studies"
    return root.resolve() if root.is_dir() else None


def study_folders(root: Path | None = None) -> list[Path]:
    """Every study under ``root`` (default ``studies_root()``), by name: a folder holding ``experiment/<name>.yaml``."""
    root = studies_root() if root is None else root
    if root is None or not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if (d / GROUP / f"{d.name}.yaml").is_file())


class StudiesConfigSource(ConfigSource):
    """The studies under one root as one config source: ``experiment/<name>.yaml`` and the groups below
    ``experiment/<name>/`` of each ``<root>/<name>/``; nothing else."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def _root(self) -> Path:
        return Path(self.path)

    def _real(self, config_path: str) -> Path | None:
        parts = [p for p in config_path.split("/") if p]
        if len(parts) < 2 or parts[0] != GROUP:
            return None
        study = parts[1].removesuffix(".yaml")
        return self._root() / study / GROUP / "/".join(parts[1:])

    def load_config(self, config_path: str) -> ConfigResult:
        real = self._real(self._normalize_file_name(config_path))
        if real is None or not real.is_file():
            raise ConfigLoadError(f"Config not found : {config_path} (in {self._root()})")
        text = real.read_text(encoding="utf-8")
        return ConfigResult(config=OmegaConf.create(text) if text.strip() else OmegaConf.create(),
                            path=f"{self.scheme()}://{self.path}", provider=self.provider,
                            header=ConfigSource._get_header_dict(text[:512]))

    def available(self) -> bool:
        return self._root().is_dir()

    def is_group(self, config_path: str) -> bool:
        if config_path.strip("/") in ("", GROUP):
            return self.available()
        real = self._real(config_path)
        return real is not None and real.is_dir()

    def is_config(self, config_path: str) -> bool:
        real = self._real(self._normalize_file_name(config_path))
        return real is not None and real.is_file()

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        files: list[str] = []
        path = config_path.strip("/")
        if path == "":
            names = [GROUP] if study_folders(self._root()) else []
        elif path == GROUP:
            names = [n for d in study_folders(self._root()) for n in (d.name, f"{d.name}.yaml")]
        else:
            real = self._real(path)
            names = sorted(os.listdir(real)) if real is not None and real.is_dir() else []
        for name in names:
            self._list_add_result(files=files, file_path=f"{path}/{name}".strip("/"), file_name=name,
                                  results_filter=results_filter)
        return sorted(set(files))


class StudySearchPath(SearchPathPlugin):
    """Appends the studies' root to the search path, after the package's configs (which win a name clash)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        root = studies_root()
        if root is not None:
            search_path.append(provider=PROVIDER, path=f"{SCHEME}://{root}")


def register_studies() -> None:
    """Register the studies' config source and ``StudySearchPath`` with Hydra (idempotent): every later search path
    Hydra builds mounts the studies, the launch's and the checks' alike."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(StudiesConfigSource)
    Plugins.instance().register(StudySearchPath)
