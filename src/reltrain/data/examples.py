"""The small English example bundled with the package, used when no data.train is given."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_DIR = Path(__file__).parents[1] / "example_data"


def use_example_data(data_cfg) -> bool:
    """Point an empty data config at the bundled example; True if it did."""
    if data_cfg.train:
        return False
    data_cfg.train = str(EXAMPLE_DIR / "train.jsonl")
    data_cfg.valid = str(EXAMPLE_DIR / "valid.jsonl")
    data_cfg.test = str(EXAMPLE_DIR / "test.jsonl")
    data_cfg.labels = str(EXAMPLE_DIR / "labels.txt")
    data_cfg.language = "en"
    return True
