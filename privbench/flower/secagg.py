"""``aggregation=secagg`` on Flower: a round's cohort runs Flower's own ``SecAggPlusWorkflow`` and ``secaggplus_mod``.

The server drives one workflow per cohort (FedAvg's round; each cluster of cluster-FedAvg). The stage that collects
masked vectors carries privbench's own round task to each ClientApp, which trains as usual and hands its upload to
Flower's mod; the mod quantises and masks it, and its plain tensors never leave the node. Every stage's message is
recorded as the payload kind of the same stage in process (``docs/protocol.md``, Secure aggregation), its tensors
the exact bytes Flower sends (keys, ciphertexts, shares and masked vectors as serialised), and the unmasked mean
as the cohort's ``aggregate``.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common.recorddict_compat import fitres_to_recorddict, parameters_to_arrayrecord
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import FedAvg as FlowerFedAvg
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

from privbench.fl.engine import ClientTask, TaskReply
from privbench.fl.wire import Wire
from privbench.flower.capture import CapturingGrid
from privbench.payloads import AggregatePart, LocalTraining, Payload
from privbench.progress import log

#: Checks the clear fields of a node's masked-upload reply (its node id, the fields).
SealedCheck = Callable[[int, dict[str, Any]], None]
#: The fitres metric holding the reply's scalar fields and its upload's declared training (sent in the clear).
FIELDS = "privbench.fields"


def asked(message: Message) -> bool:
    """Whether ``message`` is a stage of Flower's SecAgg+."""
    return RECORD_KEY_CONFIGS in message.content.config_records


def secagg_when_asked(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """A ClientApp mod: SecAgg+ stages go through Flower's ``secaggplus_mod``, every other message to the app."""
    if message.metadata.message_type != "train" or not asked(message):
        return call_next(message, context)
    return secaggplus_mod(message, context, call_next)


def fitres_reply(reply: TaskReply, names: Sequence[str], *, uniform: bool = False) -> RecordDict:
    """A round's reply as the legacy ``FitRes`` Flower's mod masks: the upload's tensors (every name of ``names``,
    in order), its sample count (1 where the cohort is ``uniform``ly averaged), and the reply's fields and training
    record as metrics (in the clear)."""
    upload = reply.payload
    if upload is None or upload.tensors is None:
        raise ValueError("a secure round's reply names no upload")
    missing = [n for n in names if n not in upload.tensors]
    if missing:
        raise ValueError(f"{upload.id} lacks {missing[0]}: Flower's SecAgg+ sums one layout, the whole model")
    arrays = [upload.tensors[n].detach().double().cpu().numpy() for n in names]
    fields = {**reply.fields, "training": json.dumps(upload.training.to_dict() if upload.training else None),
              "base": upload.base or "", "id": upload.id}
    weight = 1 if uniform else int(reply.fields.get("num_samples", 0))
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), weight,
                 {FIELDS: json.dumps(fields)})
    return fitres_to_recorddict(res, keep_input=False)


class _Cohort(FlowerFedAvg):
    """The legacy strategy the workflow asks: the cohort's nodes, and the aggregate kept as it is handed back."""

    def __init__(self, proxies: list[ClientProxy]) -> None:
        super().__init__()
        self.proxies = proxies
        self.results: list[tuple[ClientProxy, FitRes]] = []
        self.parameters: Parameters | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list[
            tuple[ClientProxy, FitIns]]:
        return [(proxy, FitIns(parameters, {})) for proxy in self.proxies]

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> tuple[Parameters | None, dict]:
        self.results = list(results)
        self.parameters = results[0][1].parameters if results else None
        return self.parameters, {}


class _Workflow(SecAggPlusWorkflow):
    """Flower's workflow, its collect stage carrying each node's privbench round task (``contents``)."""

    def __init__(self, contents: dict[int, RecordDict], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.contents = contents

    def setup_stage(self, grid: Any, context: LegacyContext, state: WorkflowState) -> bool:
        ok = super().setup_stage(grid, context, state)
        state.nid_to_fitins = {nid: self.contents[nid] for nid in state.nid_to_fitins}
        return bool(ok)


def _u8(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone() if data else torch.zeros(0, dtype=torch.uint8)


class _Recorder:
    """The grid the workflow talks to: every stage's messages recorded as payloads, then the capturing grid's
    exchange (downloads captured, replies checked)."""

    def __init__(self, grid: CapturingGrid, wire: Wire, names: dict[int, str], *, round_: int,
                 cluster: int | None, check: SealedCheck | None = None) -> None:
        self.grid, self.wire, self.names, self.round, self.cluster = grid, wire, names, round_, cluster
        self.check = check

    def _record(self, kind: str, sender: str, receiver: str, tensors: dict[str, torch.Tensor],
                training: LocalTraining | None = None, base: str | None = None) -> None:
        self.wire.capture(Payload.from_tensors(kind=kind, round=self.round, sender=sender, receiver=receiver,
                                               tensors=tensors, cluster=self.cluster, training=training, base=base))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        for m in messages:
            cfg = m.content.config_records[RECORD_KEY_CONFIGS]
            who, stage = self.names[int(m.metadata.dst_node_id)], str(cfg[Key.STAGE])
            if stage == Stage.SHARE_KEYS:
                keys = {f"{self.names[int(nid)]}.pk{i + 1}": _u8(cast(bytes, k)) for nid, pair in cfg.items()
                        if nid != Key.STAGE for i, k in enumerate(cast(list, pair))}
                self._record("secagg_neighbour_keys", "server", who, keys)
            elif stage == Stage.COLLECT_MASKED_VECTORS:
                sources = cast(list[int], cfg[Key.SOURCE_LIST])
                texts = cast(list[bytes], cfg[Key.CIPHERTEXT_LIST])
                self._record("secagg_forwarded_shares", "server", who,
                             {f"from.{self.names[int(s)]}": _u8(t) for s, t in zip(sources, texts)})
            elif stage == Stage.UNMASK:
                ids = [int(n) for n in cast(list[int], cfg[Key.ACTIVE_NODE_ID_LIST])]
                self._record("secagg_unmask_request", "server", who, {"survivors": torch.tensor(sorted(
                    int(self.names[n].removeprefix("client")) for n in ids))})
        replies = self.grid.send_and_receive(messages)
        for reply in replies:
            cfg = reply.content.config_records[RECORD_KEY_CONFIGS]
            who = self.names[int(reply.metadata.src_node_id)]
            if Key.PUBLIC_KEY_1 in cfg:
                self._record("secagg_public_keys", who, "server", {"pk1": _u8(cast(bytes, cfg[Key.PUBLIC_KEY_1])),
                                                                    "pk2": _u8(cast(bytes, cfg[Key.PUBLIC_KEY_2]))})
            elif Key.CIPHERTEXT_LIST in cfg:
                dsts = cast(list[int], cfg[Key.DESTINATION_LIST])
                texts = cast(list[bytes], cfg[Key.CIPHERTEXT_LIST])
                self._record("secagg_key_shares", who, "server",
                             {f"to.{self.names[int(d)]}": _u8(t) for d, t in zip(dsts, texts)})
            elif Key.MASKED_PARAMETERS in cfg:
                fields = json.loads(str(reply.content.config_records["fitres.metrics"][FIELDS]))
                if self.check is not None:  # its clear fields, before anything of it is recorded
                    self.check(int(reply.metadata.src_node_id), fields)
                training = LocalTraining.from_dict(json.loads(fields["training"])) if fields["training"] != "null" \
                    else None
                masked = cast(list[bytes], cfg[Key.MASKED_PARAMETERS])
                self._record("masked_upload", who, "server", {f"masked.{i}": _u8(b) for i, b in enumerate(masked)},
                             training=training, base=str(fields["base"]) or None)
            elif Key.SHARE_LIST in cfg:
                nids = cast(list[int], cfg[Key.NODE_ID_LIST])
                shares = cast(list[bytes], cfg[Key.SHARE_LIST])
                self._record("secagg_unmask_shares", who, "server",
                             {f"{self.names[int(n)]}.seed": _u8(s) for n, s in zip(nids, shares)})
        return replies


def secure_round(grid: CapturingGrid, wire: Wire, requests: Sequence[ClientTask], messages: Sequence[Message],
                 *, aggregation: Any, names: Sequence[str], base: dict[str, torch.Tensor],
                 check: Callable[[int, dict[str, Any]], None] | None = None) -> list[TaskReply]:
    """Run each cohort of ``requests`` (their ``messages`` as the engine would send them) through Flower's SecAgg+;
    every member's reply carries its cohort's ``aggregate`` (recorded), with its fields as it sent them.
    ``check(i, fields)`` refuses request ``i``'s clear fields before anything of its masked upload is recorded."""
    cohorts: dict[Any, list[int]] = defaultdict(list)
    for i, q in enumerate(requests):
        cohorts[q.fields.get("cluster")].append(i)
    replies: list[TaskReply | None] = [None] * len(requests)
    node_names = {int(m.metadata.dst_node_id): requests[i].name for i, m in enumerate(messages)}
    for cluster, members in cohorts.items():
        round_ = requests[members[0]].round
        group = None if cluster is None else int(cluster)
        if len(members) < 2:
            log.warning("secagg: round %d, cohort %s has one client; SecAgg+ needs two, so its model stays as sent",
                        round_, "all" if group is None else group)
            for i in members:
                replies[i] = TaskReply({}, _empty(requests[i], group))
            continue
        nodes = [int(messages[i].metadata.dst_node_id) for i in members]
        proxies: list[ClientProxy] = [GridClientProxy(n, cast(Any, grid.grid), 0) for n in nodes]
        strategy = _Cohort(proxies)
        context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                                strategy=strategy, client_manager=SimpleClientManager())
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: round_})
        context.state.array_records[MAIN_PARAMS_RECORD] = parameters_to_arrayrecord(
            ndarrays_to_parameters([np.zeros(1)]), keep_input=True)
        workflow = _Workflow({int(messages[i].metadata.dst_node_id): messages[i].content for i in members},
                             num_shares=aggregation.num_shares, reconstruction_threshold=aggregation.threshold,
                             max_weight=1.0 if aggregation.uniform else aggregation.max_weight,
                             clipping_range=aggregation.clip,
                             quantization_range=aggregation.levels, modulus_range=aggregation.modulus)
        index = {int(messages[i].metadata.dst_node_id): i for i in members}
        sealed: SealedCheck | None = None if check is None else (lambda node, fields: check(index[node], fields))
        workflow(cast(Any, _Recorder(grid, wire, node_names, round_=round_, cluster=group, check=sealed)), context)
        if strategy.parameters is None:
            raise RuntimeError(f"Flower's SecAgg+ halted in round {round_} (cohort {cluster}): see Flower's log")
        mean = parameters_to_ndarrays(strategy.parameters)
        tensors = {n: torch.from_numpy(np.asarray(a)).reshape(base[n].shape).to(base[n].dtype)
                   for n, a in zip(names, mean)}
        fields_of = {int(proxy.node_id): json.loads(str(res.metrics[FIELDS])) for proxy, res in strategy.results}
        aggregate = _aggregate(tensors, [fields_of[n] for n in nodes], [requests[i].name for i in members],
                               round_=round_, group=group)
        wire.capture(aggregate)
        for i, n in zip(members, nodes):
            fields = {k: v for k, v in fields_of[n].items() if k in ("num_samples", "layers")}
            replies[i] = TaskReply(fields, aggregate)
    return [r for r in replies if r is not None]


def _empty(request: ClientTask, group: int | None) -> Payload:
    return Payload.from_tensors(kind="aggregate", round=request.round, sender=f"cohort{group or 0}",
                                receiver="server", tensors={}, cluster=group)


def _aggregate(tensors: dict[str, torch.Tensor], fields: Sequence[dict[str, Any]], clients: Sequence[str], *,
               round_: int, group: int | None) -> Payload:
    """The cohort's mean as the server unmasked it, with its members' declared training (``aggregate``)."""
    trainings = [LocalTraining.from_dict(json.loads(f["training"])) if f["training"] != "null" else None
                 for f in fields]
    parts = tuple(AggregatePart(client=c, images=int(f["num_samples"]), num_samples=int(f["num_samples"]),
                                steps=t.steps if t else 1, batch_size=t.batch_size if t else int(f["num_samples"]),
                                names=tuple(tensors)) for c, f, t in zip(clients, fields, trainings))
    training = trainings[0].of_cohort(parts) if trainings[0] is not None else None
    return Payload.from_tensors(kind="aggregate", round=round_, sender=f"cohort{0 if group is None else group}",
                                receiver="server", tensors=tensors, base=str(fields[0]["base"]) or None,
                                cluster=group, training=training)
