"""legacy-numpy-client: a Flower app in the API most published apps still use (NumPyClient, server_fn)."""
