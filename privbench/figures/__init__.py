"""Every reported figure, specified once, one module per family (``reconstruction``, ``labels``, ``membership``,
``one_run``, ``active``, ``defense``, ``utility``): its key in ``metrics.json``, label and unit, which direction means
more leakage, its range and format. The CLI summary, ``metrics.csv``, the multirun table and the report's columns,
intervals, verdicts and plots read these specs; no other module spells a figure's key.
"""
from __future__ import annotations

from privbench.figures.active import (
    ATTRIBUTED_FRACTION,
    CRAFTED_UPLOADED,
    DOWNLOAD_FLAGGED,
    MISATTRIBUTED,
    VICTIM_ATTRIBUTED,
)
from privbench.figures.defense import (
    CLIENT_EPSILON,
    CLIENT_EPSILON_CANARY,
    EPSILON,
    EPSILON_ACCOUNTED,
    EPSILON_MAX,
    MIA_TPR_BOUND_01,
    MIA_TPR_BOUND_1,
)
from privbench.figures.labels import (
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CLASS_PROPORTION_ERROR_SET,
    LABEL_COUNT_ERROR,
    LABEL_COUNT_ERROR_CHANCE,
    LABEL_COUNTS_EXACT,
    LABEL_COUNTS_EXACT_CHANCE,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
    LABEL_SET_JACCARD,
    LABEL_SET_JACCARD_CHANCE,
)
from privbench.figures.membership import (
    MIA_AUC,
    MIA_AUC_INFORMED,
    MIA_MEMBERS,
    MIA_NON_MEMBERS,
    MIA_TPR_01,
    MIA_TPR_1,
    MIA_TPR_1_INFORMED,
    SOURCE_ACCURACY,
    SOURCE_CHANCE,
    SOURCE_CHANCE_INFORMED,
)
from privbench.figures.one_run import (
    CANARY_TPR_BOUND_01,
    CANARY_TPR_BOUND_1,
    EPSILON_CLAIMED,
    EPSILON_LOWER,
    EPSILON_LOWER_FDP,
    EPSILON_TIGHT,
)
from privbench.figures.reconstruction import (
    CERTIFIED,
    CERTIFIED_WRONG,
    LABEL_ACCURACY,
    LPIPS_BEST,
    LPIPS_CHANCE,
    LPIPS_GAIN,
    LPIPS_MEAN,
    MSE_MEAN,
    NUM_RECONSTRUCTED,
    NUM_TRUE,
    PROJECTION_PSNR_MEAN,
    PSNR_BEST,
    PSNR_CHANCE,
    PSNR_CHANCE_INFORMED,
    PSNR_CHANCE_UNINFORMED,
    PSNR_GAIN,
    PSNR_MEAN,
    PSNR_MEDIAN,
    PSNR_MEDIAN_GAIN,
    RECOVERED_FRACTION,
    RECOVERED_FRACTION_CHANCE,
    SSIM_BEST,
    SSIM_CHANCE,
    SSIM_GAIN,
    SSIM_MEAN,
)
from privbench.figures.spec import MISSING as MISSING
from privbench.figures.spec import Figure
from privbench.figures.spec import formatted as formatted
from privbench.figures.utility import (
    ACCURACY,
    AGNOSTIC_ACCURACY,
    CLUSTER_RAND_INDEX,
    DOWNLINK_BYTES,
    DOWNLOADED_ACCURACY,
    GLOBAL_ACCURACY,
    PERSONAL_ACCURACY,
    TOTAL_BYTES,
    TOTAL_RATIO,
    UPLINK_BYTES,
)

#: The report's figure columns, in order (NaN where a run did not measure one, never 0).
REPORTED = (PSNR_MEAN, PSNR_CHANCE, PSNR_CHANCE_UNINFORMED, PSNR_CHANCE_INFORMED, PSNR_GAIN, PSNR_MEDIAN, PSNR_MEDIAN_GAIN,
            RECOVERED_FRACTION,
            RECOVERED_FRACTION_CHANCE, CERTIFIED, CERTIFIED_WRONG, ATTRIBUTED_FRACTION, VICTIM_ATTRIBUTED, MISATTRIBUTED, DOWNLOAD_FLAGGED, CRAFTED_UPLOADED, EPSILON_LOWER, EPSILON_CLAIMED, EPSILON_LOWER_FDP,
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
#: in order: a run's leak verdict is read from the first it measured, in its leak direction, as a paired difference
#: (the informed chance first where the game has one: what the class alone gives the test).
HEADLINES: tuple[tuple[Figure, Figure | float], ...] = (
    (PSNR_GAIN, 0.0), (EPSILON_LOWER, 0.0), (MIA_AUC, MIA_AUC_INFORMED), (MIA_AUC, 0.5),
    (SOURCE_ACCURACY, SOURCE_CHANCE_INFORMED), (SOURCE_ACCURACY, SOURCE_CHANCE),
    (LABEL_COUNT_ERROR, LABEL_COUNT_ERROR_CHANCE), (CLASS_PROPORTION_ERROR, CLASS_PROPORTION_ERROR_CHANCE),
    (RECOVERED_FRACTION, RECOVERED_FRACTION_CHANCE))
#: Derived columns of the report's tables: the leak verdict and the number of runs.
LEAKS = "leaks"
RUNS = "runs"
#: ``table.md`` and the HTML summary, in order (all-missing columns are left out); the leak verdict follows the gain.
#: Accuracy has two columns, never one: each client's own model, and the model it holds after its download.
TABLE = (PSNR_GAIN, LEAKS, PSNR_MEDIAN_GAIN, RECOVERED_FRACTION, CERTIFIED, CERTIFIED_WRONG, ATTRIBUTED_FRACTION, VICTIM_ATTRIBUTED, DOWNLOAD_FLAGGED, CRAFTED_UPLOADED, EPSILON_LOWER, EPSILON_CLAIMED,
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
#: The table a multirun ends with: (figure, header), the leak verdict after the gain; each formatted by its spec.
MULTIRUN: tuple[tuple[Figure | str, str], ...] = (
    (PSNR_MEAN, "PSNR"), (PSNR_GAIN, "gain"), (LEAKS, LEAKS), (PERSONAL_ACCURACY, "own acc"),
    (DOWNLOADED_ACCURACY, "dl acc"), (TOTAL_BYTES, "bytes"), (EPSILON, "eps"), (EPSILON_ACCOUNTED, "eps acc"),
    (MIA_AUC, "MIA AUC"), (MIA_TPR_1, "TPR@1%"))
#: Figures compared between two arms as paired differences over seeds (``privbench.report.paired``).
PAIRED = (PSNR_GAIN, RECOVERED_FRACTION, ATTRIBUTED_FRACTION, MIA_AUC, MIA_TPR_1, SOURCE_ACCURACY, LABEL_SET_EXACT,
          LABEL_COUNT_ERROR, CLASS_PROPORTION_ERROR, EPSILON_LOWER, PERSONAL_ACCURACY, DOWNLOADED_ACCURACY)
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


