"""Where the clients' side of a protocol runs: in this process (``inprocess``) or on Flower (``flower``)."""
from privbench.fl.engine.base import ENGINES, Engine
from privbench.fl.engine.inprocess import InProcess

__all__ = ["ENGINES", "Engine", "InProcess"]
