"""Label inference: which classes, and how many images of each, a message was computed from."""
