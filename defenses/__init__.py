"""Defences applied to client training or to payloads before they are sent."""
from defenses.none import NoDefense

__all__ = ["NoDefense"]
