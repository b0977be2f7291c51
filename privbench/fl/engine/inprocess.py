"""privbench's own engine: every client runs in this process, a round's clients served together."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from privbench.errors import PrivbenchError
from privbench.fl.engine.base import ClientSide, ClientTask, ClientTasks, Engine, Launcher, T, TaskReply
from privbench.fl.wire import Wire


class ClientReplyError(PrivbenchError):
    """A client's reply is not what the server planned for it."""


class InProcess(Engine, Launcher):
    """Clients run here: messages go straight onto the run's wire; ``fl.vectorise`` can stack a round. Every reply
    is checked as a remote client's is (``check_reply``): the server's plan, not the client code, is what counts."""

    name = "inprocess"

    def run(self, protocol: ClientTasks, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        if not requests:
            return []
        tasks = {r.task for r in requests}
        if len(tasks) != 1:
            raise ValueError(f"one task per run, got {sorted(tasks)}")
        replies = protocol.serve(requests[0].task, requests, side)
        for request, reply in zip(requests, replies):  # the server checks a client's word here too
            try:
                protocol.check_reply(request, reply, [] if reply.payload is None else [reply.payload], side)
            except (ValueError, KeyError, TypeError) as exc:
                raise ClientReplyError(f"{request.name} sent a reply the server refuses: {exc}") from None
        return replies

    def launch(self, session: Callable[[Engine], T], *, config: str, wire: Wire, num_clients: int,
               num_agnostic: int) -> T:
        return session(self)
