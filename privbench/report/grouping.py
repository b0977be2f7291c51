"""Which config values tell runs apart: the report's grouping keys (every differing value except the seed)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from privbench.report.collect import CHOICES, COLUMNS

#: Keys that change only the attack on a recorded training, not the training (utility, bytes, epsilon).
ATTACK_SIDE = ("payload", "attack", "metrics", "capture")


def token(value: object) -> str:
    """A value as grouping sees it: equal for equal values, one token for every kind of missing value."""
    if value is None or (isinstance(value, float) and value != value):
        return "\0missing"
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def _tokens(column: pd.Series) -> pd.Series:
    return column.map(token)


def group_keys(runs: pd.DataFrame) -> list[str]:
    """The columns that tell runs apart, seed aside: the chosen config groups, then every flattened config value
    that differs between runs and is not already fixed by the keys before it (e.g. ``fl._target_`` by ``fl``).

    Example:
        >>> runs = pd.DataFrame({"payload": ["gradient"] * 4, "attack": "idlg", "defense": ["none", "dpsgd"] * 2,
        ...                      "fl": "genefl", "model": "lenet", "data": "d", "seed": [0, 0, 1, 1],
        ...                      "defense.target_epsilon": [float("nan"), 8.0] * 2, "fl.lr": 0.1})
        >>> group_keys(runs)
        ['defense']
    """
    config = sorted(c for c in runs.columns if c not in COLUMNS)
    keys: list[str] = []
    for key in [c for c in CHOICES if c in runs.columns] + config:
        tokens = _tokens(runs[key])
        if tokens.nunique() <= 1:
            continue
        if keys and tokens.groupby([_tokens(runs[k]) for k in keys]).nunique().max() <= 1:
            continue  # fixed by the keys already chosen
        keys.append(key)
    return keys


def is_attack_side(key: str) -> bool:
    """True for keys that change only the attack, never the training it reads."""
    return key.split(".", 1)[0] in ATTACK_SIDE


def training_keys(keys: list[str]) -> list[str]:
    """The grouping keys that change the training (for utility, bytes and epsilon)."""
    return [k for k in keys if not is_attack_side(k)]
