"""Active-server figures: the client's check of the crafted download, and whether the crafted layer was uploaded."""
from __future__ import annotations

from privbench.figures.spec import privacy

#: An active server's round: whether the victim's own check of the download flagged it (``defenses.detector``).
DOWNLOAD_FLAGGED = privacy("download_flagged", "download flagged by the client", fmt="{:.2f}", bounds="unit")
#: An active server's learnGene round: whether GENE-FL's layer choice uploaded the crafted layer.
CRAFTED_UPLOADED = privacy("crafted_layer_uploaded", "crafted layer uploaded", fmt="{:.2f}", bounds="unit")
#: A server that keeps a cohort's members apart (per-client downloads, LOKI): the share of the cohort's images
#: recovered (the matching's recovery rule) from the slot of the member that holds them.
ATTRIBUTED_FRACTION = privacy("attributed_fraction", "images recovered and attributed to their client", fmt="{:.3f}",
                              leak="higher", bounds="unit")
#: The same server: the audited victim's images recovered from its own slot (its share, as one isolated client's).
VICTIM_ATTRIBUTED = privacy("victim_attributed_fraction", "victim's images recovered and attributed to it",
                            fmt="{:.3f}", leak="higher", bounds="unit")
#: The same server: images recovered but read from another member's slot (an attribution error).
MISATTRIBUTED = privacy("misattributed", "images recovered from another client's slot", fmt="{:.0f}",
                        bounds="nonnegative")
