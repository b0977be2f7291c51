"""quickstart-pt: a Flower app in the shape of Flower's PyTorch quickstart."""
