"""``Predictor``: a trained model with what it needs to read text, from a checkpoint or an
exported folder; it needs nothing of training."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np
import torch

from reltrain.artifacts.model_folder import Artifact, build_checked_model, load_artifact, model_source
from reltrain.config.train import RUNTIMES, Config
from reltrain.models import build_model
from reltrain.data.dataset import RelationDataset
from reltrain.data.inputs import TextEncoder, identity_encoder
from reltrain.data.split import Split, encode_records
from reltrain.data.schema import EntitySentence, Record, negative_index
from reltrain.runtime.errors import UserError, DataError
from reltrain.runtime.precision import FP32, Precision
from reltrain.runtime.precision import resolve as resolve_precision
from reltrain.evaluation.scoring import predict_probs
from reltrain.inference.fit import misfit
from reltrain.runtime.output import atomic_file
from reltrain.data.rows import pair_record, example
from reltrain.runtime.distributed import resolve_device

log = logging.getLogger(__name__)

class Predictor:
    """A trained model with its vocabulary, labels and tokenizer (``reltrain.load(path)``)."""

    def __init__(self, model: torch.nn.Module, config: Config, labels: list[str],
                 encoder: TextEncoder, device: torch.device, precision: Precision | None = None):
        self.model, self.config, self.labels = model.eval(), config, labels
        self.encoder, self.device = encoder, device
        self.precision = precision or FP32
        self.label_index = {name: i for i, name in enumerate(labels)}
        # several relations a pair: each answered above its threshold (None: the top one)
        self.multi_label = bool(getattr(model, "multi_label", False))
        self.answering = Answering.of(model, labels,
                                      negative_index(config.eval.negative_label, labels))
        self.card: dict = {}  # the model card's metrics ("test", "best"), when it has them
        # Tokens one example may have; None: any. Truncation keeps both entities whole, so two
        # entities far apart make an example longer than data.max_len: a server refuses those.
        self.max_tokens: int | None = None

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu",
                        runtime: str = "torch", amp: str = "auto") -> "Predictor":
        """``path``: a model folder (a checkpoint or an export) or a run directory;
        ``runtime="onnx"``: the folder's ``model.onnx``; ``amp`` as train.amp."""
        if runtime not in RUNTIMES:
            raise UserError(f"--runtime must be torch or onnx, not '{runtime}'")
        device = _device(device)
        path = model_source(path)  # a run directory: its best checkpoint
        artifact = load_artifact(path)
        if artifact.config.task == "extract":  # entities and relations of raw text
            if runtime == "onnx":
                raise UserError(f"{path}: an extraction model runs in torch only (--runtime torch)")
            # torch's span model and the pretrained tokenizer: for an extraction folder only
            from reltrain.inference.extractor import Extractor

            return Extractor.from_artifact(artifact, str(path), device, amp)
        onnx = _onnx_model(path, device) if runtime == "onnx" else None
        return cls.from_artifact(artifact, str(path), device=device, amp=amp, onnx=onnx)

    @classmethod
    def from_artifact(cls, artifact: Artifact, where: str, device: str | torch.device = "cpu",
                      amp: str = "auto", onnx: torch.nn.Module | None = None) -> "Predictor":
        """The predictor of a checked ``Artifact``; ``onnx``: an onnxruntime model to run instead
        of the weights."""
        device = _device(device)
        config, labels = artifact.config, artifact.labels
        encoder = identity_encoder(config.data, artifact.vocab, artifact.lm)
        if onnx is not None:
            if config.model.multi_label == "true":  # the graph gives logits; these read them
                if artifact.weights.get("thresholds", torch.zeros(0)).shape != (len(labels),):
                    raise UserError(f"{where}: model.safetensors has no relation thresholds, "
                                    f"which config.json's model.multi_label=true needs")
                onnx.multi_label = True
                onnx.register_buffer("thresholds", artifact.weights["thresholds"].float())
            if onnx.num_labels not in (None, len(labels)):
                raise UserError(f"{where}: model.onnx gives {onnx.num_labels} scores for "
                                f"{len(labels)} labels")
            model, precision = onnx, Precision(None, "onnxruntime runs the exported fp32 graph")
        else:
            precision = resolve_precision(amp, device, config.model.pretrained_encoder)
            model = build_checked_model(artifact, lambda: build_model(
                config.model, encoder.size, len(labels), config.data.pos_limit,
                hf_config=artifact.hf_config, added_tokens=encoder.added_tokens),
                where, f"a {config.model.name} model")
        predictor = cls(model.to(device), config, labels, encoder, device, precision)
        predictor.card = {"test": artifact.test, "best": artifact.best}
        return predictor

    # The pipeline: encode (every pair of a sentence, tokenized) -> score -> answers (regrouped
    # per item); ``answer`` is the three in a row. predict, evaluate, serve and reltrain.load use
    # these stages, whole or split across processes (a helper encodes, this process scores).

    def answer(self, items: list, top_k: int = 3, batch_size: int | None = None) -> list[dict]:
        """One answer per ``Record`` or ``EntitySentence``, in order: a record's relation, score
        and ``top_k`` alternatives; a sentence's with one such answer for every pair."""
        if isinstance(top_k, bool) or not isinstance(top_k, Integral) or top_k < 1:
            raise UserError(f"top_k must be a whole number of at least 1, not {top_k!r}")
        encoded = self.encode(items)
        return self.answers(encoded, self.score(encoded, batch_size), top_k)

    def encode(self, items: list, scored: bool = False) -> "Encoded":
        """The items' records (a sentence's pairs expanded), tokenized and indexed; ``scored``:
        their gold relations will be scored (a list of several for a model of one is an error)."""
        groups = expand(items)
        records = [rec for _, group in groups for rec in group]
        if not records:
            return Encoded(groups, records, None)
        enc = self.encoder
        split, _ = encode_records(records, enc.tokenize, enc.to_ids, self.label_index,
                                  self.config.data.max_len, self.multi_label, scored,
                                  self.answering.negative)
        if self.max_tokens is not None:
            lengths = np.diff(split.offsets)
            over = np.flatnonzero(lengths > self.max_tokens)
            if over.size:
                raise UserError(f"an entity pair spans {lengths[over[0]]} tokens from its head to "
                                f"its tail; this model reads at most {self.max_tokens}")
        return Encoded(groups, records, split)

    def score(self, encoded: "Encoded", batch_size: int | None = None,
              progress: bool = False) -> np.ndarray | None:
        """(N, C) probabilities of the encoded records, in order (None: there are none).
        ``batch_size``: on a CPU the model's ``cpu_batch_size`` or 128 (the fastest measured,
        docs/benchmarks.md), 256 on a GPU."""
        if encoded.split is None:
            return None
        data = RelationDataset(encoded.split, self.config.data.pos_limit, self.encoder.pad_id)
        on_cpu = self.device.type == "cpu"
        batch_size = batch_size or (getattr(self.model, "cpu_batch_size", 128) if on_cpu else 256)
        return predict_probs(self.model, data, batch_size, self.device, self.precision, progress)

    def answers(self, encoded: "Encoded", probs: np.ndarray | None, top_k: int = 3) -> list[dict]:
        """The answers of ``encode``'s items from their records' probabilities, in order."""
        return group_results(encoded.groups,
                             result_rows(encoded.records, probs, self.answering, top_k))

    def dataset(self, records: list[Record]) -> RelationDataset:
        """The records as a dataset, for distributed evaluation (evaluation/evaluate.py)."""
        return RelationDataset(self.encode(records, scored=True).split, self.config.data.pos_limit,
                               self.encoder.pad_id)

    def fit_warning(self, items: list) -> str | None:
        """Why the model may not read these texts (``misfit``), to warn with; None when they
        look like its data. It looks at the first rows only: a cost once per run, not per row."""
        sample = items[:256]

        def unknown() -> np.ndarray:  # the first records only: a sentence expands into pairs
            split = self.encode([rec for _, group in expand(sample) for rec in group][:256]).split
            return split.token_ids if split is not None else np.zeros(0, np.int64)

        return misfit(self.config.data.language, [item.text for item in sample],
                      unknown if self.encoder.unk_id is not None else None, self.encoder.unk_id)

    def predict_rows(self, rows, top_k: int = 3, batch_size: int | None = None) -> list[dict]:
        """One answer per row, in order, each row a dict as ``reltrain predict`` reads a JSON
        line: ``{"text", "h": {"pos": [start, end]}, "t": {...}}`` (or ``"token"``),
        ``{"text", "entities": [...]}`` (every pair), or ``{"text", "head", "tail"}`` with
        optional ``head_offset`` / ``tail_offset``. A bad row is a ``ValueError`` naming it:
        ``rows[3].h.pos: ...``."""
        if isinstance(rows, (str, dict)):  # its letters or its keys would be the rows
            raise UserError("predict_rows takes a list (or any iterable) of rows, each a dict; "
                            "predict_text(text, head, tail) answers one")
        items = []
        for i, row in enumerate(rows):
            try:
                items.append(example(row, "rows"))
            except DataError as exc:
                where = f"rows[{i}]" + (f".{exc.field}" if exc.field else "")
                raise ValueError(f"{where}: {exc.reason}") from None
        return self.answer(items, top_k, batch_size)

    def predict_text(self, text: str, head: str, tail: str, head_offset: int | None = None,
                     tail_offset: int | None = None, top_k: int = 3) -> dict:
        """The answer for one sentence and two entity strings (the first occurrence of each, or
        at the offsets), as ``reltrain predict --text`` gives it."""
        return self.answer([make_record(text, head, tail, head_offset, tail_offset)], top_k)[0]

    def extract(self, *_args, **_kwargs):
        raise UserError("this model labels given entity pairs (task=classify): predict_text(text, "
                        "head, tail) or predict_rows(rows); extract(text) is an extraction "
                        "model's (task=extract)")


@dataclass
class Encoded:
    """Items on their way through the pipeline: each with its records, and those tokenized."""

    groups: list[tuple[object, list[Record]]]
    records: list[Record]
    split: Split | None


def _device(device: str | torch.device) -> torch.device:
    return device if isinstance(device, torch.device) else resolve_device(device)


def _onnx_model(path: Path, device: torch.device):
    # onnxruntime's wrapper: for --runtime onnx only
    from reltrain.inference.onnx import ONNX_FILE, OnnxModel

    if not (path / ONNX_FILE).is_file():
        raise UserError(f"--runtime onnx needs a folder with {ONNX_FILE} ({path} has none): "
                        f"reltrain export CHECKPOINT OUT_DIR --format onnx")
    model = OnnxModel(path / ONNX_FILE, device)
    model.check()
    return model


def expand(items: list) -> list[tuple[object, list[Record]]]:
    """Each item with the records to predict for it: a record itself, every pair of an
    EntitySentence."""
    return [(item, item.pairs() if isinstance(item, EntitySentence) else [item]) for item in items]


@dataclass(frozen=True)
class Answering:
    """How probabilities become answers: the labels, the negative one's index, and for a model
    of several relations a pair each relation's threshold (None: the most probable label)."""

    labels: list[str]
    negative: int | None = None
    thresholds: np.ndarray | None = None

    @classmethod
    def of(cls, model, labels: list[str], negative: int | None) -> "Answering":
        """The answering of ``model``: its thresholds where it gives several relations a pair."""
        several = getattr(model, "multi_label", False)
        return cls(labels, negative, model.thresholds.cpu().numpy() if several else None)


def result_rows(records: list[Record], probs: np.ndarray | None, answering: Answering,
                top_k: int = 3) -> list[dict]:
    """One answer per record as ``reltrain predict`` writes it: the example, the top relation and
    its score, the ``top_k`` alternatives, and ``gold`` when the example has a relation; with
    thresholds, ``relations``: every relation at or above its threshold, best first.
    ``probs``: (N, C), ranked in one call for all rows, not one per row (docs/benchmarks.md)."""
    if not records:
        return []
    labels, shown = answering.labels, max(top_k, 1)
    order = np.argsort(-probs, axis=1, kind="stable")
    if answering.thresholds is None:  # only the top_k are read
        order = order[:, :shown]
    scores = np.take_along_axis(probs, order, axis=1)
    out = []
    for k, (rec, ranked, score) in enumerate(zip(records, order.tolist(), scores.tolist())):
        row = {} if rec.id is None else {"id": rec.id}
        row |= {"text": rec.text,
               "head": {"name": rec.head.name, "pos": [rec.head.start, rec.head.end]},
               "tail": {"name": rec.tail.name, "pos": [rec.tail.start, rec.tail.end]},
               "relation": labels[ranked[0]], "score": score[0]}
        if answering.thresholds is not None:
            row.update(_relations(probs[k], ranked, score, answering))
        row["top_k"] = [{"relation": labels[i], "score": v}
                        for i, v in zip(ranked[:shown], score[:shown])]
        if rec.relation is not None:
            row["gold"] = rec.relation if isinstance(rec.relation, str) else list(rec.relation)
        out.append(row)
    return out


def _relations(probs: np.ndarray, ranked: list[int], scores: list[float],
               answering: Answering) -> dict:
    """A pair's relations at or above their thresholds, best first; ``relation`` is the first, or
    the negative label (null without one) scored 1 minus the best relation's probability."""
    labels, negative = answering.labels, answering.negative
    hits = [{"relation": labels[i], "score": v} for i, v in zip(ranked, scores)
            if i != negative and probs[i] >= answering.thresholds[i]]
    if hits:
        return {"relation": hits[0]["relation"], "score": hits[0]["score"], "relations": hits}
    best = max((v for i, v in zip(ranked, scores) if i != negative), default=0.0)
    return {"relation": labels[negative] if negative is not None else None,
            "score": 1.0 - best, "relations": []}


def write_predictions(path: str, records: list[Record], probs: np.ndarray, answering: Answering,
                      top_k: int = 3) -> None:
    """Every example with its gold and predicted relation, one JSON line each, in order (a run's
    ``test_predictions.jsonl``, ``reltrain evaluate --predictions``)."""
    import json

    with atomic_file(path) as f:
        for row in result_rows(records, probs, answering, top_k):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def group_results(groups: list[tuple[object, list[Record]]], results: Iterable[dict]) -> list[dict]:
    """One answer per item of ``expand(items)`` from its records' results, in order: a record's
    own, or a sentence's with every pair."""
    results, out = iter(results), []
    for item, records in groups:
        if isinstance(item, EntitySentence):
            pairs = [next(results) for _ in records]
            out.append({**({} if item.id is None else {"id": item.id}), "text": item.text,
                        "entities": [{"name": e.name, "pos": [e.start, e.end]} for e in item.entities],
                        "pairs": [{k: v for k, v in p.items() if k not in ("text", "id")}
                                  for p in pairs]})
        else:
            out.append(next(results))
    return out


def make_record(text: str, head: str, tail: str, head_offset: int | None = None,
                tail_offset: int | None = None, cli: bool = False) -> Record:
    """A record from a sentence and entity strings (``rows.pair_record``); without an offset the
    first occurrence is used. Errors name the arguments as Python spells them, or with ``cli`` as
    the flags."""

    row = {"text": text, "head": head, "tail": tail, "head_offset": head_offset,
           "tail_offset": tail_offset}
    try:
        return pair_record(row, "<command line>")
    except DataError as exc:
        name = ("--" + exc.field.replace("_", "-") if cli else exc.field) if exc.field else ""
        raise UserError(f"{name}: {exc.reason}" if name else exc.reason) from None
