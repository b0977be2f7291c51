"""local-dp-mod: every client's update clipped and noised by Flower's LocalDpMod."""
