"""The auditor's side of a one-run DP audit: a score per planted canary."""
