"""Datasets (embedded and torchvision), normalisation and client partitions."""
from privbench.data.dataset import ImageDataset, denormalise, normalise
from privbench.data.federated import FederatedData, load_split
from privbench.data.partition import partition, split_classes

__all__ = ["FederatedData", "ImageDataset", "denormalise", "load_split", "normalise", "partition", "split_classes"]
