"""device=auto|cpu|cuda|cuda:N|mps: resolved and checked before compute; states and payloads stay on the CPU."""
from __future__ import annotations

import pytest
import torch

import privbench
from privbench.device import SMALL_STEP_MACS, choose_threads, forward_macs, resolve
from privbench.errors import ConfigError

#: One image's gradient under iDLG: at this budget the CPU run rebuilds it (the first restart of seed 0 stalls at an
#: objective of 0.70; the second reaches 7e-7, 46 dB), so the CUDA run has a leak to match.
TINY = ["fl=fedavg", "payload=gradient", "fl.rounds=1", "fl.participants=2", "data.num_clients=4",
        "data.partition=iid", "fl.local_epochs=1", "attack.iterations=30", "attack.restarts=4", "metrics.lpips=false"]
#: dB over chance a device's run must rebuild the image by (chance: 13.6 dB at seed 0).
LEAK_DB = 20.0
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


def test_the_device_test_s_budget_leaks_on_the_cpu(tmp_path):
    """The budget the CUDA test runs must leak here, or the CUDA test compares nothing (it once ran 1 restart: 5.00
    dB on the CPU against a chance of 13.6)."""
    run = privbench.run([*TINY, "device=cpu"], results_dir=tmp_path)
    privacy = run.metrics["privacy"]
    assert privacy["psnr_mean"] > privacy["psnr_chance"] + LEAK_DB and privacy["recovered_fraction"] == 1.0


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
    for run in (cpu, gpu):  # both rebuild the image: L-BFGS ends 40-46 dB on either device, in float rounding's path
        assert run.metrics["privacy"]["psnr_mean"] > run.metrics["privacy"]["psnr_chance"] + LEAK_DB
    assert gpu.metrics["privacy"]["recovered_fraction"] == cpu.metrics["privacy"]["recovered_fraction"] == 1.0
    again = privbench.run([*TINY, "device=cuda", "resume=false"], results_dir=tmp_path / "cuda2")
    assert again.metrics["privacy"]["psnr_mean"] == pytest.approx(gpu.metrics["privacy"]["psnr_mean"], abs=1e-3)


def test_forward_macs_counts_convolutions_and_linear_layers_by_hand():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(18, 4))
    model.train()
    # conv: 2 x 3 x 3 outputs, each 1 x 3 x 3 multiply-adds = 162; linear: 4 outputs x 18 inputs = 72
    assert forward_macs(model, torch.zeros(1, 1, 5, 5)) == 162 + 72
    assert model.training  # left in the mode it was in
    grouped = torch.nn.Conv2d(4, 4, 1, groups=4)  # each output reads 1 of the 4 channels
    assert forward_macs(grouped, torch.zeros(1, 4, 2, 2)) == 4 * 2 * 2 * 1


def test_thread_choice_follows_the_run_and_the_overrides():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    small, large = SMALL_STEP_MACS - 1, SMALL_STEP_MACS
    assert choose_threads("auto", step_macs=small, device=cpu, cores=8, environ={}).count == 1
    assert choose_threads("auto", step_macs=large, device=cpu, cores=8, environ={}).count == 8
    assert choose_threads("auto", step_macs=large, device=cpu, cores=8, jobs=3, environ={}).count == 2
    assert choose_threads("auto", step_macs=large, device=cpu, cores=2, jobs=4, environ={}).count == 1
    assert choose_threads("auto", step_macs=small, device=cuda, cores=8, environ={}).count == 8
    assert choose_threads("auto", step_macs=small, device=cpu, cores=8, environ={"OMP_NUM_THREADS": "3"}).count == 3
    explicit = choose_threads(2, step_macs=small, device=cpu, cores=8, environ={"OMP_NUM_THREADS": "3"})
    assert explicit.count == 2 and "threads=2" in str(explicit)
    assert "gain nothing from a second thread" in str(choose_threads("auto", step_macs=small, device=cpu,
                                                                     cores=8, environ={}))
    for bad in (0, -1, "two", True, 2.5):
        with pytest.raises(ConfigError, match="threads=.*allowed auto or an integer"):
            choose_threads(bad, step_macs=small, device=cpu)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_the_run_log_says_how_many_threads_and_why(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    result = privbench.run([*TINY[:-3], "attack=none"], results_dir=tmp_path)
    log = (result.run_dir / "run.log").read_text()
    # LeNet on 28 x 28 images: 3 convs of 12 channels and a linear head, batch 32, far under SMALL_STEP_MACS
    assert "threads: 1 (auto, of" in log and "gain nothing from a second thread" in log
    result = privbench.run([*TINY[:-3], "attack=none", "threads=2"], results_dir=tmp_path)
    assert "threads: 2 (threads=2)" in (result.run_dir / "run.log").read_text()
    assert torch.get_num_threads() == before  # the caller's count is back
