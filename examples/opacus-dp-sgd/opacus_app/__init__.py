"""opacus-dp-sgd: each client trains with DP-SGD (Opacus) and reports the epsilon its engine spent."""
