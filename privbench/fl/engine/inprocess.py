"""privbench's own engine: every client runs in this process, a round's clients served together."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from privbench.fl.engine.base import ClientSide, ClientTask, ClientTasks, Engine, Launcher, T, TaskReply
from privbench.fl.wire import Wire


class InProcess(Engine, Launcher):
    """Clients run here: messages go straight onto the run's wire; ``fl.vectorise`` can stack a round."""

    name = "inprocess"

    def run(self, protocol: ClientTasks, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        if not requests:
            return []
        tasks = {r.task for r in requests}
        if len(tasks) != 1:
            raise ValueError(f"one task per run, got {sorted(tasks)}")
        return protocol.serve(requests[0].task, requests, side)

    def launch(self, session: Callable[[Engine], T], *, config: str, wire: Wire, num_clients: int,
               num_agnostic: int) -> T:
        return session(self)
