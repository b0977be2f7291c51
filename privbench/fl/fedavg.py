"""FedAvg (McMahan et al., 2017): full-model downloads, local SGD, sample-weighted averaging."""
from __future__ import annotations

import copy

from torch import nn

from privbench.data import FederatedData
from privbench.fl.aggregate import aggregate
from privbench.fl.local import accuracy, parameters_of
from privbench.fl.protocol import FederatedProtocol, FLResult
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire
from privbench.payloads import Payload


class FedAvg(FederatedProtocol):
    """FedAvg with per-round participant sampling.

    Messages per participant and round: ``global_model`` (down) and ``update`` (up, the
    full model after local training). The victim, in its round, also sends ``gradient``:
    one step's gradient on its victim batch at the model it received.

    Example:
        >>> FedAvg(rounds=3, participants=5, local_epochs=1, lr=0.05, batch_size=32)  # doctest: +ELLIPSIS
        <...FedAvg object at ...>
    """

    name = "fedavg"
    emits = ("global_model", "update", "gradient")

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> FLResult:
        history = []
        for r in self.progress(range(self.rounds), desc="rounds"):
            base = parameters_of(model)
            uploads = []
            for c in self.sample(r, data.num_clients, seed=seed, victim=victim):
                uploads.append(self._client_round(model, base, data, c, r, victim, wire, seed))
            state = aggregate(base, uploads)
            wire.store.flush()
            acc = self.known_accuracy(model, data, lambda c: state)
            model.load_state_dict(state)
            history.append({"round": r, "accuracy": acc, "global_accuracy": accuracy(model, data.test), **wire.totals()})
        last = history[-1]
        return FLResult(model=model, accuracy=last["accuracy"], history=history,
                        extra={"global_accuracy": last["global_accuracy"]})

    def _client_round(self, model, base, data: FederatedData, c: int, r: int, victim: Victim, wire: Wire, seed: int):
        name = f"client{c}"
        down = wire.send(Payload.from_tensors(kind="global_model", round=r, sender="server", receiver=name, tensors=base))
        local = copy.deepcopy(model)
        client_data, truth = data.client(c), data.clients[c]
        if (c, r) == (victim.client, victim.round):
            _, client_data, truth = self.victim_gradient(local, client_data, truth, c, r, victim, wire, down.id, seed)
        steps = self.local_update(local, client_data, client=c, round_=r, seed=seed)
        up = wire.send(Payload.from_tensors(
            kind="update", round=r, sender=name, receiver="server", tensors=parameters_of(local), base=down.id,
            hparams={**self.hparams(), "local_steps": steps, "num_samples": len(client_data)}, truth=truth.tolist(),
        ))
        return len(client_data), up.tensors
