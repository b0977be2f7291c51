"""Label inference scored: the class set and per-class counts against the truth and a class-frequency prior."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from privbench.figures import (
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CLASS_PROPORTION_ERROR_SET,
    LABEL_COUNT_ERROR,
    LABEL_COUNTS_EXACT,
    LABEL_SET_EXACT,
    LABEL_SET_JACCARD,
    NUM_TRUE,
)


def prior_counts(frequencies: torch.Tensor, n: int) -> dict[int, int]:
    """What a prior that knows only the class frequencies guesses for ``n`` images: ``n * frequency`` rounded by
    largest remainder (the counts sum to ``n``).

    Example:
        >>> prior_counts(torch.tensor([0.5, 0.3, 0.2]), 4)
        {0: 2, 1: 1, 2: 1}
    """
    share = frequencies.double().numpy() * n
    counts = np.floor(share).astype(int)
    for c in np.argsort(-(share - counts), kind="stable")[: n - int(counts.sum())]:
        counts[c] += 1
    return {int(c): int(k) for c, k in enumerate(counts)}


def _figures(counts: Mapping[int, int], true: Mapping[int, int], classes: int) -> tuple[float, float, float]:
    predicted = {c for c, k in counts.items() if k > 0}
    present = {c for c, k in true.items() if k > 0}
    errors = [abs(counts.get(c, 0) - true.get(c, 0)) for c in range(classes)]
    return float(predicted == present), float(all(e == 0 for e in errors)), float(np.mean(errors))


def label_scores(counts: Mapping[int, int], truth_labels: torch.Tensor, frequencies: torch.Tensor) -> dict[str, Any]:
    """``label_set_exact`` (1 when the inferred class set is the true one), ``label_counts_exact`` (every count
    right), ``label_count_error`` (mean absolute count error per class), each also for the prior (``_chance``).

    Example:
        >>> out = label_scores({3: 2, 5: 1}, torch.tensor([3, 5, 3]), torch.full((10,), 0.1))
        >>> out["label_set_exact"], out["label_counts_exact"], out["label_set_exact_chance"]
        (1.0, 1.0, 0.0)
    """
    classes = len(frequencies)
    true = {int(c): int(k) for c, k in zip(*np.unique(truth_labels.numpy(), return_counts=True))}
    prior = prior_counts(frequencies, len(truth_labels))
    found, chance = _figures(counts, true, classes), _figures(prior, true, classes)
    names = (LABEL_SET_EXACT.key, LABEL_COUNTS_EXACT.key, LABEL_COUNT_ERROR.key)
    return {**dict(zip(names, found)), **{f"{n}_chance": v for n, v in zip(names, chance)},
            "inferred_counts": {str(c): int(k) for c, k in sorted(counts.items()) if k},
            NUM_TRUE.key: len(truth_labels)}


def class_set_scores(predicted: set[int], truth_labels: torch.Tensor, frequencies: torch.Tensor) -> dict[str, Any]:
    """A class-set guess scored: ``label_set_exact`` and ``label_set_jaccard`` (|guess and truth| / |guess or
    truth|), each also for the class-frequency prior (the classes ``prior_counts`` gives a share of the images).

    Example:
        >>> out = class_set_scores({3, 5}, torch.tensor([3, 5, 3, 1]), torch.full((10,), 0.1))
        >>> out["label_set_exact"], round(out["label_set_jaccard"], 3), out["label_set_jaccard_chance"]
        (0.0, 0.667, 0.4)
    """
    present = {int(c) for c in truth_labels.unique()}
    prior = {c for c, k in prior_counts(frequencies, len(truth_labels)).items() if k > 0}

    def jaccard(guess: set[int]) -> float:
        return len(guess & present) / len(guess | present) if guess | present else 1.0

    return {LABEL_SET_EXACT.key: float(predicted == present), f"{LABEL_SET_EXACT.key}_chance": float(prior == present),
            LABEL_SET_JACCARD.key: jaccard(predicted), f"{LABEL_SET_JACCARD.key}_chance": jaccard(prior),
            "inferred_classes": sorted(predicted), NUM_TRUE.key: len(truth_labels)}


def proportion_scores(proportions: Mapping[int, float], truth_labels: torch.Tensor, frequencies: torch.Tensor,
                      inferred_set: set[int]) -> dict[str, Any]:
    """Inferred class proportions scored by their total variation distance from the true ones
    (``class_proportion_error``, 0 exact, 1 disjoint), against a prior that knows only the class frequencies
    (``_chance``: the population's shares of the scored classes) and against the uniform mixture of the inferred class
    set (``_set``: what the class set alone gives). Classes outside ``proportions`` count as inferred 0.

    Example:
        >>> out = proportion_scores({0: 0.7, 1: 0.3, 2: 0.0}, torch.tensor([0, 0, 0, 1]), torch.ones(3) / 3, {0, 1})
        >>> round(out["class_proportion_error"], 3), round(out["class_proportion_error_chance"], 3)
        (0.05, 0.417)
        >>> round(out["class_proportion_error_set"], 3)
        0.25
    """
    classes = sorted(set(proportions) | {int(c) for c in truth_labels.unique()})
    n = len(truth_labels)
    true = np.array([float((truth_labels == c).sum()) / n for c in classes])
    scored = [c for c in classes if c in proportions]
    prior = np.array([float(frequencies[c]) if c in proportions else 0.0 for c in classes])
    prior = prior / prior.sum() if prior.sum() > 0 else prior

    def tv(guess: np.ndarray) -> float:
        return float(0.5 * np.abs(guess - true).sum())

    found = np.array([float(proportions.get(c, 0.0)) for c in classes])
    uniform = np.array([1.0 / len(inferred_set) if c in inferred_set else 0.0 for c in classes])
    return {CLASS_PROPORTION_ERROR.key: tv(found), CLASS_PROPORTION_ERROR_CHANCE.key: tv(prior),
            CLASS_PROPORTION_ERROR_SET.key: tv(uniform),
            "inferred_proportions": {str(c): round(float(proportions[c]), 4) for c in scored}}
