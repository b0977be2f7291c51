"""Faults: damaged or edited payload stores, concurrent first use of LPIPS, killed sweeps, threads, resumed sweeps."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from privbench.cli import parallel_jobs, set_threads
from privbench.errors import StoreError
from privbench.payloads import Payload, PayloadStore
from privbench.report.collect import collect


def _store(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "payloads"
    store = PayloadStore(root)
    payload = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
                                   tensors={"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)})
    store.add(payload, keep=True, truth=[4])
    store.flush()
    return root, payload.id


def test_store_round_trips_and_records_sha256s(tmp_path):
    root, pid = _store(tmp_path)
    record = json.loads((root / "index.json").read_text())[0]
    assert len(record["sha256"]) == 64 and (root / "index.json.sha256").exists()
    loaded = PayloadStore.open(root).load(pid)
    assert torch.equal(loaded.tensors["w"], torch.arange(6.0).reshape(2, 3)) and PayloadStore.open(root).truth(pid) == [4]


def test_a_flipped_tensor_byte_is_refused(tmp_path):
    root, pid = _store(tmp_path)
    path = root / f"{pid}.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="damaged or was changed"):
        PayloadStore.open(root).load(pid)


def test_an_edited_index_is_refused(tmp_path):
    root, pid = _store(tmp_path)
    index = json.loads((root / "index.json").read_text())
    index[0]["cluster"] = 5
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(StoreError, match="changed after it was written"):
        PayloadStore.open(root)
    # without the index's own sha256 the store is refused, unless trusted; then an entry that disagrees with the
    # file is still refused
    (root / "index.json.sha256").unlink()
    with pytest.raises(StoreError, match="index.json.sha256 is missing"):
        PayloadStore.open(root)
    index[0]["shapes"]["w"] = [3, 2]
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(StoreError, match="the file holds float32 \\[2, 3\\]"):
        PayloadStore.open(root, trusted=True).load(pid)
    del index[0]["sha256"]  # a kept payload without its sha256, the index's sha256 recomputed after the edit:
    (root / "index.json").write_text(json.dumps(index))  # the results folder's key, which the editor lacks, refuses it
    (root / "index.json.sha256").write_text(hashlib.sha256((root / "index.json").read_bytes()).hexdigest() + "\n")
    with pytest.raises(StoreError, match="changed after it was signed"):
        PayloadStore.open(root)


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd", "a/b", "..", ".hidden/../x"])
def test_ids_that_name_paths_are_refused(tmp_path, bad):
    root, _ = _store(tmp_path)
    with pytest.raises(StoreError, match="is not allowed"):
        PayloadStore.open(root).load(bad)
    index = json.loads((root / "index.json").read_text())
    index[0]["id"] = bad
    (root / "index.json").write_text(json.dumps(index))
    (root / "index.json.sha256").unlink()
    with pytest.raises(StoreError, match="is not allowed"):
        PayloadStore.open(root, trusted=True)


def test_threads_are_shared_out_among_parallel_jobs(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    before = torch.get_num_threads()
    try:
        assert parallel_jobs({"launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                                                         "JoblibLauncher", "n_jobs": 4}}) == 4
        assert parallel_jobs({"launcher": {"_target_": "x.JoblibLauncher", "n_jobs": -1}}) == 8
        assert parallel_jobs({"launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}}) == 1
        assert set_threads(4) == 2 and torch.get_num_threads() == 2
        assert set_threads(16) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert set_threads(4) == 3
    finally:
        torch.set_num_threads(before)



LPIPS_CHILD = """
import torch
from privbench.metrics.lpips_metric import lpips_distance
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
print(repr(lpips_distance(torch.rand(1, 28, 28, generator=g), torch.rand(1, 28, 28, generator=g))))
"""


@pytest.mark.slow
def test_eight_processes_use_lpips_for_the_first_time_together(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "TORCH_HOME": str(tmp_path / "torch"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", LPIPS_CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in results]
    values = {out.strip() for out, _ in results}
    assert len(values) == 1 and 0 < float(values.pop()) < 1
    assert not any(tmp_path.rglob("*.pt")), "LPIPS must not write a cache"


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_killing_a_joblib_sweep_stops_its_workers(tmp_path):
    sweep = subprocess.Popen(
        [sys.executable, "-m", "privbench", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1",
         "fl.rounds=200", "attack=none", f"results_dir={tmp_path}"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers: list[int] = []
    deadline = time.time() + 120
    while time.time() < deadline and not (workers and list(tmp_path.rglob("run.log"))):  # workers started jobs
        time.sleep(1)
        workers = _children(sweep.pid)
    assert workers, "no joblib workers started"
    time.sleep(2)
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.5)
    assert not any(_alive(w) for w in workers), "workers kept computing after the sweep was killed"


@pytest.mark.slow
def test_a_resumed_sweep_reports_every_run_and_leaves_no_empty_folder(tmp_path):
    args = [sys.executable, "-m", "privbench", "-m", "seed=0,1", "fl=fedavg", "payload=gradient", "fl.rounds=1",
            "fl.participants=2", "data.num_clients=4", "data.partition=iid", "fl.local_epochs=1", "attack=none",
            f"results_dir={tmp_path}", "hydra.sweep.dir=" + str(tmp_path / "first")]
    assert subprocess.run(args, cwd=tmp_path, capture_output=True, timeout=600).returncode == 0
    again = [*args[:-1], "seed=0,1,2", "hydra.sweep.dir=" + str(tmp_path / "second")]
    again.remove("seed=0,1")
    out = subprocess.run(again, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-1500:]
    second = tmp_path / "second"
    assert sorted(p.name for p in second.iterdir() if p.is_dir()) == ["0", "1", "2"]
    assert [p.name for p in (second / "0").iterdir()] == ["resumed.json"]  # skipped: a pointer, not an empty folder
    assert sorted(collect(second)["seed"]) == [0, 1, 2]  # the report of the resumed sweep shows all three runs
    assert "3 finished runs" in out.stdout


def test_payload_files_get_the_umask_s_mode(tmp_path):
    old = os.umask(0o022)
    try:
        root, pid = _store(tmp_path)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in root.iterdir()}
    assert modes[f"{pid}.safetensors"] == 0o644 and modes["index.json"] == 0o644 and modes["truth.json"] == 0o644
