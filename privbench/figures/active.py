"""Active-server figures: the client's check of the crafted download, and whether the crafted layer was uploaded."""
from __future__ import annotations

from privbench.figures.spec import privacy

#: An active server's round: whether the victim's own check of the download flagged it (``defenses.detector``).
DOWNLOAD_FLAGGED = privacy("download_flagged", "download flagged by the client", fmt="{:.2f}", bounds="unit")
#: An active server's learnGene round: whether GENE-FL's layer choice uploaded the crafted layer.
CRAFTED_UPLOADED = privacy("crafted_layer_uploaded", "crafted layer uploaded", fmt="{:.2f}", bounds="unit")
