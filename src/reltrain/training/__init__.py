"""Training machinery: the rank-aware module, trainer, checkpoints, optimisers, metrics, callbacks."""
