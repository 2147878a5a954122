"""Tokenizing prediction input in worker processes, in parallel with the model.

jieba runs at a few thousand sentences a second on one core, slower than the CNN predicts, so
``reltrain predict`` hands each chunk of rows to a pool of processes that tokenize and index it
while the main process runs the model on the chunk before. The workers import no torch and
hold only the tokenizer and vocabulary; results come back in submission order.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

from reltrain.data.preprocess import Split, encode_records

_STATE = None  # in a worker: (encoder, label_index, max_len)


def _start_worker(data_cfg: dict, identity: dict, label_index: dict) -> None:
    global _STATE
    from reltrain.config import DataConfig
    from reltrain.data.inputs import identity_encoder

    cfg = DataConfig(**data_cfg)
    encoder, _, _ = identity_encoder(identity, cfg)
    _STATE = (encoder, label_index, cfg.max_len)


def _encode(records: list) -> Split:
    encoder, label_index, max_len = _STATE
    split, _, _ = encode_records(records, encoder.tokenize, encoder.to_ids, label_index, max_len)
    return split


def default_workers() -> int:
    return min(os.cpu_count() or 1, 8)


def usable(identity: dict) -> bool:
    """Worker processes are started by fork (quick, no re-import); a pretrained tokenizer's own
    threads do not survive fork well, so those encode in the main process."""
    return (bool(identity.get("vocab")) and not identity.get("lm")
            and "fork" in multiprocessing.get_all_start_methods())


def encode_in_workers(chunks: Iterable[tuple[object, list]], workers: int, data_cfg: dict,
                      identity: dict, label_index: dict) -> Iterator[tuple[object, Split]]:
    """For each ``(tag, records)``, ``(tag, split)`` in the same order; at most two chunks per
    worker are in flight, so memory stays bounded whatever the input's size."""
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                             initargs=(data_cfg, identity, label_index)) as pool:
        pending: deque = deque()
        try:
            for tag, records in chunks:
                pending.append((tag, pool.submit(_encode, records) if records else None))
                if len(pending) > 2 * workers:
                    tag, future = pending.popleft()
                    yield tag, future.result() if future else None
            while pending:
                tag, future = pending.popleft()
                yield tag, future.result() if future else None
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
