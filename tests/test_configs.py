"""The real config tree composes, every option instantiates, and bad values fail before compute."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from privbench.attacks.base import Attack
from privbench.audit.plan import plan
from privbench.build import build
from privbench.errors import AttackNotApplicableError, ConfigError, DatasetNotFoundError
from privbench.fl.engine import Launcher
from privbench.fl.protocols import FederatedProtocol
from privbench.fl.protocols.cohort import Aggregation
from privbench.fl.trainer import SGDTrainer, Trainer
from privbench.overrides import GROUPS, check_overrides, options
from privbench.payloads.select import PayloadChoice
from privbench.payloads.transform import MessageTransform

CONFIGS = Path(__file__).resolve().parents[1] / "privbench" / "conf"
STUDIES = Path(__file__).resolve().parents[1] / "studies"
OPTIONS = [(group, option) for group in GROUPS for option in options(group)]


def test_every_config_file_is_covered_by_a_test():
    files = {str(p.relative_to(root).with_suffix("")) for root in (CONFIGS, *STUDIES.iterdir())
             for p in root.rglob("*.yaml")}
    covered = {"config", "hydra/help/privbench", "hydra/job_logging/privbench",  # help, logging: test_cli, test_terminal
               "hydra/hydra_logging/privbench",
               "hydra/launcher/slurm", "hydra/launcher/ray_cluster"} | {f"{g}/{o}" for g, o in OPTIONS}  # test_launchers
    arms = {f"experiment/{e}/{a}" for e in options("experiment") for a in _arms(e)}  # planned by the sweep test
    assert files == covered | arms
    assert {"genefl", "fedavg"} <= set(options("fl")) and "fashion_mnist_subset" in options("data")


@pytest.mark.parametrize("group, option", OPTIONS)
def test_every_config_option_instantiates(compose_cfg, tmp_path, group, option):
    cfg = compose_cfg(f"{group}={option}", f"data.root={tmp_path}")
    if group == "experiment":
        assert plan(cfg).protocol.rounds >= 1
    elif group == "data":
        if cfg.data.source == "fashion_mnist_subset":
            assert build("data", cfg.data, seed=0).num_clients == cfg.data.num_clients
        else:  # torchvision sets are not on this machine: instantiating says how to get them
            with pytest.raises(DatasetNotFoundError, match="data.download=true"):
                build("data", cfg.data, seed=0)
    elif group == "model":
        net = build("model", cfg.model, in_channels=1, image_size=28, num_classes=10)
        assert sum(p.numel() for p in net.parameters()) > 0
    else:
        runtime = {"fl": {"trainer": SGDTrainer()}, "defense": {"seed": 0}, "aggregation": {"seed": 0}}.get(group, {})
        built = build(group, cfg[group], **runtime)
        expected = {"fl": FederatedProtocol, "payload": PayloadChoice, "attack": Attack,
                    "defense": (Trainer, MessageTransform), "aggregation": Aggregation, "engine": Launcher}[group]
        assert isinstance(built, expected)


def test_default_config_composes_and_plans(compose_cfg):
    cfg = compose_cfg()
    p = plan(cfg)
    assert (type(p.protocol).__name__, type(p.attack).__name__, p.choice.kind) == ("GeneFL", "IDLG", "learngene")
    assert cfg.data.source == "fashion_mnist_subset" and cfg.model._target_.endswith("LeNet")


@pytest.mark.parametrize("source", ["cifar10", "cifar100", "svhn", "mnist"])
def test_torchvision_data_options_compose_and_say_how_to_get_missing_data(compose_cfg, source, tmp_path):
    cfg = compose_cfg(f"data={source}", f"data.root={tmp_path}")
    assert cfg.data.source == source and cfg.data.num_clients == 10
    with pytest.raises(DatasetNotFoundError, match="data.download=true"):
        build("data", cfg.data, seed=0)


def test_experiment_pins_a_setting(compose_cfg):
    cfg = compose_cfg("experiment=dlg_paper")
    assert cfg.attack._target_ == "privbench.attacks.reconstruction.dlg.DLG" and cfg.fl.rounds == 1 and cfg.victim.num_images == 1
    batch = compose_cfg("experiment=dlg_batch")  # DLG's setting at a batch of 8 random images, iDLG with counts
    assert batch.attack._target_ == "privbench.attacks.reconstruction.idlg.IDLG" and batch.attack.labels == "auto"
    assert (batch.victim.num_images, batch.data.partition, batch.attack.restarts) == (8, "iid", 8)


@pytest.mark.parametrize("overrides, error, message", [
    (["fl.lr=-0.1"], ConfigError, "fl.lr=-0.1: must be a number > 0"),
    (["fl.lr=abc"], ConfigError, "fl.lr='abc': must be a number > 0"),
    (["fl.participants=0"], ConfigError, "fl.participants=0: must be an integer >= 1"),
    (["fl=fedavg", "payload=global_model"], AttackNotApplicableError, "cannot attack payload=global_model"),
    (["payload=subspace"], AttackNotApplicableError, "cannot attack payload=subspace"),
    (["+fl.gene.size=3"], ConfigError, "fl.gene.size: unknown key"),
    (["victim.update_data=some"], ConfigError, "victim.update_data='some' is not one of batch, all"),
    (["metrics.match_on=psnr"], ConfigError, "allowed values: mse, ssim, lpips"),
    (["+attack.lr=1"], ConfigError, "attack.lr: unknown key; allowed keys: iterations"),
    (["fl.downlink=both"], ConfigError, "fl.downlink='both' is not one of full, gene"),
    (["+oops=1"], ConfigError, "oops: unknown key; allowed top-level keys"),
    (["fl.lr=nan"], ConfigError, "fl.lr=nan: must be a finite number"),
    (["fl.lr=inf"], ConfigError, "fl.lr=inf: must be a finite number"),
    (["fl.gene.gamma=nan"], ConfigError, "fl.gene.gamma=nan: must be a finite number"),
    (["attack.converged=-inf"], ConfigError, "attack.converged=-inf: must be a finite number"),
    (["defense=dpsgd", "defense.target_epsilon=null", "defense.noise_multiplier=inf"], ConfigError,
     "defense.noise_multiplier=inf: must be a finite number"),  # it spun forever in the accountant
    (["seed=1.5"], ConfigError, r"seed=1.5: must be an integer in \[0, 2\^32\)"),
    (["seed=abc"], ConfigError, "seed='abc': must be an integer"),
    ([f"seed={2**63}"], ConfigError, "must be an integer"),
    (["resume=maybe"], ConfigError, "resume='maybe': must be true or false"),
    (["metrics.lpips=no"], ConfigError, "metrics.lpips='no': must be true or false"),
    (["aggregation=secagg", "aggregation.modulus_range=1e20"], ConfigError, "aggregation.modulus_range=1e"),
    (["aggregation=secagg", "aggregation.num_shares=2"], ConfigError, "aggregation.num_shares=2: an integer count"),
    (["aggregation=secagg", "aggregation.clipping_range=nan"], ConfigError, "must be a finite number"),
    (["fl.lr=${nope}"], ConfigError, "fl.lr: cannot resolve: Interpolation key 'nope' not found"),
])
def test_invalid_values_fail_in_planning(compose_cfg, overrides, error, message):
    with pytest.raises(error, match=message):
        plan(compose_cfg(*overrides))


@pytest.mark.parametrize("args, message", [
    (["attack=nope"], "attack=nope: unknown option (did you mean attack=none?); allowed: bias_sign, class_set, cpa, disguised_trap, dlg, fedavg_inversion"),
    (["attack=dlg,nope"], "attack=nope: unknown option"),
    (["fl.learning_rate=1"], "fl.learning_rate: unknown key; allowed keys: _target_, agnostic, batch_size, downlink"),
    (["model=convnet", "model.norm=gn"], "model.norm: unknown key; allowed keys: _target_, groups, width"),
    (["fl.lr=(("], "cannot parse overrides"),
])
def test_override_check_names_key_and_allowed_values(args, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        check_overrides(args)


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_valid_sweep_overrides_pass():
    check_overrides(["attack=dlg,idlg", "seed=0,1", "model=convnet", "fl.rounds=2"])


def test_capture_config_builds_the_policy(compose_cfg):
    cfg = compose_cfg("capture.rounds=all")
    policy = build("capture", OmegaConf.merge({"_target_": "privbench.payloads.CapturePolicy.build"}, cfg.capture),
                   victim_round=0, victim_client=0)
    assert policy.rounds == "all" and policy.clients == "victim"


def test_paper_cifar10_is_the_paper_scale(compose_cfg):
    cfg = compose_cfg("experiment=paper_cifar10")
    p = plan(cfg)
    assert (cfg.data.source, cfg.model._target_, p.protocol.rounds, p.protocol.participants) == (
        "cifar10", "privbench.models.ResNet18", 100, 10)
    net = build("model", cfg.model, in_channels=3, image_size=32, num_classes=10)
    assert sum(q.numel() for q in net.parameters()) == 11173962


@pytest.mark.parametrize("fl", ["genefl", "cluster_fedavg", "local", "fedavg"])
def test_every_protocol_plans(compose_cfg, fl):
    attack = "attack=none" if fl == "local" else "attack=idlg"
    payload = {"genefl": "learngene", "cluster_fedavg": "update", "local": "gradient", "fedavg": "update"}[fl]
    assert plan(compose_cfg(f"fl={fl}", attack, f"payload={payload}")).protocol.name == fl


def _config_root(experiment: str) -> Path:
    """Where ``experiment=<name>`` is found: its study's folder (``studies/<name>/``), or the package's configs."""
    study = STUDIES / experiment.split("/")[0]
    return study if study.is_dir() else CONFIGS


def _arms(experiment: str) -> list[str]:
    """The options of an experiment's own groups ``experiment/<name>/`` and below (one per arm of its sweep)."""
    folder = _config_root(experiment) / "experiment" / experiment
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml")) if folder.is_dir() else []


def _sweep_values(spec: str, key: str = "") -> list[str]:
    """Split a sweeper value list on commas outside brackets: ``"[],[a,b]"`` -> ``["[]", "[a,b]"]``;
    ``glob(*)`` over an experiment's arm group lists its options (``glob(*,exclude=a)``: all but ``a``)."""
    if str(spec).startswith("glob(*"):
        excluded = str(spec).removeprefix("glob(*").removesuffix(")").removeprefix(",exclude=").split(",")
        return [a for a in _arms(key.removeprefix("+experiment/")) if a not in excluded]
    out, depth, current = [], 0, ""
    for ch in str(spec):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    return [*out, current]


@pytest.mark.slow  # 20 s for the 16 studies; each experiment's own options are composed in the quick suite
@pytest.mark.parametrize("option", options("experiment"))
def test_every_sweep_value_of_an_experiment_plans(compose_cfg, option):
    """Each value an experiment sweeps over composes and passes every check (a typo fails here, not mid-sweep)."""
    import yaml

    params = (yaml.safe_load((_config_root(option) / "experiment" / f"{option}.yaml").read_text()) or {}).get(
        "hydra", {}).get("sweeper", {}).get("params", {})
    swept = {key: _sweep_values(spec, key) for key, spec in params.items() if key != "seed"}  # any seed plans
    assert all(swept.values()), f"nothing to sweep in {[k for k, v in swept.items() if not v]}"
    for key, values in swept.items():
        for value in values:  # each value beside the other keys' first (an option may exist only in one arm)
            overrides = [f"{k}={value if k == key else vs[0]}" for k, vs in swept.items()]
            assert plan(compose_cfg(f"experiment={option}", *overrides)).seed >= 0


def test_a_glob_sweep_on_the_command_line_is_expanded_and_checked():
    """``+experiment/dp_curve/arm=glob(*,exclude=none)`` as the study's second command gives it: every arm but none
    composes with the audit read; a glob that matches nothing is one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from privbench.errors import ConfigError
    from privbench.overrides import _sweep_values, check_overrides

    [glob] = OverridesParser.create().parse_overrides(["+experiment/dp_curve/arm=glob(*,exclude=none)"])
    arms = _sweep_values(glob)
    assert "none" not in arms and {"sigma0", "sigma0_001", "covered", "sigma8_62"} <= set(arms) and len(arms) == 14
    check_overrides(["experiment=dp_curve", "+experiment/dp_curve/read=learngene_one_run",
                     "+experiment/dp_curve/arm=glob(sigma0_0*)"])
    with pytest.raises(ConfigError, match="the glob matches no option of experiment/dp_curve/arm"):
        check_overrides(["experiment=dp_curve", "+experiment/dp_curve/arm=glob(nothing*)"])
