"""``Split``: one split of examples as flat arrays (what the cache stores and the datasets read),
and ``encode_records``, which makes one from records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reltrain.data.schema import Record

SPLIT_ARRAYS = {"token_ids": np.int32, "offsets": np.int64, "head": np.int32, "tail": np.int32,
                "labels": np.int64}


@dataclass
class Split:
    """One split as flat arrays: tokens of example i are ``token_ids[offsets[i]:offsets[i+1]]``."""

    token_ids: np.ndarray  # (T,) int32
    offsets: np.ndarray  # (N+1,) int64
    head: np.ndarray  # (N, 2) int32 token span, end exclusive
    tail: np.ndarray  # (N, 2) int32
    labels: np.ndarray  # (N,) int64; -1 where the input had no relation
    folder: Path | None = None  # the cache folder its arrays are mapped from

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def load(cls, folder: Path, mapped: bool = True) -> "Split":
        """The split's arrays, mapped from the files (read in place, shared by every process that
        maps them) or read into memory; shapes and types that do not fit are a ValueError."""
        arrays = {k: np.load(folder / f"{k}.npy", mmap_mode="r" if mapped else None,
                             allow_pickle=False) for k in SPLIT_ARRAYS}
        n = len(arrays["labels"])
        fits = (arrays["offsets"].shape == (n + 1,) and arrays["head"].shape == (n, 2)
                and arrays["tail"].shape == (n, 2) and arrays["token_ids"].ndim == 1
                and n > 0 and int(arrays["offsets"][-1]) == len(arrays["token_ids"])
                and all(arrays[k].dtype == t for k, t in SPLIT_ARRAYS.items()))
        if not fits:
            raise ValueError(f"{folder}: the arrays do not fit together")
        return cls(**arrays, folder=folder if mapped else None)

    def __reduce__(self):  # to a DataLoader worker: mapped arrays go by their folder, not a copy
        if self.folder is not None:
            return Split.load, (self.folder,)
        return Split, (self.token_ids, self.offsets, self.head, self.tail, self.labels)


def encode_records(records: list[Record], tokenize, to_ids, label_index: dict[str, int],
                   max_len: int) -> tuple[Split, list[list]]:
    """Tokenize and index records, with each one's tokens; ``to_ids`` None: ids later, once a
    vocabulary exists."""
    tokenized = [tokenize(rec, max_len) for rec in records]
    all_tokens = [tok.tokens for tok in tokenized]
    lengths = np.array([len(t) for t in all_tokens], dtype=np.int64)
    ids = [] if to_ids is None else [i for toks in all_tokens for i in to_ids(toks)]
    split = Split(
        token_ids=np.asarray(ids, dtype=np.int32),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        head=np.asarray([tok.head for tok in tokenized], dtype=np.int32).reshape(-1, 2),
        tail=np.asarray([tok.tail for tok in tokenized], dtype=np.int32).reshape(-1, 2),
        labels=np.asarray([label_index.get(r.relation, -1) if r.relation is not None else -1
                           for r in records], dtype=np.int64),
    )
    return split, all_tokens
