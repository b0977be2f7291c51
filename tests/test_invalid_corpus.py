"""Invalid invocations: each ends before any training in one line that names the key (corpus of >= 100 cases).

Each case is (overrides, what the message must name). In-process, every case must raise a
``PrivbenchError`` from ``privbench.api.preflight`` (overrides, values, plan, data, model,
capture: everything the audit checks before it trains) with a one-line message; a sample
also runs through ``python -m privbench`` (exit 2, one line on stderr, no traceback).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from privbench.api import preflight
from privbench.errors import PrivbenchError

LONG = "x" * 20_000
CORPUS: list[tuple[list[str], str]] = [
    # unknown groups, options and keys
    (["attack=nope"], "attack=nope"), (["payload=nope"], "payload=nope"), (["fl=fedsgd"], "fl=fedsgd"),
    (["model=vgg"], "model=vgg"), (["data=imagenet"], "data=imagenet"), (["defense=magic"], "defense=magic"),
    (["experiment=nope"], "experiment=nope"), (["attack=dlg,nope"], "attack=nope"),
    (["fl.lrr=0.1"], "fl.lrr"), (["attack.iters=5"], "attack.iters"), (["victim.clinet=1"], "victim.clinet"),
    (["metrics.psnr=true"], "metrics.psnr"), (["+extra=1"], "extra"), (["data.sauce=x"], "data.sauce"),
    (["model.depth=3"], "model.depth"), (["defense.sigma=1"], "defense.sigma"), (["fl.gene.alpha=1"], "fl.gene.alpha"),
    (["capture.what=all"], "capture.what"), (["~attack"], "attack"), (["fl.agnostic.rate=1"], "fl.agnostic.rate"),
    # near misses name the option or key meant
    (["fl=genfl"], "did you mean fl=genefl?"), (["fl.round=3"], "did you mean fl.rounds?"),
    (["atack=dlg"], "did you mean attack?"), (["fl.gene.gama=2"], "did you mean fl.gene.gamma?"),
    (["metrics.lpip=false"], "did you mean metrics.lpips?"), (["fl.engine=flower"], "moved: use engine=inprocess"),
    (["attack=idgl"], "did you mean attack=idlg?"),
    # parse errors
    (["attack="], "attack"), (["fl.lr=[1,"], "cannot parse"), (["=5"], "cannot parse"),
    # non-finite numbers
    (["fl.lr=nan"], "fl.lr"), (["fl.lr=inf"], "fl.lr"), (["fl.lr=-inf"], "fl.lr"), (["fl.lambda2=nan"], "fl.lambda2"),
    (["fl.lambda1=inf"], "fl.lambda1"), (["defense=noise", "defense.sigma=nan"], "defense.sigma"),
    (["defense=dpsgd", "defense.noise_multiplier=inf"], "defense.noise_multiplier"),
    (["defense=dpsgd", "defense.target_epsilon=nan"], "defense.target_epsilon"),
    (["attack.converged=nan"], "attack.converged"), (["fl.gene.gamma=nan"], "fl.gene.gamma"),
    (["attack=ig", "attack.lr=inf"], "attack.lr"), (["data.alpha=nan"], "data.alpha"),
    # wrong types
    (["seed=abc"], "seed"), (["seed=1.5"], "seed"), (["seed=-1"], "seed"), (["seed=18446744073709551616"], "seed"),
    (["seed=true"], "seed"), (["fl.rounds=abc"], "fl.rounds"), (["fl.rounds=2.5"], "fl.rounds"),
    (["fl.rounds=true"], "fl.rounds"), (["fl.lr=abc"], "fl.lr"), (["fl.gene.gamma=abc"], "fl.gene.gamma"),
    (["data.agnostic_classes=abc"], "data.agnostic_classes"), (["data.agnostic_classes=[a]"], "data.agnostic_classes"),
    (["data.num_clients=ten"], "data.num_clients"), (["attack.iterations=1e3"], "attack.iterations"),
    (["attack.restarts=two"], "attack.restarts"), (["victim.client=first"], "victim.client"),
    (["victim.num_images=1.5"], "victim.num_images"), (["model.width=wide"], "model.width"),
    (["fl.participants=[1]"], "fl.participants"), (["fl.batch_size=null"], "fl.batch_size"),
    (["resume=maybe"], "resume"), (["resume=1"], "resume"), (["metrics.lpips=no"], "metrics.lpips"),
    (["data.download=yes"], "data.download"), (["attack.unroll=sometimes"], "attack.unroll"),
    (["fl.agnostic.fedavg_reference=0"], "fl.agnostic.fedavg_reference"),
    # out of range
    (["fl.rounds=0"], "fl.rounds"), (["fl.rounds=-3"], "fl.rounds"), (["fl.lr=0"], "fl.lr"), (["fl.lr=-0.1"], "fl.lr"),
    (["fl.participants=0"], "fl.participants"), (["fl.participants=11"], "fl.participants"),
    (["fl.local_epochs=0"], "fl.local_epochs"), (["fl.batch_size=0"], "fl.batch_size"),
    (["fl.momentum=-0.5"], "fl.momentum"), (["fl.momentum=1.5"], "fl.momentum"),
    (["fl.num_clusters=0"], "fl.num_clusters"), (["fl.num_clusters=99"], "fl.num_clusters"),
    (["fl.subspace_dim=0"], "fl.subspace_dim"), (["fl.lambda2=-1"], "fl.lambda2"), (["fl.eps=-1"], "fl.eps"),
    (["fl.gene.gamma=0"], "fl.gene.gamma"), (["fl.gene.gamma=-1"], "fl.gene.gamma"),
    (["fl.gene.gamma=1.5"], "fl.gene.gamma"), (["fl.gene.gamma=99"], "fl.gene.gamma"),
    (["fl.gene.select=middle"], "fl.gene.select"), (["fl.gene.score=magic"], "fl.gene.score"),
    (["fl.downlink=half"], "fl.downlink"), (["fl.penalty_step=implicit"], "fl.penalty_step"),
    (["fl.subspace=pca2"], "fl.subspace"), (["fl.eval=none"], "fl.eval"),
    (["fl.agnostic.epochs=-1"], "fl.agnostic.epochs"), (["fl.agnostic.lr=0"], "fl.agnostic.lr"),
    (["data.num_clients=0"], "data.num_clients"), (["data.partition=random"], "data.partition"),
    (["data.classes_per_client=0"], "data.classes_per_client"), (["data.alpha=0"], "data.alpha"),
    (["data.agnostic_classes=[10]"], "data.agnostic_classes"), (["data.agnostic_classes=[-1]"], "data.agnostic_classes"),
    (["data.min_size=100000"], "min_size"), (["data.num_agnostic_clients=0"], "data.num_agnostic_clients"),
    (["data.source=imagenet"], "data.source"), (["data=cifar10"], "data"),
    (["model.width=0"], "model.width"), (["victim.client=10"], "victim.client"), (["victim.client=-1"], "victim.client"),
    (["victim.round=10"], "victim.round"), (["victim.round=-2"], "victim.round"),
    (["victim.num_images=0"], "victim.num_images"), (["victim.update_data=some"], "victim.update_data"),
    (["victim.photos=cifar1"], "did you mean victim.photos=cifar10?"), (["victim.photos=[cifar10]"], "victim.photos"),
    (["victim.photos=lfw", "victim.num_images=200"], "leaving none for the chance baselines"),
    (["victim.photos=lfw", "victim.update_data=all"], "leaving none for the chance baselines"),
    (["victim.photos=lfw", "fl=fedavg", "payload=update", "attack=lira"], "a test of the domain"),
    (["attack.iterations=0"], "attack.iterations"), (["attack.restarts=0"], "attack.restarts"),
    (["attack.stall_at=-5"], "attack.stall_at"), (["attack.converged=-1"], "attack.converged"),
    (["attack.max_images=0"], "attack.max_images"), (["attack=ig", "attack.tv=-1"], "attack.tv"),
    (["metrics.match_on=psnr"], "metrics.match_on"),
    (["defense=noise", "defense.sigma=-1"], "defense.sigma"), (["defense=prune", "defense.p=1.5"], "defense.p"),
    (["defense=prune", "defense.p=-0.1"], "defense.p"), (["defense=dpsgd", "defense.max_grad_norm=0"], "max_grad_norm"),
    (["defense=dpsgd", "defense.delta=2"], "defense.delta"), (["defense=dpsgd", "defense.accountant=moments"], "accountant"),
    (["defense=dpsgd", "defense.target_epsilon=-1"], "target_epsilon"),
    # capture and payload
    (["fl=fedavg", "payload=update", "capture.kinds=[subspace]"], "capture.kinds"), (["capture.kinds=[nope]"], "capture.kinds"),
    (["capture.rounds=[99]"], "capture.rounds"), (["capture.clients=[client99]"], "capture.clients"),
    (["capture.rounds=sometimes"], "capture.rounds"),
    (["fl=fedavg", "payload=learngene"], "payload=learngene"), (["attack=projection"], "attack=projection"),
    (["attack.unroll=true", "payload=gradient", "fl=fedavg"], "attack.unroll"),
    (["payload._target_=builtins.open"], "payload._target_"), (["attack._target_=os.system"], "attack._target_"),
    (["model._target_=subprocess.Popen"], "model._target_"),
    # targets hidden in nested values, and hydra overrides that instantiate or write
    (["victim.clients={_target_:builtins.open,file:/tmp/pb-x,mode:w}"], "victim.clients._target_"),
    (["+victim.extra={_target_:os.system,command:true}"], "_target_"),
    (["capture.kinds=[{_target_:builtins.exec,source:x}]"], "capture.kinds.0._target_"),
    (["+hydra.callbacks.x._target_=pathlib.Path.write_text"], "hydra.callbacks"),
    (["hydra.job_logging.handlers.file.filename=/etc/x"], "hydra.job_logging"),
    (["hydra.launcher._target_=os.system"], "hydra.launcher._target_"),
    (["hydra.run.dir=/proc/x"], "hydra.run.dir"), (["hydra.sweep.dir=/dev/null"], "hydra.sweep.dir"),
    (["hydra.sweep.subdir=../../x"], "hydra.sweep.subdir"), (["hydra.output_subdir=/etc"], "hydra.output_subdir"),
    # later values of a sweep, finite extremes, cross-key limits and sizes, all before training
    (["seed=0,-1"], "seed=-1"), (["fl.lr=0.1,1e300"], "fl.lr"), (["fl.lr=1e300"], "fl.lr"),
    (["defense=dpsgd", "defense.delta=0.999999"], "defense.delta"),
    (["defense=dpsgd", "defense.noise_multiplier=1e300"], "defense.noise_multiplier"),
    (["defense=dpsgd", "defense.noise_multiplier=1e-300", "defense.target_epsilon=null"], "defense.noise_multiplier"),
    (["victim.num_images=100"], "attack.max_images=64"), (["attack=ig", "attack.restarts=100000000"], "attack.restarts"),
    (["fl.lambda2=1e300"], "fl.lambda2"), (["defense=noise", "defense.sigma=1e300"], "defense.sigma"),
    (["threads=0"], "threads=0"), (["threads=many"], "threads='many'"), (["threads=100000"], "threads=100000"),
    (["device=tpu"], "device='tpu'"),
    # where results go, and long values
    (["results_dir=/proc/x"], "results_dir"), (["results_dir="], "results_dir"), (["results_dir=/dev/null"], "results_dir"),
    ([f"name={LONG}"], "name"), ([f"fl.lr={LONG}"], "fl.lr"), (["fl.lr=${nope}"], "fl.lr"),
    # booleans accept only booleans; sizes that set an attack's loops and working set are bounded (issue 45)
    (["fl=genefl", "fl.gene.adaptive=maybe"], "fl.gene.adaptive"), (["fl.vectorise=1"], "fl.vectorise"),
    (["attack=lira", "attack.fixed_variance=yes"], "attack.fixed_variance"), (["attack.batched=maybe"], "attack.batched"),
    (["attack=lira", "attack.shadows=1000000000"], "attack.shadows"),
    (["attack=labels", "attack.refits=1000000"], "attack.refits"), (["attack=imprint", "attack.bins=1000000"], "attack.bins"),
    (["attack=membership", "attack.max_candidates=1000000000"], "attack.max_candidates"),
    (["attack=participation", "attack.records=1000000000"], "attack.records"),
    (["attack=class_set", "attack.max_classes=40"], "attack.max_classes"),
    (["fl=fedavg", "payload=update", "attack.unroll=true", "fl.local_epochs=1000000"], "unrolled attack would replay"),
    # Hydra's other doors: keys that write, run or load, interpolations resolved before the check
    ([f"hydra.run.dir=${{results_dir}}{'/..' * 40}/proc/x"], "hydra.run.dir"),
    ([f"hydra.sweep.dir=${{oc.env:HOME}}{'/..' * 40}/dev/x"], "hydra.sweep.dir"),
    (["hydra.sweep.subdir=${oc.env:HOME}"], "hydra.sweep.subdir"), (["hydra.output_subdir=${oc.env:HOME}"], "output_subdir"),
    (["hydra/job_logging=default", "hydra.job.name=../.."], "hydra/job_logging"), (["hydra.job.name=../.."], "hydra.job.name"),
    (["hydra.job.name=${oc.env:HOME}"], "hydra.job.name"), (["hydra/hydra_logging=hydra_debug"], "hydra/hydra_logging"),
    (["hydra/launcher=slurm", "hydra.launcher.setup=[touch /tmp/pb-x]"], "hydra.launcher.setup"),
    (["hydra/launcher=slurm", "hydra.launcher.submitit_folder=/proc/x"], "hydra.launcher.submitit_folder"),
    (["hydra/launcher=slurm", "+hydra.launcher.additional_parameters={x:1}"], "hydra.launcher.additional_parameters"),
    (["hydra/launcher=slurm", "hydra.launcher.srun_args=[x]"], "hydra.launcher.srun_args"),
    (["+hydra.launcher.temp_folder=/tmp"], "hydra.launcher.temp_folder"),
    (["+hydra.job.env_set.LD_PRELOAD=/tmp/x.so"], "hydra.job.env_set"), (["hydra.job.env_copy=[HOME]"], "hydra.job.env_copy"),
    (["hydra/callbacks=x"], "hydra/callbacks"), (["hydra/output=default"], "hydra/output"),
    (["hydra.runtime.output_dir=/tmp"], "hydra.runtime.output_dir"),
    (["results_dir=${oc.env:PRIVBENCH_NO_SUCH_VARIABLE}"], "results_dir"), (["name=${oc.env:HOME}"], "name"),
    # plans: the rounds an attack needs
    (["attack=participation", "payload=global_model", "fl=fedavg", "fl.rounds=1", "capture.rounds=all",
      "capture.clients=all"], "fl.rounds >= 2"),
]


def test_the_corpus_has_at_least_100_cases():
    assert len(CORPUS) >= 100 and len({tuple(a) for a, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("overrides, names", CORPUS, ids=[" ".join(a)[:60] for a, _ in CORPUS])
def test_invalid_invocation_is_refused_before_training_in_one_line(overrides, names):
    with pytest.raises(PrivbenchError) as info:
        preflight(overrides)
    message = str(info.value)
    assert "\n" not in message and names in message and len(message) < 600, message


SAMPLE = [0, 20, 35, 45, 118, 121, 129, 132]
#: Hydra's command-line options that load files outside privbench's checks (the rerun unpickles its file).
CLI_OPTIONS = [(["--experimental-rerun", "config.pickle"], "--experimental-rerun"),
               (["--config-path", "/tmp"], "--config-path"), (["-cn", "other"], "-cn"),
               (["--exp", "config.pickle"], "--experimental-rerun (given as --exp)"),
               (["--config-p", "/tmp", "--config-n", "evil"], "--config-p")]


@pytest.mark.slow
def test_the_cli_exits_2_with_one_line_for_a_sample(tmp_path):
    for overrides, names in [*(CORPUS[i] for i in SAMPLE), *CLI_OPTIONS]:
        out = subprocess.run([sys.executable, "-m", "privbench", *overrides], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 2 and len(lines) == 1, (overrides, out.stderr[-1500:])
        assert lines[0].startswith("privbench: error: ") and names in lines[0], (overrides, lines)
        assert not list(tmp_path.rglob("*.safetensors")), overrides  # nothing trained


def test_a_suggestion_only_when_an_option_is_close():
    with pytest.raises(PrivbenchError) as far:
        preflight(["attack=zzzzzz"])
    assert "did you mean" not in str(far.value) and "allowed: bias_sign, class_set, cpa, disguised_trap, dlg, fedavg_inversion, idlg, ig" in str(far.value)
    with pytest.raises(PrivbenchError) as near:
        preflight(["model=lenett"])
    assert "(did you mean model=lenet?)" in str(near.value)


def test_the_docs_state_the_corpus_s_count():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text()
    stated = re.search(r"`tests/test_invalid_corpus.py`\s+holds (\d+) such invocations", text)
    assert stated is not None and int(stated.group(1)) == len(CORPUS), (stated and stated.group(1), len(CORPUS))
