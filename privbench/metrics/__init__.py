"""Reconstruction, chance, clustering and LPIPS metrics."""
