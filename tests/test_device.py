"""device=auto|cpu|cuda|cuda:N|mps: resolved and checked before compute; states and payloads stay on the CPU."""
from __future__ import annotations

import pytest
import torch

import privbench
from privbench.device import resolve
from privbench.errors import ConfigError

TINY = ["fl=fedavg", "payload=gradient", "fl.rounds=1", "fl.participants=2", "data.num_clients=4",
        "data.partition=iid", "fl.local_epochs=1", "attack.iterations=30", "attack.restarts=1", "metrics.lpips=false"]
NO_CUDA = not torch.cuda.is_available()


def test_device_names_resolve_or_say_what_is_allowed():
    assert resolve("cpu") == torch.device("cpu")
    assert resolve("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:x", "CPU", ""):
        with pytest.raises(ConfigError, match="allowed auto, cpu, cuda, cuda:N or mps"):
            resolve(bad)


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_error_before_any_compute(monkeypatch, tmp_path):
    import privbench.fl.protocols.fedavg as fedavg

    def trained(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(fedavg.FedAvg, "run", trained)
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match=f"device={spec}: torch .* sees no CUDA device"):
            privbench.run([*TINY, f"device={spec}"], results_dir=tmp_path)
    with pytest.raises(ConfigError, match="device='gpu': allowed"):
        privbench.api.preflight(["device=gpu"])


@pytest.mark.slow
def test_an_explicit_cpu_audit_keeps_everything_on_the_cpu(tmp_path):
    from privbench.payloads import PayloadStore

    run = privbench.run([*TINY, "device=cpu"], results_dir=tmp_path)
    assert (run.run_dir / "config.yaml").read_text().count("device: cpu") == 1
    store = PayloadStore.open(run.payloads)
    kept = [r["id"] for r in store.records() if r["stored"]]
    assert kept and all(t.device.type == "cpu" for i in kept for t in store.load(i).tensors.values())
    assert run.metrics["privacy"]["psnr_mean"] is not None


@pytest.mark.gpu
@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA device")
def test_the_same_audit_on_cuda_sends_the_same_bytes_and_leaks_alike(tmp_path):
    cpu = privbench.run([*TINY, "device=cpu"], results_dir=tmp_path / "cpu")
    gpu = privbench.run([*TINY, "device=cuda"], results_dir=tmp_path / "cuda")
    for key in ("uplink_bytes", "downlink_bytes"):
        assert gpu.metrics["bytes"][key] == cpu.metrics["bytes"][key]
    assert abs(gpu.metrics["utility"]["accuracy"] - cpu.metrics["utility"]["accuracy"]) < 0.05
    assert gpu.metrics["privacy"]["psnr_mean"] > gpu.metrics["privacy"]["psnr_chance"]
    again = privbench.run([*TINY, "device=cuda", "resume=false"], results_dir=tmp_path / "cuda2")
    assert again.metrics["privacy"]["psnr_mean"] == pytest.approx(gpu.metrics["privacy"]["psnr_mean"], abs=1e-3)
