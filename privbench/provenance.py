"""What produced a result: privbench, torch and Python versions and the git commit."""
from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from pathlib import Path

import torch

import privbench


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout privbench runs from (``+dirty`` with local changes), or None."""
    source = Path(privbench.__file__).resolve().parent.parent
    if not (source / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def versions() -> dict[str, str | None]:
    """Versions recorded in every ``metrics.json`` (``run.versions``).

    Example:
        >>> sorted(versions())
        ['git_commit', 'privbench', 'python', 'torch']
    """
    return {"privbench": privbench.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "git_commit": git_commit()}
