"""Errors that privbench reports to the user as one line, without a traceback."""
import difflib
from collections.abc import Iterable
from typing import Any

#: Longest value echoed in an error.
SHOWN = 60


def shown(value: Any) -> str:
    """``repr(value)``, cut to ``SHOWN`` characters for error messages."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


#: Keys that moved, with where they went (a config written for an earlier privbench names them).
MOVED = {"fl.engine": "engine=inprocess or engine=flower, a config group of its own"}


def did_you_mean(word: str, choices: Iterable[str], *, prefix: str = "") -> str:
    """`` (did you mean PREFIXx?)`` for the choice closest to ``word``, or ``""`` when none is close.

    Example:
        >>> did_you_mean("genfl", ["fedavg", "genefl", "local"], prefix="fl=")
        ' (did you mean fl=genefl?)'
    """
    moved = MOVED.get(prefix + word)
    if moved:
        return f" (moved: use {moved})"
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


class PrivbenchError(Exception):
    """Base class of errors caused by user input (configs, data, payloads)."""


class ConfigError(PrivbenchError):
    """A config key or value is invalid; the message names the key and what is allowed."""


class DatasetNotFoundError(PrivbenchError):
    """A dataset is not on disk; the message says how to get it."""


class AttackNotApplicableError(PrivbenchError):
    """An attack cannot read a payload; the message says why."""


class StoreError(PrivbenchError):
    """A payload store is missing, damaged or edited, or a payload id points outside it."""
