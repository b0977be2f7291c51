"""Errors that privbench reports to the user as one line, without a traceback."""
from typing import Any

#: Longest value echoed in an error.
SHOWN = 60


def shown(value: Any) -> str:
    """``repr(value)``, cut to ``SHOWN`` characters for error messages."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


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
