"""A training run's options: nested dataclasses with typed defaults, each field's help and
choices stated once (``_opt``). config/load.py makes a ``Config`` from files and ``key=value``;
config/checks.py checks it once."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from reltrain.runtime.devices import AMP_SETTINGS
from reltrain.runtime.errors import UserError

# Choices stated once: the config checks, the command line and the option objects use these.
RUNTIMES = ("torch", "onnx")
SWITCH = ("auto", "true", "false")  # log.progress, log.tensorboard, --progress
SELECT_METRICS = ("auto", "macro_f1", "micro_f1", "positive_micro_f1", "positive_macro_f1",
                  "semeval_macro_f1", "loss", "entities_f1", "relations_strict_f1",
                  "relations_boundaries_f1", "triples_f1")
TASKS = ("classify", "extract")


@dataclass(frozen=True)
class Bound:
    """The values a number option may take, and how to say so ("at least 1")."""

    ok: Callable[[float], bool]
    words: str


AT_LEAST_1 = Bound(lambda v: v >= 1, "at least 1")
NOT_NEGATIVE = Bound(lambda v: v >= 0, ">= 0")
POSITIVE = Bound(lambda v: v > 0, "positive")
DROPOUT = Bound(lambda v: 0 <= v < 1, "in [0, 1)")
# A config may come from a stranger's checkpoint: no model of 10^12 widths or layers.
MAX_WIDTH, MAX_LAYERS = 65536, 256
WIDTH = Bound(lambda v: 1 <= v <= MAX_WIDTH, f"between 1 and {MAX_WIDTH}")
LAYERS = Bound(lambda v: 1 <= v <= MAX_LAYERS, f"between 1 and {MAX_LAYERS}")


def check_fields(options, prefix: str = "--") -> None:
    """Each field of the dataclass ``options`` holds one of its ``choices`` and lies within its
    ``bound`` (metadata), nested ones too: every option's own check, in one loop. With the prefix
    ``--`` a field is named as its flag (``--top-k``)."""
    for f in dataclasses.fields(options):
        value, choices, bound = getattr(options, f.name), f.metadata.get("choices"), f.metadata.get("bound")
        name = prefix + (f.name.replace("_", "-") if prefix == "--" else f.name)
        if dataclasses.is_dataclass(value):
            check_fields(value, f"{prefix}{f.name}.")
        elif choices and value not in choices:
            raise UserError(f"{name} must be {', '.join(choices[:-1])} or {choices[-1]}, "
                            f"not '{value}'")
        elif bound and value is not None and not bound.ok(value):
            shown = value if isinstance(value, int) else f"{value:g}"
            raise UserError(f"{name} must be {bound.words}, not {shown}")


def _opt(default, help: str, choices: tuple | None = None, bound: Bound | None = None):
    """An option with its help, and its only values where it has a fixed set or a range
    (``check_fields`` refuses any other)."""
    meta = {"help": help, "choices": choices, "bound": bound}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    train: str = _opt("", "training file (.csv or .jsonl); empty: the bundled English example")
    valid: str = _opt("", "validation file; empty with data.train set: no validation")
    test: str = _opt("", "test file, scored once with the best checkpoint")
    labels: str = _opt("", "label file (relation.csv or one label per line); empty: from data.train")
    language: str = _opt("en", "zh or en", ("zh", "en"))
    tokenizer: str = _opt("auto", "auto (zh: jieba, en: word; task=extract: zh char, en "
                                  "treebank), jieba, char, word (at every punctuation mark) or "
                                  "treebank (U.S., Calif., Bin-Nun, 1,000 whole; 's apart)",
                          ("auto", "jieba", "char", "word", "treebank"))
    lowercase: bool = _opt(True, "lower-case English tokens")
    max_len: int = _opt(200, "tokens kept per sentence; the window is placed around the entities",
                        bound=Bound(lambda v: 8 <= v <= 1_000_000, "between 8 and 1000000"))
    min_freq: int = _opt(2, "a training token needs this many occurrences to enter the vocabulary",
                         bound=AT_LEAST_1)
    max_vocab: int = _opt(0, "the most frequent training tokens kept (after min_freq); 0: all",
                          bound=Bound(lambda v: v >= 0, "0 (no cap) or more"))
    pos_limit: int = _opt(30, "relative positions to head/tail are clipped to [-pos_limit, pos_limit]",
                          bound=Bound(lambda v: 1 <= v <= 100_000, "between 1 and 100000"))
    skip_bad_rows: bool = _opt(False, "skip invalid rows (and report them) instead of stopping")
    encoding: str = _opt("utf-8", "the data and label files' text encoding: utf-8 (a BOM is "
                                  "allowed), gbk, gb18030, utf-16, ...")
    cache_dir: str = _opt("", "preprocessing cache; empty: $XDG_CACHE_HOME/reltrain")
    bucket: bool = _opt(True, "group training batches by similar length: less padding, faster "
                              "(docs/benchmarks.md)")
    num_workers: int = _opt(0, "DataLoader worker processes (batches are built vectorised)",
                            bound=NOT_NEGATIVE)
    preprocess_workers: int = _opt(0, "processes that tokenize for the cache; 0: one per core (<= 8)",
                                   bound=Bound(lambda v: v >= 0, "0 (one per core) or more"))


@dataclass
class CNNConfig:
    kernel_sizes: list[int] = _opt([3, 5, 7], "odd convolution widths")
    num_filters: int = _opt(128, "filters per kernel size", bound=WIDTH)
    activation: str = _opt("relu", "relu, gelu or tanh", ("relu", "gelu", "tanh"))


@dataclass
class BiLSTMConfig:
    hidden: int = _opt(150, "hidden size per direction", bound=WIDTH)
    layers: int = _opt(2, "stacked layers", bound=LAYERS)
    pooling: str = _opt("attention", "attention (Att-BLSTM), max or last",
                        ("attention", "max", "last"))


@dataclass
class TransformerConfig:
    dim: int = _opt(128, "model width", bound=WIDTH)
    layers: int = _opt(3, "encoder layers", bound=LAYERS)
    heads: int = _opt(4, "attention heads", bound=WIDTH)
    ff: int = _opt(256, "feed-forward size", bound=WIDTH)
    positions: str = _opt("sinusoidal", "sinusoidal or learned token positions",
                          ("sinusoidal", "learned"))
    dropout: float = _opt(0.1, "dropout inside the encoder layers", bound=DROPOUT)


@dataclass
class LMConfig:
    pretrained: str = _opt("", "local folder of a Hugging Face encoder (BERT, RoBERTa, MiniLM...)")
    pooling: str = _opt("entity", "entity (head and tail start markers) or cls",
                        ("entity", "cls"))
    markers: str = _opt("plain", "plain entity markers, or typed (from head_type/tail_type "
                                  "columns)", ("plain", "typed"))
    add_chars: int = _opt(2, "characters the tokenizer reads as [UNK] and seen this often in the "
                             "training text get their own token, learned at train.lr (0: off)",
                       bound=NOT_NEGATIVE)
    dropout: float = _opt(0.1, "dropout before the classifier", bound=DROPOUT)


@dataclass
class ModelConfig:
    name: str = _opt("cnn", "encoder: cnn, pcnn, bilstm, transformer or lm (task=extract: bilstm "
                            "or lm; bilstm by default)")
    word_dim: int = _opt(100, "word embedding size", bound=WIDTH)
    pos_dim: int = _opt(10, "size of each of the two position embeddings", bound=WIDTH)
    dropout: float = _opt(0.5, "dropout before the classifier (model.lm.dropout for lm)",
                          bound=DROPOUT)
    multi_label: str = _opt("auto", "several relations per pair (one sigmoid per relation, each "
                                    "with a threshold chosen on validation): auto (where a data "
                                    "row gives its relation as a list; the model folder keeps "
                                    "the choice), true or false", SWITCH)
    word_vectors: str = _opt("", "word2vec/GloVe file (.txt, or .bin for binary word2vec) to start from")
    freeze_embeddings: bool = _opt(False, "keep word_vectors fixed during training")
    cnn: CNNConfig = field(default_factory=CNNConfig)  # also pcnn's
    bilstm: BiLSTMConfig = field(default_factory=BiLSTMConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)
    lm: LMConfig = field(default_factory=LMConfig)

    @property
    def pretrained_encoder(self) -> bool:
        """A pretrained encoder (``lm``): AdamW with its own learning rate, the linear schedule
        under ``auto``, bf16 where the device computes it, its own tokenizer."""
        return self.name == "lm"


@dataclass
class TrainConfig:
    epochs: int = _opt(10, "passes over the training data", bound=AT_LEAST_1)
    batch_size: int = _opt(32, "examples per process and micro-batch", bound=AT_LEAST_1)
    accum_steps: int = _opt(1, "micro-batches per optimizer step; global batch = world size x "
                               "batch_size x accum_steps", bound=AT_LEAST_1)
    global_batch_size: int = _opt(0, "examples per optimizer step on any hardware: accum_steps is "
                                     "derived from it; 0: world size x batch_size x accum_steps",
                                  bound=Bound(lambda v: v >= 0, ">= 0 (0: derived)"))
    eval_batch_size: int = _opt(64, "examples per evaluation batch (larger ones cost memory and "
                                    "saved no time: docs/benchmarks.md)", bound=AT_LEAST_1)
    lr: float = _opt(1e-3, "learning rate (for lm: of the classifier head; 5e-3 by default for "
                           "task=extract with bilstm)", bound=POSITIVE)
    encoder_lr: float = _opt(3e-5, "lm: learning rate of the pretrained encoder", bound=POSITIVE)
    weight_decay: float = _opt(0.0, "weight decay (lm: AdamW, not on biases and LayerNorm)",
                               bound=NOT_NEGATIVE)
    schedule: str = _opt("auto", "auto (lm: linear, else plateau), plateau (on the selection "
                                 "metric) or linear", ("auto", "plateau", "linear"))
    warmup_ratio: float = _opt(0.1, "linear schedule: share of the steps spent warming up",
                               bound=DROPOUT)
    amp: str = _opt("auto", "mixed precision for training, evaluation and test: auto (lm: bf16 on a "
                            "GPU or CPU with bf16 arithmetic, else fp32), off, bf16 or fp16 (CUDA)",
                   AMP_SETTINGS)
    lr_factor: float = _opt(0.5, "ReduceLROnPlateau factor (on the selection metric)",
                            bound=Bound(lambda v: 0 < v < 1, "in (0, 1)"))
    lr_patience: int = _opt(2, "ReduceLROnPlateau patience in epochs", bound=NOT_NEGATIVE)
    grad_clip: float = _opt(5.0, "clip the gradient norm to this; 0: off", bound=NOT_NEGATIVE)
    sparse_embeddings: str = _opt("auto", "update only the word-embedding rows a step used "
                                          "(SparseAdam), so a step costs the same at any "
                                          "vocabulary size: auto (on a CPU, for reltrain's own "
                                          "encoders), true or false", SWITCH)
    early_stopping: int = _opt(0, "stop after this many epochs without improvement; 0: off",
                               bound=Bound(lambda v: v >= 0, ">= 0 (0: off)"))
    select_metric: str = _opt("auto", "validation figure that picks checkpoints/best and drives the LR "
                                      "plateau and early stopping: auto (positive_micro_f1 where "
                                      "the labels have a negative relation, else macro_f1), "
                                      "macro_f1, micro_f1, positive_micro_f1, positive_macro_f1, "
                                      "semeval_macro_f1 (directed labels) or loss", SELECT_METRICS)
    class_weights: str = _opt("none", "none or balanced (inverse class frequency in the loss)",
                              ("none", "balanced"))
    seed: int = _opt(1, "seed for python, numpy and torch")


@dataclass
class EvalConfig:
    negative_label: str = _opt("auto", "the 'no relation' label, left out of the positive figures "
                                       "(TACRED's scoring): auto (the one label named no_relation, "
                                       "NA, None, Other, Others, 无关系 or 无), none, or a label")


@dataclass
class DistConfig:
    strategy: str = _opt("auto", "auto (ddp under a launcher, else single), single, ddp or dp",
                         ("auto", "single", "ddp", "dp"))
    backend: str = _opt("auto", "auto (nccl on CUDA, gloo on CPU), nccl or gloo",
                        ("auto", "nccl", "gloo"))
    timeout_s: int = _opt(1800, "seconds a collective may wait before the job fails", bound=POSITIVE)
    find_unused_parameters: bool = _opt(False, "for encoders with parameters a step may not use")
    dp_devices: list[int] = _opt([], "GPU ids for strategy=dp; empty: all visible")


@dataclass
class ExtractConfig:
    max_width: int = _opt(10, "task=extract: the widest entity span, in units (words; characters "
                              "for Chinese)", bound=Bound(lambda v: 1 <= v <= 64, "between 1 and 64"))
    threshold: float = _opt(0.5, "task=extract: a relation is answered where its probability "
                                 "reaches this (each relation's own where tune_thresholds "
                                 "chose one)", bound=Bound(lambda v: 0 < v < 1, "in (0, 1)"))
    tune_thresholds: bool = _opt(True, "task=extract: each validation chooses every relation's "
                                       "threshold (0.05 to 0.95) for its best validation F1; the "
                                       "model keeps them with its weights")
    hidden: int = _opt(200, "task=extract with reltrain's own encoder: the BiLSTM's width, "
                            "both directions", bound=Bound(lambda v: 2 <= v <= MAX_WIDTH and v % 2 == 0,
                                                           f"an even number between 2 and {MAX_WIDTH}"))
    overlap: str = _opt("auto", "task=extract: flat (a mention that overlaps a better-scoring one "
                                "is dropped), nested (kept) or auto (nested where a fifth or "
                                "more of the training sentences have overlapping mentions; the "
                                "model folder keeps the choice)", ("auto", "flat", "nested"))
    mentions: str = _opt("spans", "task=extract: how mentions are found: spans (every span of at "
                                  "most max_width units is classified; SpERT's) or tags (each "
                                  "unit is tagged as the first or a later unit of a mention of a "
                                  "type, or outside: flat, any width, several times faster)",
                         ("spans", "tags"))
    symmetric: str = _opt("auto", "task=extract: relations that hold in either order (trained both "
                                  "ways, answered and counted once), comma-separated; auto: "
                                  "those a SpERT types file in data.labels marks symmetric, "
                                  "none without one; the model folder keeps them")
    entity_weight: float = _opt(0.05, "task=extract: the extra weight of the entity spans' own "
                                      "mean loss (docs/extraction.md)", bound=NOT_NEGATIVE)
    negatives: int = _opt(16, "task=extract with mentions=tags: up to this many of the "
                             "tagger's own mentions that are no gold entity join each training "
                             "sentence's pairs, as relating to nothing (docs/extraction.md); "
                             "0: the gold entities' pairs only", bound=NOT_NEGATIVE)
    shapes: bool = _opt(False, "task=extract: each unit's shape (lower case, capitalised, "
                               "capitals, digits, mixed, other) is added to its state: the "
                               "capitals a lowercasing encoder (MiniLM's) never sees")
    sentences: str = _opt("auto", "task=extract, prediction: split (each sentence of a text is "
                                  "answered alone, by sentencex's cuts) or whole (a text is read "
                                  "whole); auto: split unless over 1 in 20 training relations "
                                  "hold between two sentences; the model folder keeps the choice "
                                  "(one of before: whole)", ("auto", "split", "whole"))
    context_layers: int = _opt(0, "task=extract: layers of a BiLSTM over the encoder's units "
                                  "whose output is added to each unit's state (CoNLL04 with "
                                  "MiniLM: entities F1 +0.6 to +1, docs/extraction.md); 0: none",
                               bound=Bound(lambda v: 0 <= v <= 4, "between 0 and 4"))


@dataclass
class CheckpointConfig:
    every_steps: int = _opt(0, "also checkpoint every N optimizer steps (mid-epoch); 0: epoch ends only",
                           bound=NOT_NEGATIVE)
    keep: int = _opt(2, "periodic checkpoints kept besides last and best", bound=AT_LEAST_1)


@dataclass
class LogConfig:
    progress: str = _opt("auto", "progress bars: auto (on a terminal), true or false", SWITCH)
    tensorboard: str = _opt("auto", "auto (if installed), true or false", SWITCH)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    task: str = _opt("classify", "classify (label a given pair of entities) or extract (find the "
                                 "entities of raw text and the relations among them)", TASKS)
    resume: str = _opt("auto", "auto (latest good checkpoint in output_dir, else fresh), never, or "
                       "a checkpoint folder")
    device: str = _opt("auto", "auto, cpu, cuda or cuda:N")
    output_dir: str = _opt("", "run directory; empty: runs/<time>-<model>")
    devices: int = _opt(0, "start N processes through torch.distributed.run; 0: this process only",
                       bound=NOT_NEGATIVE)


# The figures of a metrics dict where higher is better (the positive ones only where the labels
# have a negative relation); the validation loss, lower is better, can select too.
METRICS = ("macro_f1", "micro_f1", "macro_precision", "macro_recall", "accuracy",
           "positive_micro_f1", "positive_micro_precision", "positive_micro_recall",
           "positive_macro_f1", "semeval_macro_f1",
           # task=extract
           "entities_f1", "relations_strict_f1", "relations_boundaries_f1", "triples_f1")


def finite_number(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int past float's range (10**400)
        return False


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dotted(tree: dict, prefix: str = "") -> dict:
    """``{"model": {"cnn": {"num_filters": 8}}}`` as ``{"model.cnn.num_filters": 8}``."""
    out = {}
    for key, value in tree.items():
        out.update(dotted(value, f"{prefix}{key}.") if isinstance(value, dict)
                   else {prefix + key: value})
    return out


def option_keys() -> list[str]:
    """Every dotted option name, as ``key=value`` takes it."""
    return list(dotted(to_dict(Config())))


def describe_options() -> str:
    """The ``--help`` listing: every key with its default and meaning."""
    lines = []

    def walk(obj, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                shown = repr(value) if isinstance(value, str) else value
                lines.append(f"  {prefix + f.name:<28} {str(shown):<14} {f.metadata.get('help', '')}")

    walk(Config(), "")
    return "\n".join(lines)
