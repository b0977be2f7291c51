"""The CI gate: ``--fail-on`` rules read against the audit's figures, an exit status, and a JUnit XML file.

A rule is ``FIGURE>VALUE`` or ``FIGURE>=VALUE`` (``FIGURES``; a figure the audit could not measure fails its rule), or one of the words
``misconfigured`` (any privacy mechanism reported as such) and ``epsilon-above-claim`` (a measured epsilon above the one claimed).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from privbench.errors import ConfigError
from privbench.figures.labels import LABEL_SET_EXACT
from privbench.figures.one_run import EPSILON_CLAIMED
from privbench.figures.reconstruction import PSNR_GAIN

#: The figures a rule may read (means over the audited uploads, one test each; the largest epsilon).
FIGURES = {
    "participation_auc": "client-level membership AUC (did a client take part in the round an aggregate came from), "
                         "over every observed (round, client) pair",
    "membership_auc": "record-level membership AUC (loss change) on a client's upload, mean over uploads",
    "membership_tpr_at_1pct_fpr": "its TPR at 1 % FPR, mean over uploads",
    LABEL_SET_EXACT.key: "share of uploads whose exact class set the label attack recovers",
    "label_count_error_gain": "the class-frequency prior's count error less the label attack's (per class), mean",
    "epsilon_measured": "the largest measured epsilon of any privacy mechanism",
    "epsilon_empirical_lower": "the 99.5 % lower end of the canary clients' empirical epsilon of the app's "
                               "client-level DP (--canaries)",
    "record_epsilon_empirical_lower": "the 99.5 % lower end of the canary records' empirical epsilon of a record "
                                      "in the first SuperNode's DP-SGD (--record-canaries)",
    PSNR_GAIN.key: "the reconstruction's PSNR over chance (dB), mean over the uploads it ran on",
    "class_proportion_gain": "chance's total variation from a client's class shares less the one its reported "
                             "evaluation figures give, mean over the clients whose figures are consistent (0 when "
                             "no client reports a loss or accuracy)",
}
WORDS = {"misconfigured": "a privacy mechanism is misconfigured",
         "epsilon-above-claim": "a measured epsilon is above the epsilon its mechanism claims"}
_RULE = re.compile(r"^([a-z_0-9]+)\s*(>=|>)\s*([-+0-9.eE]+)$")


@dataclass(frozen=True)
class Rule:
    """One ``--fail-on`` rule."""

    text: str
    figure: str
    op: str = ">"
    value: float = math.nan

    @classmethod
    def parse(cls, text: str) -> "Rule":
        text = text.strip()
        if text in WORDS:
            return cls(text, text)
        match = _RULE.match(text)
        if match is None or match.group(1) not in FIGURES:
            raise ConfigError(f"--fail-on {text!r}: expected FIGURE>VALUE with FIGURE one of {', '.join(FIGURES)}, "
                              f"or one of {', '.join(WORDS)}")
        try:
            value = float(match.group(3))
        except ValueError:
            raise ConfigError(f"--fail-on {text!r}: {match.group(3)!r} is not a number") from None
        return cls(text, match.group(1), match.group(2), value)

    def check(self, figures: dict[str, Any]) -> tuple[bool, str]:
        """Whether the rule fails on ``figures`` (the audit's ``gate_figures``), and why, in one line."""
        if self.figure == "misconfigured":
            problems = figures.get("problems", [])
            return bool(problems), (problems[0] if problems else "no mechanism reported misconfigured")
        if self.figure == "epsilon-above-claim":
            claimed = EPSILON_CLAIMED.key
            over = [m for m in figures.get("mechanisms", []) if m.get(claimed) is not None
                    and m.get("epsilon_measured", 0) > m[claimed] * 1.01]
            return bool(over), (f"{over[0]['mechanism']}: measured {over[0]['epsilon_measured']:.3g} > claimed "
                                f"{over[0][claimed]:.3g}" if over else "no measured epsilon above its claim")
        value = figures.get(self.figure)
        if value is None or (isinstance(value, float) and math.isnan(value)):  # a gate cannot pass on no evidence
            return True, f"{self.figure}: not measured in this audit (the report says why), so the rule cannot pass"
        failed = value >= self.value if self.op == ">=" else value > self.value
        return failed, f"{self.figure} = {value:.4g} ({'fails' if failed else 'passes'} {self.op} {self.value:g})"


def junit(rules: list[Rule], results: list[tuple[bool, str]], *, suite: str, seconds: float) -> str:
    """The gate as a JUnit XML test suite: one test case per rule, a failure where it fails."""
    failures = sum(failed for failed, _ in results)
    cases = []
    for rule, (failed, why) in zip(rules, results):
        body = f"<failure message={quoteattr(why)}>{escape(why)}</failure>" if failed else ""
        cases.append(f'  <testcase classname="privbench.audit_app" name={quoteattr(rule.text)}>{body}</testcase>')
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name={quoteattr(suite)} tests="{len(rules)}" '
            f'failures="{failures}" errors="0" time="{seconds:.1f}">\n' + "\n".join(cases) + "\n</testsuite>\n")
