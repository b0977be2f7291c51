"""Every reported figure, specified once: its key in ``metrics.json``, label and unit, which direction means
more leakage, its range and format. The CLI summary, ``metrics.csv``, the multirun table and the report's
columns, intervals and plots read these specs; no other module spells a figure's key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

#: How every output (summary, tables, HTML) shows a value that was not measured.
MISSING = "-"


@dataclass(frozen=True)
class Figure:
    """One reported figure.

    Attributes:
        key: its name in ``metrics.json`` (and a column of ``metrics.csv`` and the report's tables).
        section: the ``metrics.json`` section it is in (``privacy``, ``utility``, ``bytes``, ``defense``).
        label: how the report names it, with its unit.
        unit: its unit (``dB``, ``B``, or empty).
        fmt: how tables format it.
        leak: which direction means more leakage (``higher``/``lower``; None for figures that measure no leakage).
        bounds: ``unit`` (cannot leave [0, 1]), ``signed_unit`` ([-1, 1], SSIM), ``signed_double`` ([-2, 2], a
            difference of two SSIMs), ``nonnegative`` or ``psnr`` (0 to the 8-bit ceiling, 58.92 dB): the range
            intervals are clipped to.
        best: ``max``/``min``: aggregated over seeds by the best run, not the mean.
    """

    key: str
    section: str
    label: str
    unit: str = ""
    fmt: str = "{:.3g}"
    leak: Literal["higher", "lower"] | None = None
    bounds: Literal["unit", "signed_unit", "signed_double", "nonnegative", "psnr"] | None = None
    best: Literal["max", "min"] | None = None

    def __str__(self) -> str:
        return self.key

    def of(self, metrics: dict[str, Any]) -> Any:
        """This figure's value in a ``metrics.json`` (None when it was not measured)."""
        return metrics.get(self.section, {}).get(self.key)


def _privacy(key: str, label: str, **kw: Any) -> Figure:
    return Figure(key, "privacy", label, **kw)


PSNR_MEAN = _privacy("psnr_mean", "PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
PSNR_CHANCE = _privacy("psnr_chance", "chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
#: The chance levels behind ``psnr_chance`` (the strongest of them): reconstructions that know nothing of the victim
#: (the test split's mean image, random test images), and ones that know its classes (each class's test mean image).
PSNR_CHANCE_UNINFORMED = _privacy("psnr_chance_uninformed", "uninformed chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
PSNR_CHANCE_INFORMED = _privacy("psnr_chance_informed", "class-informed chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
#: Record-level: the share of the message's true images whose matched reconstruction passes metrics.recovered_*.
RECOVERED_FRACTION = _privacy("recovered_fraction", "images recovered", fmt="{:.3f}", leak="higher", bounds="unit")
RECOVERED_FRACTION_CHANCE = _privacy("recovered_fraction_chance", "chance images recovered", fmt="{:.3f}",
                                     bounds="unit")
#: An active server's round: whether the victim's own check of the download flagged it (``defenses.detector``).
DOWNLOAD_FLAGGED = _privacy("download_flagged", "download flagged by the client", fmt="{:.2f}", bounds="unit")
#: An active server's learnGene round: whether GENE-FL's layer choice uploaded the crafted layer.
CRAFTED_UPLOADED = _privacy("crafted_layer_uploaded", "crafted layer uploaded", fmt="{:.2f}", bounds="unit")
#: A one-run DP audit (Steinke et al. 2023): its lower bound on epsilon at its confidence, and the claim it tests.
EPSILON_LOWER = _privacy("epsilon_lower_bound", "empirical epsilon (one-run lower bound)", fmt="{:.2f}",
                         bounds="nonnegative")
EPSILON_CLAIMED = _privacy("epsilon_claimed", "claimed epsilon (audited round)", fmt="{:.2f}", bounds="nonnegative")
#: The same run read through f-DP (Mahloujifar et al. 2025), and the round's tight epsilon (its privacy loss
#: distribution) it is measured against.
EPSILON_LOWER_FDP = _privacy("epsilon_lower_bound_fdp", "empirical epsilon (one-run f-DP lower bound)", fmt="{:.2f}",
                             bounds="nonnegative")
EPSILON_TIGHT = _privacy("epsilon_claimed_tight", "tight epsilon (audited round, PLD)", fmt="{:.2f}",
                         bounds="nonnegative")
#: The audited round's f-DP bound: the highest TPR any test of one canary (one record) can reach against its releases.
CANARY_TPR_BOUND_1 = _privacy("canary_tpr_bound_1pct", "TPR bound at FPR 1 % (audited round, f-DP)", fmt="{:.3f}",
                              bounds="unit")
CANARY_TPR_BOUND_01 = _privacy("canary_tpr_bound_0_1pct", "TPR bound at FPR 0.1 % (audited round, f-DP)",
                               fmt="{:.3f}", bounds="unit")
PSNR_GAIN = _privacy("psnr_gain", "PSNR gain over chance (dB)", unit="dB", fmt="{:+.2f}", leak="higher")
PSNR_MEDIAN = _privacy("psnr_median", "median image PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
#: The median matched image's PSNR over the chance PSNR: half the true images are rebuilt at least this far above it.
PSNR_MEDIAN_GAIN = _privacy("psnr_median_gain", "median image's gain over chance (dB)", unit="dB", fmt="{:+.2f}",
                            leak="higher")
PSNR_BEST = _privacy("psnr_best", "best PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", best="max", bounds="psnr")
SSIM_MEAN = _privacy("ssim_mean", "SSIM", fmt="{:.3f}", leak="higher", bounds="signed_unit")
SSIM_CHANCE = _privacy("ssim_chance", "chance SSIM", fmt="{:.3f}", bounds="signed_unit")
SSIM_GAIN = _privacy("ssim_gain", "SSIM gain", fmt="{:+.3f}", leak="higher", bounds="signed_double")
SSIM_BEST = _privacy("ssim_best", "best SSIM", fmt="{:.3f}", leak="higher", best="max")
LPIPS_MEAN = _privacy("lpips_mean", "LPIPS", fmt="{:.3g}", leak="lower", bounds="nonnegative")
LPIPS_CHANCE = _privacy("lpips_chance", "chance LPIPS", fmt="{:.3g}", bounds="nonnegative")
LPIPS_GAIN = _privacy("lpips_gain", "LPIPS gain", fmt="{:+.3g}", leak="higher")
LPIPS_BEST = _privacy("lpips_best", "best LPIPS", fmt="{:.3g}", leak="lower", best="min")
MSE_MEAN = _privacy("mse_mean", "MSE", fmt="{:.3g}", leak="lower", bounds="nonnegative")
NUM_RECONSTRUCTED = _privacy("num_reconstructed", "rebuilt images", fmt="{}", bounds="nonnegative")
NUM_TRUE = _privacy("num_true", "true images", fmt="{}", bounds="nonnegative")
LABEL_ACCURACY = _privacy("label_accuracy", "label accuracy", fmt="{:.2f}", leak="higher", bounds="unit")
PROJECTION_PSNR_MEAN = _privacy("projection_psnr_mean", "projection PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
LABEL_SET_EXACT = _privacy("label_set_exact", "class set exact", fmt="{:.0f}", leak="higher", bounds="unit")
LABEL_SET_EXACT_CHANCE = _privacy("label_set_exact_chance", "prior's class set exact", fmt="{:.0f}", bounds="unit")
LABEL_SET_JACCARD = _privacy("label_set_jaccard", "class set overlap (Jaccard)", fmt="{:.2f}", leak="higher",
                             bounds="unit")
LABEL_SET_JACCARD_CHANCE = _privacy("label_set_jaccard_chance", "prior's class set overlap", fmt="{:.2f}",
                                    bounds="unit")
LABEL_COUNTS_EXACT = _privacy("label_counts_exact", "counts exact", fmt="{:.0f}", leak="higher", bounds="unit")
LABEL_COUNTS_EXACT_CHANCE = _privacy("label_counts_exact_chance", "prior's counts exact", fmt="{:.0f}", bounds="unit")
LABEL_COUNT_ERROR = _privacy("label_count_error", "count error per class", fmt="{:.2f}", leak="lower",
                             bounds="nonnegative")
LABEL_COUNT_ERROR_CHANCE = _privacy("label_count_error_chance", "prior's count error per class", fmt="{:.2f}",
                                    bounds="nonnegative")
#: Class proportions inferred (from a subspace): total variation from the true ones, for the attack, a prior that
#: knows only the class frequencies, and the uniform mixture of the inferred class set.
CLASS_PROPORTION_ERROR = _privacy("class_proportion_error", "class proportions error (total variation)",
                                  fmt="{:.3f}", leak="lower", bounds="unit")
CLASS_PROPORTION_ERROR_CHANCE = _privacy("class_proportion_error_chance", "prior's class proportions error",
                                         fmt="{:.3f}", bounds="unit")
CLASS_PROPORTION_ERROR_SET = _privacy("class_proportion_error_set", "class proportions error, uniform over the set",
                                      fmt="{:.3f}", bounds="unit")
MIA_AUC = _privacy("mia_auc", "membership AUC", fmt="{:.3f}", leak="higher", bounds="unit")
MIA_TPR_1 = _privacy("mia_tpr_at_fpr_1pct", "membership TPR at FPR 1 %", fmt="{:.3f}", leak="higher", bounds="unit")
MIA_TPR_01 = _privacy("mia_tpr_at_fpr_0_1pct", "membership TPR at FPR 0.1 %", fmt="{:.3f}", leak="higher",
                      bounds="unit")
#: A membership game whose candidates differ in class (participation: clients): the same test on records that carry
#: only the class (the informed chance; class-matched games need none).
MIA_AUC_INFORMED = _privacy("mia_auc_informed", "membership AUC knowing only the classes", fmt="{:.3f}", bounds="unit")
MIA_TPR_1_INFORMED = _privacy("mia_tpr_at_fpr_1pct_informed", "membership TPR at FPR 1 % knowing only the classes",
                              fmt="{:.3f}", bounds="unit")
#: Source inference (which client holds a record?): its accuracy, 1 / clients, and a prior that knows the clients'
#: classes (uniform over the clients holding the record's class).
SOURCE_ACCURACY = _privacy("source_accuracy", "source inference accuracy", fmt="{:.3f}", leak="higher", bounds="unit")
SOURCE_CHANCE = _privacy("source_chance", "source chance (1 / clients)", fmt="{:.3f}", bounds="unit")
SOURCE_CHANCE_INFORMED = _privacy("source_chance_informed", "source chance knowing the clients' classes", fmt="{:.3f}",
                                  bounds="unit")
MIA_MEMBERS = _privacy("mia_members", "membership game: members", fmt="{}", bounds="nonnegative")
MIA_NON_MEMBERS = _privacy("mia_non_members", "membership game: non-members", fmt="{}", bounds="nonnegative")
ACCURACY = Figure("accuracy", "utility", "known-client accuracy", fmt="{:.3f}", bounds="unit")
DOWNLOADED_ACCURACY = Figure("downloaded_accuracy", "utility", "downloaded-model accuracy", fmt="{:.3f}", bounds="unit")
GLOBAL_ACCURACY = Figure("global_accuracy", "utility", "global-model accuracy", fmt="{:.3f}", bounds="unit")
PERSONAL_ACCURACY = Figure("personal_accuracy", "utility", "own-model accuracy", fmt="{:.3f}", bounds="unit")
CLUSTER_RAND_INDEX = Figure("cluster_rand_index", "utility", "clusters vs class sets (Rand)", fmt="{:.3f}",
                            bounds="unit")
AGNOSTIC_ACCURACY = Figure("agnostic_accuracy_learngene", "utility", "agnostic accuracy", fmt="{:.3f}", bounds="unit")
UPLINK_BYTES = Figure("uplink_bytes", "bytes", "uplink (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
DOWNLINK_BYTES = Figure("downlink_bytes", "bytes", "downlink (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
TOTAL_BYTES = Figure("total_bytes", "bytes", "total (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
TOTAL_RATIO = Figure("total_ratio", "bytes", "total bytes vs FedAvg", fmt="{:.3f}", bounds="nonnegative")
#: The victim's epsilon: inf when a read of its data is released with no accounted mechanism (``defense.cover``);
#: what its accountant recorded is ``epsilon_accounted`` either way.
EPSILON = Figure("epsilon", "defense", "victim epsilon", fmt="{:.2f}", bounds="nonnegative")
EPSILON_ACCOUNTED = Figure("epsilon_accounted", "defense", "victim epsilon, accounted releases only", fmt="{:.2f}",
                           bounds="nonnegative")
EPSILON_MAX = Figure("epsilon_max", "defense", "largest epsilon", fmt="{:.2f}", bounds="nonnegative")
#: The f-DP bound of the victim's DP-SGD releases: the highest membership TPR any test can reach at that FPR.
MIA_TPR_BOUND_1 = Figure("mia_tpr_bound_1pct", "defense", "TPR bound at FPR 1 % (f-DP)", fmt="{:.3f}", bounds="unit")
MIA_TPR_BOUND_01 = Figure("mia_tpr_bound_0_1pct", "defense", "TPR bound at FPR 0.1 % (f-DP)", fmt="{:.3f}",
                          bounds="unit")

#: Client-level DP (``aggregation=dpfedavg``): the accountant's epsilon over the rounds run (add/remove one client),
#: and what canary clients measured of the mechanism in the same run (a lower bound of it, with its interval).
CLIENT_EPSILON = Figure("client_epsilon", "defense", "client-level epsilon (claimed)", fmt="{:.2f}", bounds="nonnegative")
CLIENT_EPSILON_CANARY = Figure("client_epsilon_canary", "defense", "client-level epsilon (canary clients)", fmt="{:.2f}",
                               bounds="nonnegative")

#: The report's figure columns, in order (NaN where a run did not measure one, never 0).
REPORTED = (PSNR_MEAN, PSNR_CHANCE, PSNR_CHANCE_UNINFORMED, PSNR_CHANCE_INFORMED, PSNR_GAIN, PSNR_MEDIAN, PSNR_MEDIAN_GAIN,
            RECOVERED_FRACTION,
            RECOVERED_FRACTION_CHANCE, DOWNLOAD_FLAGGED, CRAFTED_UPLOADED, EPSILON_LOWER, EPSILON_CLAIMED, EPSILON_LOWER_FDP,
            EPSILON_TIGHT, CANARY_TPR_BOUND_1, CANARY_TPR_BOUND_01, PSNR_BEST, SSIM_MEAN, SSIM_CHANCE, SSIM_GAIN, SSIM_BEST, LPIPS_MEAN,
            LPIPS_CHANCE, LPIPS_BEST, NUM_TRUE, LABEL_ACCURACY, PROJECTION_PSNR_MEAN, LABEL_SET_EXACT,
            LABEL_SET_EXACT_CHANCE, LABEL_SET_JACCARD, LABEL_SET_JACCARD_CHANCE, LABEL_COUNTS_EXACT, LABEL_COUNT_ERROR, LABEL_COUNT_ERROR_CHANCE, CLASS_PROPORTION_ERROR,
            CLASS_PROPORTION_ERROR_CHANCE, CLASS_PROPORTION_ERROR_SET, ACCURACY, PERSONAL_ACCURACY, DOWNLOADED_ACCURACY, CLUSTER_RAND_INDEX, AGNOSTIC_ACCURACY, UPLINK_BYTES, DOWNLINK_BYTES, TOTAL_BYTES,
            EPSILON, EPSILON_ACCOUNTED, EPSILON_MAX, CLIENT_EPSILON, CLIENT_EPSILON_CANARY, MIA_TPR_BOUND_1, MIA_TPR_BOUND_01, MIA_AUC, MIA_TPR_1, MIA_TPR_01, MIA_MEMBERS,
            MIA_AUC_INFORMED, MIA_TPR_1_INFORMED, SOURCE_ACCURACY, SOURCE_CHANCE, SOURCE_CHANCE_INFORMED)
#: Every figure spec.
FIGURES = (*REPORTED, LPIPS_GAIN, MSE_MEAN, NUM_RECONSTRUCTED, LABEL_COUNTS_EXACT_CHANCE, GLOBAL_ACCURACY,
           TOTAL_RATIO, MIA_NON_MEMBERS)

#: Each family's headline figure and the chance level it is read against (a figure of the same run, or a constant),
#: in order: a run's leak verdict is read from the first it measured, in its leak direction, as a paired difference.
HEADLINES: tuple[tuple[Figure, Figure | float], ...] = (
    (PSNR_GAIN, 0.0), (EPSILON_LOWER, 0.0), (MIA_AUC, 0.5), (SOURCE_ACCURACY, SOURCE_CHANCE),
    (LABEL_COUNT_ERROR, LABEL_COUNT_ERROR_CHANCE), (CLASS_PROPORTION_ERROR, CLASS_PROPORTION_ERROR_CHANCE),
    (RECOVERED_FRACTION, RECOVERED_FRACTION_CHANCE))
#: Derived columns of the report's tables: the leak verdict and the number of runs.
LEAKS = "leaks"
RUNS = "runs"
#: ``table.md`` and the HTML summary, in order (all-missing columns are left out); the leak verdict follows the gain.
#: Accuracy has two columns, never one: each client's own model, and the model it holds after its download.
TABLE = (PSNR_GAIN, LEAKS, PSNR_MEDIAN_GAIN, RECOVERED_FRACTION, DOWNLOAD_FLAGGED, CRAFTED_UPLOADED, EPSILON_LOWER, EPSILON_CLAIMED,
         EPSILON_LOWER_FDP, EPSILON_TIGHT, MIA_AUC, MIA_TPR_1,
         MIA_AUC_INFORMED, CANARY_TPR_BOUND_1, SOURCE_ACCURACY, SOURCE_CHANCE_INFORMED, PERSONAL_ACCURACY, DOWNLOADED_ACCURACY,
         TOTAL_BYTES, EPSILON, EPSILON_ACCOUNTED, CLIENT_EPSILON, CLIENT_EPSILON_CANARY, MIA_TPR_BOUND_1, MIA_TPR_01, CANARY_TPR_BOUND_01, MIA_TPR_BOUND_01, MIA_MEMBERS,
         MIA_TPR_1_INFORMED, SOURCE_CHANCE, PSNR_MEAN, PSNR_CHANCE,
         PSNR_CHANCE_UNINFORMED, PSNR_CHANCE_INFORMED, RECOVERED_FRACTION_CHANCE, SSIM_MEAN, SSIM_CHANCE, LPIPS_MEAN, LPIPS_CHANCE,
         LABEL_ACCURACY, LABEL_SET_EXACT, LABEL_SET_JACCARD, LABEL_SET_JACCARD_CHANCE, LABEL_COUNT_ERROR, CLASS_PROPORTION_ERROR,
         CLASS_PROPORTION_ERROR_CHANCE, CLASS_PROPORTION_ERROR_SET, NUM_TRUE, AGNOSTIC_ACCURACY, CLUSTER_RAND_INDEX,
         UPLINK_BYTES, DOWNLINK_BYTES)
#: The HTML page's runs table.
RUN_TABLE = (PSNR_GAIN, PERSONAL_ACCURACY, DOWNLOADED_ACCURACY, TOTAL_BYTES, EPSILON, PSNR_MEAN, PSNR_CHANCE)
#: The table a multirun ends with: (column, header, format), the leak verdict after the gain.
MULTIRUN = ((PSNR_MEAN.key, "PSNR", "{:.1f}"), (PSNR_GAIN.key, "gain", "{:+.1f}"), (LEAKS, LEAKS, "{}"),
            (PERSONAL_ACCURACY.key, "own acc", "{:.3f}"), (DOWNLOADED_ACCURACY.key, "dl acc", "{:.3f}"),
            (TOTAL_BYTES.key, "bytes", "{:,.0f}"), (EPSILON.key, "eps", "{:.2f}"),
            (EPSILON_ACCOUNTED.key, "eps acc", "{:.2f}"), (MIA_AUC.key, "MIA AUC", "{:.3f}"),
            (MIA_TPR_1.key, "TPR@1%", "{:.3f}"))
#: Leakage figures drawn against a swept setting, and utility figures.
LEAKAGE_PLOTS = (PSNR_MEAN, PSNR_GAIN)
#: A DP audit's figures drawn against a swept setting: the canary test's TPR and the empirical epsilon.
AUDIT_PLOTS = (MIA_TPR_1, EPSILON_LOWER)
#: The dotted companion of a plotted figure: what each line's value is measured against, and its legend name.
COMPANIONS = {PSNR_MEAN.key: (PSNR_CHANCE, "chance of each line (dotted)"),
              MIA_TPR_1.key: (CANARY_TPR_BOUND_1, "f-DP bound of each line's audited round (dotted)"),
              EPSILON_LOWER.key: (EPSILON_CLAIMED, "claimed epsilon of each line (dotted)")}
UTILITY_PLOTS = (PERSONAL_ACCURACY, DOWNLOADED_ACCURACY, AGNOSTIC_ACCURACY)

BY_KEY = {f.key: f for f in FIGURES}


def figure(key: str) -> Figure:
    """The spec of ``key``.

    Example:
        >>> figure("psnr_gain").leak, figure("total_bytes").unit
        ('higher', 'B')
    """
    return BY_KEY[key]


def formatted(value: Any, fmt: str) -> str:
    """``value`` formatted with ``fmt``, or ``MISSING`` when it is missing (None or NaN). A number that JSON
    carried as text (``"inf"``: an epsilon without noise) is formatted as the number.

    Example:
        >>> formatted(float("nan"), "{:.2f}"), formatted(0.5, "{:.2f}"), formatted("inf", "{:.2f}")
        ('-', '0.50', 'inf')
    """
    if isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "infinity", "-infinity", "nan"):
        value = float(value)
    return MISSING if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)
