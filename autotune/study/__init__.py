"""The study layer: runs trials (deploy + benchmark) and drives Optuna over them."""
