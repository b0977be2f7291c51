"""Shared fixtures: configs composed from the real tree, the embedded data, tiny targets."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra

from privbench.data import FederatedData

# at most 2 threads, fewer when OMP_NUM_THREADS says so (e.g. beside a running sweep: jobs x threads <= cores)
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or max(1, min(2, os.cpu_count() or 1))))


@pytest.fixture
def compose_cfg():
    """Compose ``privbench/conf/config.yaml`` with overrides, as the CLI does (the studies mounted)."""
    from privbench.studies import register_studies

    def _compose(*overrides: str):
        register_studies()
        GlobalHydra.instance().clear()
        with initialize_config_module(config_module="privbench.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=["name=test", *overrides])
        GlobalHydra.instance().clear()
        return cfg

    return _compose


@pytest.fixture
def four_pairs() -> FederatedData:
    """Four clients of two random train images each (seed 0): a cohort whose aggregate an attack can rebuild whole."""
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=4, partition="iid", agnostic_classes=[])
    rng = np.random.default_rng(0)
    data.clients = [np.sort(rng.choice(len(data.train), 2, replace=False)) for _ in range(4)]
    return data


@pytest.fixture(scope="session")
def fmnist() -> FederatedData:
    """The embedded Fashion-MNIST subset split iid among 10 clients."""
    return FederatedData.build(source="fashion_mnist_subset", num_clients=10, partition="iid", seed=0)


@pytest.fixture
def cli_here(monkeypatch, tmp_path):
    """``python -m privbench ARGS`` run in this process, in ``tmp_path``; returns its exit status. Logging, Hydra's
    global state and ``--config-dir`` are put back after the test."""
    import logging
    import sys

    from hydra.core.hydra_config import HydraConfig

    from privbench import cli
    from privbench.config_dir import use_config_dir

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cli.SWEEP_PID, "")

    def run(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["privbench", *args])
        try:
            cli.main()
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    try:
        yield run
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None  # type: ignore[assignment]
        use_config_dir(None)


#: Test files whose tests start Flower's simulation (a Ray cluster) or a deployment: one shard runs them all, so that
#: two shards never start two at once.
FLOWER_FILES = {"test_adaptive_server.py", "test_app_deployment.py", "test_app_record_canaries.py",
                "test_audit_app_runs.py", "test_client_dp.py", "test_doc_examples.py", "test_flower.py",
                "test_launchers.py", "test_loki.py", "test_secure_aggregation.py"}


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``PRIVBENCH_SHARD=i/n`` keeps shard ``i`` of ``n`` (CI runs the slow tests in two processes of one thread
    each): tests balanced by their measured seconds (``tests/slow_seconds.json``; 5 s where unmeasured), largest
    first onto the lightest shard, the Flower files' slow tests all on shard 0 (their quick tests start no Flower
    process)."""
    spec = os.environ.get("PRIVBENCH_SHARD")
    if not spec:
        return
    import json
    from pathlib import Path

    index, count = (int(v) for v in spec.split("/"))
    if not 0 <= index < count:
        raise pytest.UsageError(f"PRIVBENCH_SHARD={spec}: expected i/n with 0 <= i < n")
    seconds = json.loads((Path(__file__).parent / "slow_seconds.json").read_text())
    load, shard = [0.0] * count, {}
    timed = sorted(items, key=lambda it: (-seconds.get(it.nodeid, 5.0), it.nodeid))

    def flower(item: pytest.Item) -> bool:  # a slow test of a Flower file starts Flower's processes
        return Path(str(item.fspath)).name in FLOWER_FILES and item.get_closest_marker("slow") is not None

    for item in sorted(timed, key=lambda it: not flower(it)):
        target = 0 if flower(item) else min(range(count), key=lambda i: (load[i], i))
        shard[item.nodeid] = target
        load[target] += seconds.get(item.nodeid, 5.0)
    kept = [it for it in items if shard[it.nodeid] == index]
    config.hook.pytest_deselected(items=[it for it in items if shard[it.nodeid] != index])
    items[:] = kept
