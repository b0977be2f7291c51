"""What a user's file holds against what it is declared to be: weights vs a gradient, the truth's size, the chance
pool's likeness to the truth; and a file attack's output folder, never written over."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from privbench.data.embedded import load_fashion_mnist_subset
from privbench.declared import check_kind, check_truth_count, resemblance
from privbench.errors import ConfigError
from privbench.models import LeNet


def _client(steps: int = 3) -> dict[str, dict[str, torch.Tensor]]:
    """A plain PyTorch client of LeNet on 4 real images: its start, its one-step gradient, its weights after
    ``steps`` SGD steps (lr 0.1) and their difference from the start."""
    data = load_fashion_mnist_subset(train=True)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = (data.images[:4].float() / 255.0 - data.mean[0]) / data.std[0]
    y = data.labels[:4]
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
    gradient = {n: g for (n, _), g in zip(model.named_parameters(), grads)}
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimiser.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimiser.step()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"start": start, "gradient": gradient, "after": after,
            "difference": {n: after[n] - start[n] for n in after}}


def test_a_cross_entropy_gradient_s_head_bias_sums_to_zero_and_passes_both_checks():
    c = _client()
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    assert abs(float(c["gradient"]["fc.bias"].sum())) < 1e-6  # softmax - onehot sums to 0 for every sample
    check_kind("gradient", "gradient", c["gradient"], base=c["start"], model=model, what="g.pt")
    check_kind("gradient", "gradient", c["gradient"], base=None, model=model, what="g.pt")
    check_kind("update", "model", c["after"], base=c["start"], model=model, what="u.pt")


@pytest.mark.parametrize("held, kind, carries, with_base, message", [
    ("after", "gradient", "gradient", True, "declared a gradient (--kind gradient), but its tensors lie"),
    ("start", "gradient", "gradient", True, "lie 0% of --base's norm from --base"),
    ("after", "gradient", "gradient", False, "last-layer bias (fc.bias) sums to"),
    ("difference", "update", "model", True, "looks like a gradient or a weight difference"),
    ("gradient", "update", "model", True, "looks like a gradient or a weight difference"),
])
def test_weights_declared_a_gradient_and_a_gradient_declared_weights_are_refused(held, kind, carries, with_base,
                                                                                  message):
    c = _client()
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        check_kind(kind, carries, c[held], base=c["start"] if with_base else None, model=model, what="f.pt")


def test_a_truth_of_another_size_is_refused():
    check_truth_count(8, 8, what="t.pt")
    with pytest.raises(ConfigError, match="t.pt holds 8 images but --batch-size is 1: .* best-of-8 match"):
        check_truth_count(8, 1, what="t.pt")


def test_test_split_images_resemble_it_and_photographs_do_not():
    """Fashion-MNIST's test images sit in its test split's cloud; photographs (scikit-image's camera and astronaut,
    shipped with it) shrunk to 28 x 28 do not."""
    from skimage import data as photos
    from skimage.color import rgb2gray
    from skimage.transform import resize

    test = load_fashion_mnist_subset(train=False)
    pool = test.images.float() / 255.0
    alike = resemblance(pool[:4], pool[4:], seed=0)
    shots = [photos.camera() / 255.0, rgb2gray(photos.astronaut()), photos.coins() / 255.0, photos.moon() / 255.0]
    foreign = torch.stack([torch.tensor(resize(s, (28, 28), anti_aliasing=True), dtype=torch.float32)[None]
                           for s in shots])
    other = resemblance(foreign, pool[4:], seed=0)
    assert alike.alike and not other.alike, (alike, other)
    assert other.truth_db < other.pool_quantile_db < alike.truth_db


def _save_client(folder, images: torch.Tensor, labels: torch.Tensor) -> None:
    torch.manual_seed(7)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    data = load_fashion_mnist_subset(train=True)
    x = (images - data.mean[0]) / data.std[0]
    grads = torch.autograd.grad(F.cross_entropy(model(x), labels), list(model.parameters()))
    torch.save({n: g for (n, _), g in zip(model.named_parameters(), grads)}, folder / "grads.pt")
    torch.save(model.state_dict(), folder / "weights.pt")
    torch.save({n: p.detach() for n, p in model.named_parameters()}, folder / "weights_as_grads.pt")
    torch.save({"images": images, "labels": labels}, folder / "truth.pt")


def test_a_file_attack_refuses_weights_declared_a_gradient_and_a_best_of_n_truth(tmp_path, monkeypatch, capsys):
    from privbench.attack import main

    data = load_fashion_mnist_subset(train=True)
    _save_client(tmp_path, data.images[:2].float() / 255.0, data.labels[:2])
    monkeypatch.chdir(tmp_path)
    for args, message in ((["weights_as_grads.pt", "--base", "weights.pt"], "declared a gradient"),
                          (["weights_as_grads.pt"], "last-layer bias"),
                          (["grads.pt", "--truth", "truth.pt"], "truth.pt holds 2 images but --batch-size is 1")):
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--out", "out", "model=lenet", "attack=idlg"])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert exit_.value.code == 2 and len(lines) == 1 and message in lines[0], lines
        assert not (tmp_path / "out").exists()


def test_a_file_attack_writes_a_new_folder_each_time_and_says_where_chance_came_from(tmp_path, monkeypatch, capsys):
    """Two attacks with the same ``--out`` write two folders; the summary names the chance pool and the recovered
    bar; truth images unlike the pool (inverted Fashion-MNIST) draw a one-line warning and are recorded so."""
    from privbench.attack import main

    data = load_fashion_mnist_subset(train=True)
    image = data.images[3:4].float() / 255.0
    monkeypatch.chdir(tmp_path)
    folders = []
    for name, images in (("plain", image), ("inverted", 1 - image)):
        (tmp_path / name).mkdir()
        _save_client(tmp_path / name, images, data.labels[3:4])
        main([f"{name}/grads.pt", "--base", f"{name}/weights.pt", "--truth", f"{name}/truth.pt", "--out", "out",
              "model=lenet", "attack=idlg", "attack.iterations=2", "attack.restarts=1", "metrics.lpips=false"])
        captured = capsys.readouterr()
        folders.append(tmp_path / captured.out.splitlines()[-1].removeprefix("results: "))
        privacy = json.loads((folders[-1] / "metrics.json").read_text())["privacy"]
        assert privacy["chance_from"] == "data=fashion_mnist_subset's test split (800 images)"
        assert "chance from data=fashion_mnist_subset's test split" in captured.out
        assert "to PSNR >= 20 dB" in captured.out
        warned = [line for line in captured.err.splitlines() if "warning: the --truth images do not look like" in line]
        assert privacy["chance_pool_alike"] is (name == "plain") and len(warned) == (name == "inverted")
    assert folders[0] != folders[1] and folders[0].parent == folders[1].parent == tmp_path / "out"


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_the_file_attack_s_help_names_every_attack_that_reads_one_message_and_its_example_parses(compose_cfg):
    """The attacks ``--help`` lists are the config options whose attack is a gradient inversion (built, not
    typed), and its example is a command this parser takes."""
    import re
    from pathlib import Path

    from hydra.utils import get_object

    from privbench.attack import parser
    from privbench.attacks.reconstruction.base import GradientInversion

    folder = Path(__file__).resolve().parents[1] / "privbench" / "conf" / "attack"
    readers = set()
    for path in folder.glob("*.yaml"):
        target = str(compose_cfg(f"attack={path.stem}").attack.get("_target_", ""))
        if target and isinstance(get_object(target), type) and issubclass(get_object(target), GradientInversion):
            readers.add(path.stem)
    epilog = parser().epilog or ""
    listed = set(re.search(r"attack=\.\.\. \(([^:]+):", epilog).group(1).split(", "))
    assert listed == readers, (listed, readers)
    example = epilog.split("example: python -m privbench.attack ", 1)[1].splitlines()[0].split()
    args = parser().parse_intermixed_args(example)
    assert args.kind == "gradient" and args.batch_size == 1 and "attack=idlg" in args.overrides


def test_a_noisy_dp_sgd_gradient_is_judged_against_base_only_and_a_model_without_a_linear_head_is_not_judged():
    """DP-SGD's noise breaks the zero-sum bias: declared with --clip (``noisy``) such a gradient is not refused
    without --base; a model whose last layer is not linear (torchvision's SqueezeNet ends conv, ReLU, pool) has no
    head bias to judge."""
    import torchvision

    from privbench.declared import head_bias

    c = _client()
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    g = torch.Generator().manual_seed(0)
    noisy = {n: t + 0.25 * torch.randn(t.shape, generator=g) for n, t in c["gradient"].items()}
    with pytest.raises(ConfigError, match="DP-SGD gradient"):
        check_kind("gradient", "gradient", noisy, base=None, model=model, what="g.pt")
    check_kind("gradient", "gradient", noisy, base=None, model=model, what="g.pt", noisy=True)
    check_kind("gradient", "gradient", noisy, base=c["start"], model=model, what="g.pt", noisy=True)
    with pytest.raises(ConfigError, match="declared a gradient"):  # weights are still refused against --base
        check_kind("gradient", "gradient", c["after"], base=c["start"], model=model, what="g.pt", noisy=True)
    assert head_bias(model) == "fc.bias" and head_bias(torchvision.models.squeezenet1_0(num_classes=10)) is None


def test_too_few_non_members_to_judge_likeness_is_said_not_crashed(tmp_path, monkeypatch, capsys):
    from privbench.attack import main

    data = load_fashion_mnist_subset(train=True)
    _save_client(tmp_path, data.images[3:4].float() / 255.0, data.labels[3:4])
    torch.save({"images": data.images[10:11].float() / 255.0}, tmp_path / "others.pt")
    monkeypatch.chdir(tmp_path)
    main(["grads.pt", "--base", "weights.pt", "--truth", "truth.pt", "--non-members", "others.pt", "--out", "out",
          "model=lenet", "attack=idlg", "attack.iterations=2", "attack.restarts=1", "metrics.lpips=false"])
    captured = capsys.readouterr()
    folder = tmp_path / captured.out.splitlines()[-1].removeprefix("results: ")
    privacy = json.loads((folder / "metrics.json").read_text())["privacy"]
    assert privacy["chance_from"] == "--non-members others.pt (1 images)" and privacy["chance_pool_alike"] is None
    assert "too few images to tell" in captured.err
