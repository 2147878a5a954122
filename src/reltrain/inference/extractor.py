"""A task=extract model for prediction: raw text in, entities and the relations among them out
(shared/DESIGN.md's answer shape). ``reltrain.load(M)`` gives one where M is an extraction model;
``reltrain predict`` and ``reltrain evaluate`` use it for such models. Its pipeline is the
Predictor's: encode (sentences into units and candidate spans) -> score -> answers."""

from __future__ import annotations

import logging
from itertools import islice

import numpy as np
import torch

from reltrain.artifacts.model_folder import Artifact, build_checked_model
from reltrain.data.answers import sentence_json
from reltrain.data.rows import text_value
from reltrain.data.extract_prepare import span_encoder
from reltrain.data.extraction import MAX_CHARS
from reltrain.data.schema import Annotated
from reltrain.data.spans import SpanDataset
from reltrain.data.vocab import UNK, Vocab
from reltrain.evaluation.span_decode import Answer, gathered_answers
from reltrain.inference.fit import misfit
from reltrain.inference.windows import merged, windows
from reltrain.runtime.errors import UserError
from reltrain.runtime.precision import resolve as resolve_precision
from reltrain.data.lm import LMTokenizer
from reltrain.models.spans import build_span_model
from reltrain.runtime.distributed import DistContext

log = logging.getLogger(__name__)

# Sentences encoded and answered at a time (a rank's share under torchrun), and a batch of
# them: sorted by length within a chunk of 1,024, batches of 128 pad little and give the BiLSTM
# bigger products (DuIE tagger, one thread: 0.82 ms a sentence against 0.97 at 256 and 32).
CHUNK = 1024
BATCH = 128


class Extractor:
    def __init__(self, model, artifact: Artifact, device: torch.device, precision,
                 lm: LMTokenizer | None = None):
        self.model, self.config, self.device, self.precision = model, artifact.config, device, precision
        self.labels, self.entity_types, self.lm = artifact.labels, artifact.entity_types, lm
        vocab = Vocab(artifact.vocab) if artifact.vocab else None
        self.encoder = span_encoder(self.config, self.entity_types, self.labels, vocab, lm)
        self.pad_id = lm.pad_id if lm is not None else 0
        self.unk_id = lm.hf.unk_token_id if lm is not None else vocab.encode([UNK])[0]
        self.card = {"test": artifact.test, "best": artifact.best}
        self.windowed = 0  # texts with a sentence longer than data.max_len units (read in windows)

    @classmethod
    def from_artifact(cls, artifact: Artifact, where: str, device: torch.device,
                      amp: str = "auto") -> "Extractor":
        cfg, lm = artifact.config, artifact.lm
        lm = LMTokenizer.from_files(lm["files"], lm["types"], lm.get("added")) if lm else None
        # the tokenizer's size, as the run that trained it had it
        vocab_size = len(artifact.vocab) if artifact.vocab else len(lm)
        # a folder of before relation thresholds were tuned: every relation at extract.threshold
        model = build_checked_model(artifact, lambda: build_span_model(
            cfg.model, cfg.extract, vocab_size, len(artifact.entity_types), len(artifact.labels),
            artifact.hf_config), where, "an extraction model", optional=("thresholds",))
        precision = resolve_precision(amp, device, cfg.model.pretrained_encoder)
        return cls(model.to(device).eval(), artifact, device, precision, lm)

    def dataset(self, sentences: list[Annotated], examples=None) -> SpanDataset:
        """``sentences`` as the model reads them (a gold file's, as validation does: a text
        longer than data.max_len units only in its beginning)."""
        examples = examples or [self.encoder(s, labelled=False) for s in sentences]
        return SpanDataset(examples, sentences, self.pad_id, self.entity_types, self.labels,
                           flat=self.config.extract.overlap == "flat", symmetric=self.symmetric)

    @property
    def symmetric(self) -> frozenset[str]:
        """The relations answered and counted in either order (none in folders from before)."""
        setting = self.config.extract.symmetric
        names = () if setting == "auto" else setting.split(",")
        return frozenset(n for n in names if n in self.labels)

    def answers(self, sentences: list[Annotated], batch_size: int = BATCH, ctx=None) -> list[Answer]:
        """Each text's answer, in order: sentence by sentence where the model was trained so, a
        long one in windows (inference/windows.py); ``ctx``: score across the ranks of a DDP
        job."""
        ctx = ctx or DistContext(device=self.device)
        # folders of before the choice was kept read a text whole, as they were trained
        language = self.config.data.language if self.config.extract.sentences == "split" else None
        parts, long = (zip(*(windows(self.encoder, s, language) for s in sentences))
                       if sentences else ((), ()))
        self.windowed += sum(long)
        every = [w for each in parts for w in each]
        answers = iter(gathered_answers(self.model, self.dataset([w.sentence for w in every],
                                                                 [w.example for w in every]),
                                        batch_size, ctx, self.precision) if every else [])
        return [merged(s, each, [next(answers) for _ in each], self.symmetric)
                for s, each in zip(sentences, parts)]

    def fit_warning(self, sentences: list[Annotated]) -> str | None:
        """Why the model may not read these sentences (``predictor.misfit``), from the first."""
        sample = sentences[:256]
        return misfit(self.config.data.language, [s.text for s in sample],
                      lambda: np.concatenate([self.encoder(s, labelled=False).ids for s in sample]
                                             or [np.zeros(0, np.int64)]), self.unk_id)

    def answer(self, sentences: list[Annotated], top_k: int = 1) -> list[dict]:
        """The answers as JSON objects, in order: what the server's batcher calls (``top_k``:
        the classification predictor's, unused here)."""
        return list(self.extract_rows(sentences))

    def extract(self, text: str) -> dict:
        """One text's entities and relations: ``{"text", "entities", "relations"}``."""
        return next(self._rows([text], BATCH, lambda _: "text"))

    def predict_text(self, *_args, **_kwargs):
        raise UserError("an extraction model (task=extract) finds the entities itself: "
                        "extract(text), or extract_rows(texts) for many")

    predict_rows = predict_text

    def extract_rows(self, texts, batch_size: int = BATCH):
        """Answers (as JSON objects) of any number of texts, a chunk at a time, in order: each a
        string (or a reader's ``Annotated`` sentence, its labels ignored)."""
        if isinstance(texts, str):  # its characters would be the texts
            raise UserError("extract_rows takes a list (or any iterable) of texts; extract(text) "
                            "answers one")
        return self._rows(texts, batch_size, lambda i: f"texts[{i}]")

    def _rows(self, texts, batch_size: int, name):
        """``extract_rows``; ``name(i)``: how an error names the i-th text."""
        it = (_sentence(t, name, i) for i, t in enumerate(texts))
        while chunk := list(islice(it, CHUNK)):
            for answer in self.answers(chunk, batch_size):
                yield sentence_json(answer.sentence, answer)


def _sentence(text, name, i: int) -> Annotated:
    """A text as a sentence without labels (a reader's ``Annotated``, its labels ignored): the
    API, the server and BatchModel come here unread by a file reader."""
    if isinstance(text, Annotated):
        return text
    return Annotated(text_value(text, name(i), None, None, MAX_CHARS), (), (), "<text>")
