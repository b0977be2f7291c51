"""Property inference on a client's data subspace: which classes does the client hold?

A ``subspace`` payload (GENE-FL's and PACFL's clustering message) is a basis ``U`` of the client's images. The
attacker forms, for every candidate class set of up to ``max_classes`` classes, the basis the client would have
sent had it held the labelled public images of those classes (the test split; the same SVD, dimension and
form: ``svd`` or PACFL's per-class ``pacfl``), and guesses the set whose basis is nearest to ``U`` in summed
principal angles (for ``pacfl`` only the sets whose basis has as many columns as ``U``: the
concatenated per-class bases give the class count away, and a subset's smaller span would otherwise sit at
angle zero inside ``U``). ``captured_energy`` (the share of each class's public images the basis spans) is reported
beside it.

Class proportions (``svd`` form): the client's basis spans the top eigenvectors of its images' second-moment
matrix, ``sum_c p_c M_c`` with ``p_c`` its share of class ``c``. The attacker estimates each ``M_c`` from the public
images and fits the proportions under which ``span(U)`` is most nearly an invariant subspace of the mixture,
``min ||(I - U U^T) sum_c p_c M_c U||_F^2`` over the simplex (a convex quadratic in ``p``; ``proportions_fit``).
PACFL's per-class bases do not mix the classes, so they carry no proportions (``attack=labels`` reads counts from
a model update's head).
"""
from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, ClassVar, Literal

import torch

from privbench.attacks.base import Attack
from privbench.attacks.property.findings import InferredProperty
from privbench.attacks.views import BasisView, ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries
from privbench.progress import phase
from privbench.schema import Number
from privbench.subspaces import angle, client_subspace, per_class_subspace

Form = Literal["svd", "pacfl"]


def captured_energy(basis: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Per image, the share of its squared norm in the span of ``basis`` (``[D, d]``; orthonormalised here).

    Example:
        >>> e = torch.eye(3)
        >>> captured_energy(e[:, :1], torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])).tolist()
        [0.5, 0.0]
    """
    q, _ = torch.linalg.qr(basis.double())
    flat = images.reshape(len(images), -1).double()
    return ((flat @ q) ** 2).sum(1) / (flat ** 2).sum(1).clamp_min(1e-30)


def subspace_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Summed principal angles between the spans of ``a`` and ``b`` (radians; GENE-FL's clustering distance).

    Example:
        >>> e = torch.eye(3)
        >>> round(subspace_distance(e[:, :2], e[:, 1:]), 4)
        1.5708
    """
    return angle(a.double().numpy(), b.double().numpy(), variant="svd")


def simplex_projection(v: torch.Tensor) -> torch.Tensor:
    """The Euclidean projection of ``v`` onto the probability simplex (Duchi et al., 2008).

    Example:
        >>> simplex_projection(torch.tensor([0.0, 0.0, 2.0])).tolist()
        [0.0, 0.0, 1.0]
        >>> simplex_projection(torch.tensor([0.2, 0.2])).tolist()
        [0.5, 0.5]
    """
    u, _ = torch.sort(v, descending=True)
    cumulative = torch.cumsum(u, 0)
    k = torch.arange(1, len(v) + 1, dtype=v.dtype)
    rho = int((u - (cumulative - 1) / k > 0).nonzero().max())
    return (v - (cumulative[rho] - 1) / (rho + 1)).clamp_min(0)


def proportions_fit(basis: torch.Tensor, public: torch.Tensor, labels: torch.Tensor, *, iterations: int = 20000,
                    tolerance: float = 1e-12) -> dict[int, float]:
    """The class proportions under which ``span(basis)`` is most nearly an invariant subspace of the mixture of the
    public classes' second-moment matrices: ``argmin_p ||(I - U U^T) sum_c p_c M_c U||_F^2`` on the simplex, by
    projected gradient descent from the uniform mixture (the objective is a convex quadratic in ``p``).

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [0.6, 0.8]]).reshape(2, 1, 1, 2)  # one image of class 0, one of class 1
        >>> u = torch.tensor([[1.0], [0.0]])  # the top eigenvector of class 0's M alone: class 1's would tilt it
        >>> {c: round(v, 3) for c, v in proportions_fit(u, x, torch.tensor([0, 1])).items()}
        {0: 1.0, 1: 0.0}
    """
    q, _ = torch.linalg.qr(basis.double())
    flat = public.reshape(len(public), -1).double()
    classes = sorted(int(c) for c in labels.unique())
    residuals = []
    for c in classes:
        x = flat[labels == c]  # M_c U = X_c^T (X_c U) / n_c
        mixed = x.T @ (x @ q) / len(x)
        residuals.append((mixed - q @ (q.T @ mixed)).flatten())
    r = torch.stack(residuals)
    gram = r @ r.T
    step = 1.0 / float(torch.linalg.eigvalsh(gram).max().clamp_min(1e-30))
    p = torch.full((len(classes),), 1.0 / len(classes), dtype=torch.float64)
    for _ in range(iterations):
        moved = simplex_projection(p - step * (gram @ p))
        if float((moved - p).abs().max()) < tolerance:
            p = moved
            break
        p = moved
    return {c: float(v) for c, v in zip(classes, p)}


class SubspaceClassSet(Attack[BasisView, InferredProperty]):
    """Infer a client's class set from its data-subspace basis and labelled public images.

    Args:
        form: how the client formed its basis: ``svd`` (one SVD of its images) or ``pacfl`` (one per class).
        dim: the singular vectors the client kept (per class for ``pacfl``).
        max_classes: the largest class set tried (every set of 1 to ``max_classes`` public classes).
    """

    name = "class_set"
    reads: ClassVar[frozenset[Carries]] = frozenset({"basis"})
    view: ClassVar[ViewKind] = "basis"

    def __init__(self, *, form: Form = "svd", dim: Annotated[int, Number(integer=True, low=1, high=10**4)] = 5,
                 max_classes: Annotated[int, Number(integer=True, low=1, high=10)] = 4) -> None:
        if form not in ("svd", "pacfl"):
            raise ValueError(f"attack.form={form!r}: allowed svd, pacfl")
        if dim < 1 or max_classes < 1:
            raise ValueError("attack.dim and attack.max_classes must be >= 1")
        self.form, self.dim, self.max_classes = form, dim, max_classes

    def budget(self) -> dict[str, Any]:
        return {"candidate_sets": f"every set of 1 to {self.max_classes} public classes", "form": self.form,
                "dim": self.dim, **({"proportions": "invariant-subspace fit over every public class"}
                                    if self.form == "svd" else {})}

    def attack(self, view: BasisView, *, seed: int) -> InferredProperty:
        """The nearest candidate set, every set's distance, every class's captured energy and (``svd``) the fitted class
        proportions (deterministic)."""
        del seed
        if view.public is None or view.public_labels is None or not len(view.public):
            raise AttackNotApplicableError("attack=class_set needs labelled public images of the task")
        public, labels = view.public.cpu(), view.public_labels.cpu()
        basis = view.basis.cpu()
        classes = sorted(int(c) for c in labels.unique())
        distances: dict[tuple[int, ...], float] = {}
        sizes = range(1, min(self.max_classes, len(classes)) + 1)
        with phase("class_set: candidate class sets", total=sum(math.comb(len(classes), k) for k in sizes),
                   unit="set") as bar:
            for size in sizes:
                for chosen in itertools.combinations(classes, size):
                    rows = torch.isin(labels, torch.tensor(chosen))
                    candidate = (client_subspace(public[rows], min(self.dim, int(rows.sum()))) if self.form == "svd"
                                 else per_class_subspace(public[rows], labels[rows], self.dim, client_subspace))
                    if self.form == "svd" or candidate.shape[1] == basis.shape[1]:
                        distances[chosen] = subspace_distance(basis, candidate)
                    bar.update(1)
        if not distances:
            raise AttackNotApplicableError(
                f"attack=class_set: no set of up to {self.max_classes} public classes gives a {self.form} basis of "
                f"{basis.shape[1]} columns (attack.dim={self.dim}, attack.max_classes={self.max_classes})")
        best = min(distances, key=lambda k: distances[k])
        energy = captured_energy(basis, public)
        ranked = sorted(distances, key=lambda k: distances[k])[:5]
        info: dict[str, Any] = {
            "nearest_sets": {",".join(map(str, k)): round(distances[k], 4) for k in ranked},
            "captured_energy": {str(c): round(float(energy[labels == c].mean()), 4) for c in classes}}
        if self.form == "svd":
            info["proportions"] = {c: round(v, 6) for c, v in proportions_fit(basis, public, labels).items()}
        return InferredProperty(name="class_set", value=list(best), info=info)
