"""The audit report: tables, plots and one HTML page built from a results folder's files alone."""
from privbench.report.collect import collect
from privbench.report.table import summarise, to_markdown

__all__ = ["collect", "summarise", "to_markdown"]
