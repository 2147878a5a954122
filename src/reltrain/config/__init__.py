"""The options of every command as dataclasses, checked once: a training run's (train), the
model commands' (commands), config files and key=value (files), and loading (load)."""
