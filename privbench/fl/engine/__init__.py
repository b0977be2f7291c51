"""Where the clients' side of a protocol runs: in this process (``engine=inprocess``) or on Flower (``engine=flower``)."""
from privbench.fl.engine.base import ClientSide, ClientTask, ClientTasks, Engine, Launcher, TaskReply
from privbench.fl.engine.inprocess import InProcess

__all__ = ["ClientSide", "ClientTask", "ClientTasks", "Engine", "InProcess", "Launcher", "TaskReply"]
