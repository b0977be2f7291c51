"""Compressing transforms: the message carries the encoded form, its bytes are the encoding's, readers decode it
to the values a dense transform of the same rule gives."""
from __future__ import annotations

import math

import pytest
import torch

from privbench.audit.plan import plan
from privbench.defenses.compression import StochasticQuantization, TopK
from privbench.defenses.prune import Prune
from privbench.errors import ConfigError
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, LocalTraining, Payload, PayloadStore, kinds_where
from privbench.payloads.encoding import _pack, _unpack, decode
from privbench.victim import Victim


def _update(tensors):
    return Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server", tensors=tensors,
                                base="r0000-global_model-server-client0",
                                training=LocalTraining(lr=0.1, steps=1, batch_size=1, num_samples=1))


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
def test_packed_codes_unpack_exactly(bits):
    codes = torch.randint(0, 2**bits, (1001,), generator=torch.Generator().manual_seed(bits)).numpy()
    packed = _pack(codes, bits)
    assert packed.nbytes == (math.ceil(1001 * bits / 8) if bits <= 8 else 2002)
    assert (_unpack(packed, bits, 1001) == codes).all()


def test_topk_sends_values_and_indices_and_decodes_to_the_dense_pruning():
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(6, 5, generator=g), "b": torch.randn(5, generator=g), "n": torch.tensor([3])}
    up = _update({"w": base["w"] + torch.randn(6, 5, generator=g), "b": base["b"] + torch.randn(5, generator=g),
                  "n": torch.tensor([4])})
    sent = TopK(p=0.2).protect(up, base)
    assert sent.encoding == "sparse/change" and "w#values" in sent.names and "n" in sent.names
    # 6 of 30 and 1 of 5 kept: float32 values and int32 indices, the shapes as int64, the integer tensor as it was
    assert sent.nbytes == (6 + 1) * 8 + (2 + 1) * 8 + 8
    read = decode(sent, base)
    dense = Prune(p=0.2).protect(up, base)  # the same rule, sent dense
    assert read.names == ["w", "b", "n"] and read.nbytes == sent.nbytes
    assert all(torch.allclose(read.tensors[n].float(), dense.tensors[n].float(), atol=1e-6) for n in ("w", "b"))
    assert torch.equal(read.tensors["n"], torch.tensor([4]))


def test_quantisation_is_unbiased_and_uses_its_levels():
    x = torch.linspace(-1, 3, 257)
    p = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors={"g": x})
    draws = torch.stack([decode(StochasticQuantization(bits=2, seed=s).protect(p), None).tensors["g"]
                         for s in range(400)])
    assert len(torch.unique(draws[0])) <= 4  # 2 bits: four levels between the minimum and the maximum
    levels = torch.tensor([-1.0, 1 / 3, 5 / 3, 3.0])
    assert all(float((levels - v).abs().min()) < 1e-5 for v in torch.unique(draws))
    # unbiased: the mean of 400 draws within 4 standard errors (a level spacing of 4/3 over 2 sqrt(400))
    assert (draws.mean(0) - x).abs().max() < 4 * (4 / 3) / (2 * math.sqrt(400))
    sent = StochasticQuantization(bits=4).protect(p)
    assert sent.nbytes == math.ceil(257 * 4 / 8) + 8 + 8  # codes, the float32 range, the shape


def test_a_tampered_encoding_is_refused_in_one_line():
    sent = TopK(p=0.5).protect(_update({"w": torch.ones(4)}), {"w": torch.zeros(4)})
    bad = sent.with_tensors({**sent.tensors, "w#indices": torch.tensor([0, 9], dtype=torch.int32)})
    with pytest.raises(ValueError, match="do not fit its shape"):
        decode(bad, {"w": torch.zeros(4)})
    with pytest.raises(ValueError, match="its base is not known"):
        decode(sent, None)


@pytest.mark.parametrize("defense", [TopK(p=0.3), StochasticQuantization(bits=4)])
@pytest.mark.parametrize("kind", kinds_where(direction="up", aggregate=False))
def test_every_compression_composes_with_every_uplink_kind(defense, kind):
    tensors = {"a": torch.randn(4, 3), "b": torch.randn(3), "n": torch.tensor([7])}
    base = {n: t.clone() for n, t in tensors.items()}
    payload = Payload.from_tensors(kind=kind, round=0, sender="client0", receiver="server", tensors=tensors)
    read = decode(defense.protect(payload, base), base)
    assert read.names == ["a", "b", "n"] and all(read.tensors[n].shape == tensors[n].shape for n in tensors)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_fedavg_run_with_topk_trains_as_with_dense_pruning_for_a_fifth_of_the_bytes(tmp_path, fmnist):
    finals, ups = {}, {}
    for name, transform in (("topk", TopK(p=0.1)), ("prune", Prune(p=0.1))):
        torch.manual_seed(0)
        model = LeNet(in_channels=1, image_size=28, num_classes=10)
        protocol = FedAvg(rounds=2, participants=3, local_epochs=1, lr=0.1, batch_size=64)
        wire = Wire.for_protocol(protocol, PayloadStore(tmp_path / name),
                                 CapturePolicy.build(victim_round=1, victim_client=3), transform=transform)
        finals[name] = protocol.run(model=model, data=fmnist, victim=Victim(client=3, round=1), wire=wire,
                                    seed=0).final
        ups[name] = wire.totals().uplink_bytes
    assert all(torch.allclose(finals["topk"][n], finals["prune"][n], atol=1e-6) for n in finals["prune"])
    # LeNet's 13,426 floats: 10 % kept at 8 bytes (value, index) plus each tensor's shape, against 4 bytes each
    assert 0.2 <= ups["topk"] / ups["prune"] < 0.21


def test_compression_under_secure_aggregation_is_refused(compose_cfg):
    with pytest.raises(ConfigError, match="a compressed upload's parts do not add up"):
        plan(compose_cfg("defense=topk", "aggregation=secagg", "payload=aggregate"))
