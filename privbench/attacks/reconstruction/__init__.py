"""Reconstruction: the private images a message was computed from (gradient inversion, FedAvg-aware
inversion, projection on a basis)."""
