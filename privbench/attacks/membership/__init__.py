"""Membership: record-level (loss tests, LiRA, RMIA), source (which client holds a record) and participation
(did a client take part in an aggregate)."""
