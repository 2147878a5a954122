"""The small English examples bundled with the package (examples/make_example_data.py makes
them), used when no data.train is given: pairs to label, or sentences for task=extract."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_DIR = Path(__file__).parents[1] / "example_data"


def use_example_data(data_cfg, task: str = "classify") -> bool:
    """Point an empty data config at the bundled example of ``task``; True if it did."""
    if data_cfg.train:
        return False
    data_cfg.language = "en"
    if task == "extract":
        for split in ("train", "valid", "test"):
            setattr(data_cfg, split, str(EXAMPLE_DIR / f"extract_{split}.jsonl"))
        return True
    data_cfg.train = str(EXAMPLE_DIR / "train.jsonl")
    data_cfg.valid = str(EXAMPLE_DIR / "valid.jsonl")
    data_cfg.test = str(EXAMPLE_DIR / "test.jsonl")
    data_cfg.labels = str(EXAMPLE_DIR / "labels.txt")
    return True
