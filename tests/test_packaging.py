"""The installed distribution: only `privbench` at the top, configs usable from any folder, searchpath, the Python API."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import privbench
from privbench.audit import resume
from privbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own_model_and_data"
TINY = ["fl=fedavg", "payload=gradient", "fl.rounds=1", "fl.participants=2", "data.num_clients=4",
        "data.partition=iid", "fl.local_epochs=1", "attack.iterations=20", "attack.restarts=1", "metrics.lpips=false"]


def test_packages_are_found_not_listed_and_cover_every_source_folder():
    """pyproject.toml names no package: setuptools finds every folder under privbench/ that holds code, configs or
    assets (and nothing outside it), with no symlinked folder or package-dir remapping in the tree."""
    from setuptools import find_namespace_packages

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(tool["packages"]) == {"find"} and "package-dir" not in tool
    find = tool["packages"]["find"]
    assert find.pop("namespaces") is True
    found = set(find_namespace_packages(where=str(ROOT), **find))
    expected = set()
    for d in [ROOT / "privbench", *(ROOT / "privbench").rglob("*")]:
        assert not d.is_symlink(), d
        if d.is_dir() and "__pycache__" not in d.parts and any(
                f.suffix in (".py", ".yaml", ".npz", ".safetensors") for f in d.iterdir()):
            expected.add(".".join(d.relative_to(ROOT).parts))
    assert expected <= found and {"privbench.attacks", "privbench.defenses.client_dp", "privbench.conf.experiment"} <= found
    assert all(name == "privbench" or name.startswith("privbench.") for name in found)


@pytest.mark.slow
def test_the_wheel_holds_only_privbench_with_configs_and_weights(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("privbench-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"privbench", wheel.name.split("-py")[0] + ".dist-info"}
    assert not any("dp_curve" in n or "studies/" in n for n in names)  # the studies stay in the clone
    for needed in ("privbench/conf/config.yaml", "privbench/conf/experiment/dlg_paper.yaml",
                   "privbench/attacks/reconstruction/idlg.py", "privbench/defenses/dpsgd.py", "privbench/conf/hydra/help/privbench.yaml",
                   "privbench/data/assets/lpips_alex_backbone.safetensors",
                   "privbench/data/assets/fashion_mnist_subset.npz"):
        assert needed in names
    metadata = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-py')[0]}.dist-info/METADATA").decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not any("pandas" in r or "matplotlib" in r or "joblib" in r for r in requires if "extra ==" not in r)


def _user_project(tmp_path: Path) -> Path:
    """A folder with its own configs/ and attacks/ (the usual Hydra project layout) and a user model and dataset."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "configs" / "config.yaml").write_text("this: is the user's own\n")
    (project / "attacks").mkdir()
    (project / "attacks" / "__init__.py").write_text("raise ImportError('the user attacks package was imported')\n")
    shutil.copy(EXAMPLE / "shapes.py", project / "shapes.py")
    shutil.copytree(EXAMPLE / "conf", project / "conf")
    return project


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(cwd)})


@pytest.mark.slow
def test_runs_from_a_user_project_with_its_own_configs_and_a_model_added_by_searchpath(tmp_path):
    project = _user_project(tmp_path)
    out = _cli("hydra.searchpath=[file://conf]", "model=tiny_cnn", "data=shapes", *TINY, "data.num_clients=3",
               "results_dir=out", cwd=project)
    assert out.returncode == 0, out.stderr
    metrics = json.loads(next((project / "out").rglob("metrics.json")).read_text())
    assert metrics["run"]["model"] == "tiny_cnn" and metrics["run"]["data"] == "shapes"
    assert metrics["bytes"]["uplink_bytes"] > 0
    # the searchpath option is checked like a packaged one; without the searchpath it is unknown
    bad = _cli("hydra.searchpath=[file://conf]", "model=tiny_cnnn", cwd=project)
    assert bad.returncode == 2 and ("model=tiny_cnnn: unknown option (did you mean model=tiny_cnn?); allowed: convnet, lenet, mlp, "
                                    "resnet18, tiny_cnn") in bad.stderr
    missing = _cli("model=tiny_cnn", cwd=project)
    assert missing.returncode == 2 and "model=tiny_cnn: unknown option" in missing.stderr


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_python_api_runs_in_process_returns_a_typed_result_and_resumes(tmp_path):
    result = privbench.run(TINY, results_dir=tmp_path)
    assert isinstance(result, privbench.AuditResult)
    assert result.run_dir.parent.parent == tmp_path and result.run_dir.parent.name == "fedavg-gradient-idlg-none"
    assert {"metrics.json", "config.yaml", "grid.png", "gallery.npz", "comm.json"} <= set(result.files)
    assert result.payloads == result.run_dir / "payloads"
    assert json.loads(result.files["metrics.json"].read_text())["privacy"]["psnr_mean"] == pytest.approx(
        result.privacy["psnr_mean"])
    versions = result.metrics["run"]["versions"]
    assert versions["privbench"] == privbench.__version__ and versions["torch"] and versions["python"]
    again = privbench.run(TINY, results_dir=tmp_path)  # resumed: the same folder, nothing rerun
    assert again.run_dir == result.run_dir and again.metrics["privacy"] == result.metrics["privacy"]


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_python_api_takes_a_composed_config_and_refuses_misspelt_keys(tmp_path):
    cfg = privbench.compose([*TINY, f"results_dir={tmp_path}"])
    assert cfg.name == "fedavg-gradient-idlg-none" and "hydra" not in cfg
    cfg.seed = 3
    with pytest.raises(Exception, match="seeed"):
        cfg.seeed = 3
    result = privbench.run(config=cfg, run_dir=tmp_path / "mine")
    assert result.run_dir == tmp_path / "mine" and result.metrics["run"]["seed"] == 3
    assert result.metrics["run"]["data"] == "fashion_mnist_subset"
    with pytest.raises(ConfigError, match="attack=nope: unknown option"):
        privbench.compose(["attack=nope"])


def test_resume_key_includes_the_privbench_version(compose_cfg, monkeypatch):
    cfg = compose_cfg()
    before = resume.config_key(cfg), resume.training_key(cfg)
    monkeypatch.setattr(privbench, "__version__", "99.0")
    after = resume.config_key(cfg), resume.training_key(cfg)
    assert before[0] != after[0] and before[1] != after[1]


@pytest.mark.slow
def test_the_own_model_and_data_example_runs(tmp_path):
    project = _user_project(tmp_path)
    out = subprocess.run([sys.executable, str(EXAMPLE / "run.py"), str(tmp_path / "results")], cwd=project,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tiny_cnn: PSNR" in out.stdout and "resnet18:" in out.stdout
    runs = list((tmp_path / "results").rglob("metrics.json"))
    assert len(runs) == 2
