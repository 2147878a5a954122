"""Load once, predict a batch of rows: a picklable callable for corpora past one machine. It
holds only where the model is until its first batch, so it travels to Ray's actors (``map_batches``)
and Spark's executors (``predict_batch_udf``) as a few bytes, and each loads the model once
(docs/extraction.md shows both). Both tasks: an extraction model answers a ``text`` column; a
classification model the rows ``predict_rows`` takes (``text`` with ``head`` and ``tail``,
optionally ``head_offset`` / ``tail_offset``). Answers are JSON text, one per row."""

from __future__ import annotations

import json


class BatchModel:
    def __init__(self, path: str, device: str = "cpu", amp: str = "auto"):
        self.path, self.device, self.amp = str(path), device, amp
        self._model = None

    def __getstate__(self) -> dict:  # what travels: where the model is, never the model
        return {"path": self.path, "device": self.device, "amp": self.amp, "_model": None}

    @property
    def model(self):
        if self._model is None:
            from reltrain.inference.predictor import Predictor  # numpy, torch, tqdm only when used

            self._model = Predictor.from_checkpoint(self.path, device=self.device, amp=self.amp)
        return self._model

    def __call__(self, batch: dict) -> dict:
        """``batch``: column name -> values (Ray's numpy or pandas batch as a dict); returns it
        with an ``answer`` column of JSON text, row by row."""
        columns = {k: list(v) for k, v in dict(batch).items()}
        n = len(next(iter(columns.values()), []))
        rows = [{k: _plain(v[i]) for k, v in columns.items()} for i in range(n)]
        return {**columns, "answer": self.answer_rows(rows)}

    def predict_texts(self, texts) -> list[str]:
        """An extraction model's answers for a column of sentences (Spark's
        ``predict_batch_udf`` hands one numpy array per input column)."""
        return self.answer_rows([{"text": _plain(t)} for t in texts])

    def answer_rows(self, rows: list[dict]) -> list[str]:
        model = self.model
        if getattr(model, "entity_types", None) is not None:  # an extraction model
            answers = model.extract_rows(r.get("text") for r in rows)  # None is no "None"
        else:
            answers = model.predict_rows(rows)
        return [json.dumps(a, ensure_ascii=False) for a in answers]


def _plain(value):
    """numpy scalars as Python values (JSON and the row readers take those)."""
    return value.item() if hasattr(value, "item") and callable(value.item) else value
