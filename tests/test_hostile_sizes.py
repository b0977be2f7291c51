"""Sizes a hostile file or message declares are refused before anything that large is allocated: an expanded view
in a tensor file (its logical size far above its storage), and a compressed message whose names or declared shapes
would decode to gigabytes."""
from __future__ import annotations

import resource
from pathlib import Path

import pytest
import torch

from privbench.defenses.compression import StochasticQuantization, TopK
from privbench.errors import ConfigError
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.encoding import MAX_ENTRIES, decode
from privbench.tensor_files import named_tensors


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@pytest.mark.parametrize("entries", [10**9, 10**11])
def test_an_expanded_view_is_refused_before_it_is_read(tmp_path: Path, entries: int) -> None:
    path = tmp_path / "expanded.pt"
    torch.save({"conv1.weight": torch.zeros(1).expand(entries)}, path)
    assert path.stat().st_size < 4096
    before = _peak_mib()
    with pytest.raises(ConfigError) as info:
        named_tensors(path)
    assert _peak_mib() - before < 256  # reading 10^9 float32s would take 4 GB
    message = str(info.value)
    assert "\n" not in message and "conv1.weight" in message and f"{4 * entries:,} bytes" in message
    assert "over a storage of 4" in message


def test_views_sharing_one_storage_are_bounded_together(tmp_path: Path) -> None:
    storage = torch.zeros(2**18)  # 1 MiB
    torch.save({f"v{i}": storage[:] for i in range(10)}, tmp_path / "shared.pt")
    with pytest.raises(ConfigError, match="more than the 4,194,304 a file may hold"):
        named_tensors(tmp_path / "shared.pt", limit=4 * 2**20)


def test_honest_files_still_load(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    torch.save(model.state_dict(), tmp_path / "state.pt")  # weight and bias, each its own storage
    whole = torch.randn(10)
    torch.save({"a": whole[:4], "b": whole[4:]}, tmp_path / "slices.pt")  # views within one storage
    assert named_tensors(tmp_path / "state.pt")["weight"].shape == (2, 3)
    assert named_tensors(tmp_path / "slices.pt")["b"].tolist() == whole[4:].tolist()


def _sparse(names: list[str], shape: list[int]) -> Payload:
    tensors = {f"{n}#{part}": t for n in names for part, t in {
        "values": torch.zeros(0), "indices": torch.zeros(0, dtype=torch.int32),
        "shape": torch.tensor(shape, dtype=torch.long)}.items()}
    payload = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors=tensors)
    payload.encoding = "sparse/values"
    return payload


def test_a_name_outside_the_base_is_refused_before_decoding() -> None:
    before = _peak_mib()
    with pytest.raises(ValueError) as info:
        decode(_sparse(["fake"], [16384, 16384]), {"w": torch.zeros(3)})
    assert _peak_mib() - before < 256  # the fake tensor would be 1 GiB of zeros
    assert "fake is not one of the 1 tensors of the model" in str(info.value)


def test_a_payload_decodes_to_at_most_its_bound_in_all() -> None:
    before = _peak_mib()
    with pytest.raises(ValueError) as info:  # without a base: two 1 GiB names refused together, before either
        decode(_sparse(["fake0", "fake1"], [16384, 16384]), None)
    assert _peak_mib() - before < 256
    assert f"with fake1 it decodes to more than the {MAX_ENTRIES:,} entries" in str(info.value)


def test_honest_topk_and_quantized_uploads_still_decode_against_their_base() -> None:
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(6, 5, generator=g), "b": torch.randn(5, generator=g), "n": torch.tensor([3])}
    up = Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server",
                              tensors={"w": base["w"] + 1, "b": base["b"] - 1, "n": torch.tensor([4])},
                              base="r0000-global_model-server-client0",
                              training=LocalTraining(lr=0.1, steps=1, batch_size=1, num_samples=1))
    for transform in (TopK(p=0.2), StochasticQuantization(bits=4, seed=0)):
        read = decode(transform.protect(up, base), base)
        assert read.tensors is not None and read.names == ["w", "b", "n"]
        assert read.tensors["w"].shape == (6, 5) and torch.equal(read.tensors["n"], torch.tensor([4]))
