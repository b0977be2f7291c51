"""Hostile files and sizes (issue 45): a store vouches for itself only with its results folder's key, only regular
files are read where results, stores and payloads are read, and declared sizes are bounded before allocation."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from privbench.audit.memory import check_memory, check_working_set, inversion_bytes
from privbench.audit.resume import finished_runs
from privbench.errors import ConfigError, StoreError
from privbench.payloads import LocalTraining, Payload, PayloadStore
from privbench.payloads.encoding import MAX_ENTRIES, decode
from privbench.payloads.signing import KEY, SIGNATURE
from privbench.regular import RefusedFile, read_hashed
from privbench.report.collect import collect
from privbench.schema import Flag, section_rules
from privbench.tensor_files import MAX_RATIO, model_bound, named_tensors

CONFIGS = Path(__file__).resolve().parents[1] / "privbench" / "conf"


@pytest.fixture
def own_keys(tmp_path, monkeypatch):
    """Keys other tests left in folders above ``tmp_path`` are not this test's: finding a key stops at it."""
    from privbench.payloads import signing
    from privbench.payloads import store as store_module

    nearest = signing.find_key

    def inside(at: Path) -> Path | None:
        key = nearest(at)
        return key if key is not None and tmp_path in key.parents else None

    monkeypatch.setattr(signing, "find_key", inside)
    monkeypatch.setattr(store_module, "find_key", inside)


def _store(tmp_path: Path) -> tuple[Path, str]:
    """A store in a results folder, signed with that folder's key as an audit's is."""
    from privbench.payloads.signing import results_key

    root = tmp_path / "results" / "run" / "payloads"
    results_key(root.parent)
    store = PayloadStore(root)
    payload = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
                                   tensors={"w": torch.arange(6.0).reshape(2, 3)},
                                   training=LocalTraining(lr=0.1, steps=1, batch_size=4, num_samples=4))
    store.add(payload, keep=True, truth=[1])
    store.flush()
    return root, payload.id


def _rewrite_index(root: Path, edit) -> None:
    """Edit the index and recompute its own sha256, as anyone who can write the store can."""
    index = json.loads((root / "index.json").read_text())
    edit(index)
    text = json.dumps(index, indent=1)
    (root / "index.json").write_text(text)
    (root / "index.json.sha256").write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")


def test_a_forged_training_record_with_a_recomputed_sha256_is_refused(tmp_path, own_keys):
    root, pid = _store(tmp_path)
    key = tmp_path / "results" / "run" / KEY
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600 and not (root / KEY).exists()
    assert PayloadStore.open(root).load(pid).training.lr == 0.1  # the honest store opens
    _rewrite_index(root, lambda index: index[0]["training"].update(lr=1e-6))
    with pytest.raises(StoreError, match="changed after it was signed"):
        PayloadStore.open(root)
    assert PayloadStore.open(root, trusted=True).load(pid).training.lr == 1e-6  # only as the user vouches


def test_a_store_without_its_key_or_signature_is_refused_unless_trusted(tmp_path, own_keys):
    root, pid = _store(tmp_path)
    moved = tmp_path / "elsewhere" / "payloads"
    moved.parent.mkdir()
    root.rename(moved)
    with pytest.raises(StoreError, match=f"no {KEY} in a folder above it"):
        PayloadStore.open(moved)
    (tmp_path / "results" / "run" / KEY).rename(tmp_path / "elsewhere" / KEY)
    assert PayloadStore.open(moved).load(pid).round == 0  # the key travels with it: verified again
    (moved / SIGNATURE).unlink()
    with pytest.raises(StoreError, match=f"{SIGNATURE} is missing"):
        PayloadStore.open(moved)
    PayloadStore.open(moved, trusted=True).load(pid)


def test_a_trusted_store_still_checks_its_tensors(tmp_path):
    root, pid = _store(tmp_path)
    path = root / f"{pid}.safetensors"
    save_file({"w": torch.full((2, 3), float("nan"))}, str(path), metadata={"kind": "gradient"})
    _rewrite_index(root, lambda index: index[0].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
    with pytest.raises(StoreError, match="w holds NaN or infinite values"):
        PayloadStore.open(root, trusted=True).load(pid)


@pytest.mark.parametrize("edit, message", [
    (lambda i: i[0].update(names="w"), "names are not a list"),
    (lambda i: i[0].update(nbytes="24"), "round or nbytes"),
    (lambda i: i[0].update(shapes={"w": [2, -3]}), "shape of 'w'"),
    (lambda i: i[0].update(sha256="zz"), "sha256 is not 64 hex"),
    (lambda i: i[0].update(training=[1]), "training is not an object"),
    (lambda i: i[0]["training"].update(lr="fast", bogus=1), "does not read as a payload"),
    (lambda i: i[0].pop("kind"), "kind is not a string"),
    (lambda i: i.__setitem__(0, 7), "not an object"),
])
def test_a_malformed_record_is_one_line(tmp_path, edit, message):
    root, _ = _store(tmp_path)
    _rewrite_index(root, edit)
    with pytest.raises(StoreError, match="is malformed") as info:
        PayloadStore.open(root, trusted=True)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_payload_that_is_a_device_a_pipe_or_too_big_is_refused_before_reading(tmp_path):
    root, pid = _store(tmp_path)
    path = root / f"{pid}.safetensors"
    path.unlink()
    path.symlink_to("/dev/zero")
    with pytest.raises(StoreError, match="outside"):
        PayloadStore.open(root).load(pid)
    path.unlink()
    os.mkfifo(path)  # would hang a plain read
    with pytest.raises(StoreError, match="not a regular file"):
        PayloadStore.open(root).load(pid)
    path.unlink()
    path.write_bytes(b"x" * (2**20))  # 1 MiB where the index declares 24 bytes of tensors
    with pytest.raises(StoreError, match="more than the"):
        PayloadStore.open(root).load(pid)


def test_a_read_stops_at_its_cap_and_hashes_what_it_read(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert read_hashed(path, 3) == (b"abc", hashlib.sha256(b"abc").hexdigest())
    with pytest.raises(RefusedFile, match="more than the 2 allowed"):
        read_hashed(path, 2)


def test_pipes_and_devices_under_results_are_passed_over(tmp_path):
    results = tmp_path / "results"
    (results / "a").mkdir(parents=True)
    (results / "b").mkdir()
    os.mkfifo(results / "a" / "metrics.json")  # a plain read waits for a writer forever
    (results / "b" / "metrics.json").symlink_to("/dev/zero")  # a plain read never ends
    (results / "c").mkdir()
    (results / "c" / "metrics.json").write_text(json.dumps({"run": {"config_key": "k", "fl": "fedavg"}}))
    assert [folder.name for folder, _ in finished_runs(results)] == ["c"]
    assert list(collect(results)["run_dir"]) == ["c"]


def _quantized(shape: list[int], *, bits: str = "4", low: float = 0.0, high: float = 1.0, codes: int = 1) -> Payload:
    tensors = {"w#codes": torch.zeros(codes, dtype=torch.uint8), "w#range": torch.tensor([low, high]),
               "w#shape": torch.tensor(shape, dtype=torch.long)}
    payload = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors=tensors)
    payload.encoding = f"quantized:{bits}/values"
    return payload


@pytest.mark.parametrize("payload, base, message", [
    (_quantized([40000, 40000]), {"w": torch.zeros(2)}, "declares shape [40000, 40000], the model's is [2]"),
    (_quantized([40000, 40000, 40000]), None, f"at most {MAX_ENTRIES:,} entries"),
    (_quantized([2], bits="0"), None, "declares 0 bits"),
    (_quantized([2], low=float("nan")), None, "is not two finite numbers"),
    (_quantized([2], low=2.0, high=1.0), None, "lowest first"),
    (_quantized([100], codes=1), None, "needs 50 bytes"),
])
def test_a_declared_size_or_range_is_bounded_before_decoding(payload, base, message):
    with pytest.raises(ValueError) as info:
        decode(payload, base)
    assert message in str(info.value)


def test_an_honest_quantized_message_still_decodes():
    payload = _quantized([2], bits="4", low=-1.0, high=1.0, codes=1)
    assert decode(payload, {"w": torch.zeros(2)}).tensors["w"].tolist() == [-1.0, -1.0]


def test_a_zip_bomb_and_a_file_larger_than_its_model_are_refused(tmp_path):
    torch.save({"w": torch.zeros(1000)}, tmp_path / "plain.pt")
    with zipfile.ZipFile(tmp_path / "plain.pt") as source, zipfile.ZipFile(tmp_path / "bomb.pt", "w") as bomb:
        for entry in source.infolist():
            data = source.read(entry) if not entry.filename.endswith("/0") else bytes(64 * 2**20)
            bomb.writestr(entry.filename, data, compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(ConfigError, match=f"more than {MAX_RATIO} times"):
        named_tensors(tmp_path / "bomb.pt")
    model = torch.nn.Linear(2, 2)  # 6 numbers: 48 bytes in float64, and 1 MiB
    torch.save({"w": torch.zeros(2**19)}, tmp_path / "big.pt")
    with pytest.raises(ConfigError, match=f"more than the {model_bound(model):,}"):
        named_tensors(tmp_path / "big.pt", limit=model_bound(model))
    assert named_tensors(tmp_path / "plain.pt", limit=model_bound(torch.nn.Linear(100, 10)))["w"].shape == (1000,)


def test_an_attack_working_set_is_estimated_from_its_settings(monkeypatch):
    from privbench.attacks.active.imprint import ImprintAttack
    from privbench.attacks.membership.lira import LiRA
    from privbench.audit import memory

    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**30)  # half of it, 4 GiB, may be taken

    model = torch.nn.Linear(784, 10)  # 7,850 weights
    with pytest.raises(ConfigError, match="attack.shadows=100000: 100000 shadow models of 7,850 weights would need about 11.7 GiB"):
        check_working_set(LiRA(shadows=100_000), model, (1, 28, 28))
    with pytest.raises(ConfigError, match="attack.bins=100000"):
        check_working_set(ImprintAttack(bins=100_000), model, (3, 32, 32))  # 9.8 GB
    check_working_set(LiRA(shadows=64), model, (1, 28, 28))  # the default fits: 8 MB
    assert inversion_bytes(problems=1, images=1, image_shape=(1, 2, 2), params=1, steps=3, batch=1) == 16 * (12 + 2 + 3 * 18)
    with pytest.raises(ConfigError, match="x: would need about 1.0 GiB"):
        check_memory(2**30, "x:", available=2**30)


def _declared_flags(sections: set[str]) -> set[str]:
    """The keys of ``sections`` that a constructor reading them (the ``_target_`` of an option of the section's
    group, or the section's own class) declares a boolean (``schema.Flag``)."""
    out = set()
    for section in sections:
        files = sorted((CONFIGS / section).glob("*.yaml"))
        nodes = [node for f in files if isinstance(node := yaml.safe_load(f.read_text()), dict)] or [{}]
        out |= {f"{section}.{key}" for node in nodes for key, rule in section_rules(section, node).items()
                if isinstance(rule, Flag)}
    return out


def test_every_boolean_of_the_shipped_configs_is_declared_a_boolean_where_it_is_read():
    found = set()

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif isinstance(node, bool):
            found.add(prefix.rstrip("."))

    roots = [CONFIGS, *(CONFIGS.parents[1] / "studies").iterdir()]
    for root in (r for r in roots if r.is_dir()):
        for path in root.rglob("*.yaml"):
            rel = path.relative_to(root)
            if rel.parts[0] == "hydra":
                continue
            text = path.read_text()
            node = yaml.safe_load(text) or {}
            node.pop("defaults", None)
            node.pop("hydra", None)
            package = "" if "@package _global_" in text or len(rel.parts) == 1 else ".".join(rel.parts[:-1]) + "."
            walk(node, package)
    assert {"attack.unroll", "fl.gene.adaptive", "metrics.lpips", "resume"} <= found
    declared = _declared_flags({key.split(".")[0] for key in found if "." in key}) | {"resume"}  # the root's own
    assert not sorted(found - declared)


def test_a_results_folder_inside_another_reuses_its_key_and_a_key_others_can_read_is_refused(tmp_path, own_keys):
    """A store signed under results folder R still verifies after a run with results_dir R/sub made its key (the
    key above is reused, none is put in front of it); a key readable by others is refused."""
    from privbench.payloads.signing import find_key, results_key

    root, pid = _store(tmp_path)
    outer = tmp_path / "results" / "run" / KEY
    assert results_key(tmp_path / "results" / "run" / "sub") == results_key(tmp_path / "results" / "run")
    assert find_key(root) == outer and not (tmp_path / "results" / "run" / "sub" / KEY).exists()
    assert PayloadStore.open(root).load(pid).round == 0
    outer.chmod(0o644)
    with pytest.raises(StoreError, match="readable by you alone"):
        PayloadStore.open(root)

