"""The diagonal empirical Fisher of log p(y|x): a read of a client's data (exact here; DP in ``defenses``)."""
from __future__ import annotations

import torch
from torch import nn

from privbench.data.dataset import ImageDataset
from privbench.fl.sgd import per_sample_gradients

#: Per-sample gradients held at once, in floats (512 MiB): caps the batch for large models.
MAX_FLOATS = 2**27


def squared_gradients(model: nn.Module, data: ImageDataset, *, batch_size: int = 256,
                      clip: float | None = None) -> dict[str, torch.Tensor]:
    """``sum_i g_i^2`` with ``g_i = d log p(y_i | x_i; theta) / d theta`` over the samples of ``data``.

    With ``clip``, each per-sample gradient is first scaled to L2 norm at most ``clip`` (over
    all parameters), so one sample changes the sum by at most ``clip^2`` in L2 norm. The model
    is evaluated in eval mode (BatchNorm uses running statistics, so samples stay independent);
    the sign of the log-likelihood's gradient does not matter once squared. Batches shrink
    so that their per-sample gradients fit ``MAX_FLOATS`` (ResNet-18: 11 samples at a time).
    """
    was_training = model.training
    model.eval()
    total = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    batch_size = max(1, min(batch_size, MAX_FLOATS // max(1, sum(p.numel() for p in total.values()))))
    for start in range(0, len(data), batch_size):
        stop = min(start + batch_size, len(data))
        grads = per_sample_gradients(model, data.normalised(slice(start, stop)), data.labels[start:stop], clip=clip)
        for k, g in grads.items():
            total[k] += (g.detach() ** 2).sum(0)
    model.train(was_training)
    return total


def fisher_diagonal(model: nn.Module, data: ImageDataset, *, batch_size: int = 256) -> dict[str, torch.Tensor]:
    """``F_j = mean_i (d log p(y_i | x_i; theta) / d theta_j)^2`` over the client's samples.

    Example:
        >>> fisher = fisher_diagonal(model, client_data)  # doctest: +SKIP
    """
    return {k: v / len(data) for k, v in squared_gradients(model, data, batch_size=batch_size).items()}
