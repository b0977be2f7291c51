"""Label and property figures: class sets, counts and class proportions, and their priors."""
from __future__ import annotations

from privbench.figures.spec import privacy

LABEL_SET_EXACT = privacy("label_set_exact", "class set exact", fmt="{:.0f}", leak="higher", bounds="unit")
LABEL_SET_EXACT_CHANCE = privacy("label_set_exact_chance", "prior's class set exact", fmt="{:.0f}", bounds="unit")
LABEL_SET_JACCARD = privacy("label_set_jaccard", "class set overlap (Jaccard)", fmt="{:.2f}", leak="higher",
                             bounds="unit")
LABEL_SET_JACCARD_CHANCE = privacy("label_set_jaccard_chance", "prior's class set overlap", fmt="{:.2f}",
                                    bounds="unit")
LABEL_COUNTS_EXACT = privacy("label_counts_exact", "counts exact", fmt="{:.0f}", leak="higher", bounds="unit")
LABEL_COUNTS_EXACT_CHANCE = privacy("label_counts_exact_chance", "prior's counts exact", fmt="{:.0f}", bounds="unit")
LABEL_COUNT_ERROR = privacy("label_count_error", "count error per class", fmt="{:.2f}", leak="lower",
                             bounds="nonnegative")
LABEL_COUNT_ERROR_CHANCE = privacy("label_count_error_chance", "prior's count error per class", fmt="{:.2f}",
                                    bounds="nonnegative")
#: Class proportions inferred (from a subspace): total variation from the true ones, for the attack, a prior that
#: knows only the class frequencies, and the uniform mixture of the inferred class set.
CLASS_PROPORTION_ERROR = privacy("class_proportion_error", "class proportions error (total variation)",
                                  fmt="{:.3f}", leak="lower", bounds="unit")
CLASS_PROPORTION_ERROR_CHANCE = privacy("class_proportion_error_chance", "prior's class proportions error",
                                         fmt="{:.3f}", bounds="unit")
CLASS_PROPORTION_ERROR_SET = privacy("class_proportion_error_set", "class proportions error, uniform over the set",
                                      fmt="{:.3f}", bounds="unit")
