"""central-dp: DP-FedAvg with the server clipping every update and adding Gaussian noise to their mean."""
