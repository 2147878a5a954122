"""The options of the commands that read a model, ``reltrain predict`` (``PredictOptions``) and
``reltrain evaluate`` (``EvaluateOptions``): every setting with its default, flag and help once,
checked once; the command line's parser is built from them (reltrain/options.py) and the Python
API (``run_predict``, ``run_evaluate``) builds the same objects."""

from __future__ import annotations

from dataclasses import dataclass

from reltrain.config import SWITCH, check_choices
from reltrain.errors import UserError
from reltrain.options import ModelOptions, opt

_MODEL = "a .pt checkpoint, a run directory (its best checkpoint) or an exported folder"


@dataclass
class PredictOptions(ModelOptions):
    checkpoint: str = opt(help=_MODEL)
    data: str | None = opt(None, ".csv or .jsonl (relation column optional); - reads standard "
                                 "input (JSON lines if its first row is an object, else CSV)",
                           positional=True)
    text: str | None = opt(None, "one sentence to label (with --head and --tail)", kind=str)
    head: str | None = opt(None, "head entity text", kind=str)
    tail: str | None = opt(None, "tail entity text", kind=str)
    head_offset: int | None = opt(None, "character offset of the head (default: first "
                                        "occurrence)", kind=int)
    tail_offset: int | None = opt(None, "character offset of the tail (default: first "
                                        "occurrence)", kind=int)
    top_k: int = opt(3, "alternatives per answer (default 3)")
    output: str | None = opt(None, "write JSON lines here instead of stdout", kind=str,
                             metavar="FILE")
    progress: str = opt("auto", "progress bar with rows/s (auto: on a terminal)", choices=SWITCH)
    workers: int | None = opt(None, "processes that predict chunks of rows, this one included "
                                    "(on a GPU: that tokenize them; default: one per core, at "
                                    "most 8; 0 or 1: this one alone)", kind=int, metavar="N")
    chunk_rows: int = opt(4096, "rows read, predicted and written at a time (default 4096)",
                          metavar="N")
    devices: int = opt(0, "predict in N local processes through torch.distributed.run (the "
                          "same output as one)", metavar="N")
    skip_bad_rows: bool = opt(False, "go on past invalid rows: a {\"line\", \"error\"} line "
                                     "in their place")

    def __post_init__(self):
        super().__post_init__()
        for name in ("top_k", "chunk_rows"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, not "
                                f"{getattr(self, name)}")
        for name in ("workers", "devices"):
            if (getattr(self, name) or 0) < 0:
                raise UserError(f"--{name} must be >= 0, not {getattr(self, name)}")
        check_choices(progress=(self.progress, SWITCH))
        given = [name for name in ("text", "head", "tail", "head_offset", "tail_offset")
                 if getattr(self, name) is not None]
        if self.data is not None and given:
            flags = " --".join(name.replace("_", "-") for name in given)
            raise UserError(f"give either a DATA file or --text with --head and --tail, not both "
                            f"(--{flags} with {self.data})")
        if self.data is None and (self.text is None or self.head is None or self.tail is None):
            raise UserError("give a DATA file, or --text with --head and --tail")


@dataclass
class EvaluateOptions(ModelOptions):
    checkpoint: str = opt(help=_MODEL)
    data: str = opt(help="labelled .csv or .jsonl")
    output: str | None = opt(None, "also write the JSON here", kind=str, metavar="FILE")
    predictions: str | None = opt(None, "also write every row with its gold and predicted "
                                        "relation (JSON lines)", kind=str, metavar="FILE")
    negative_label: str | None = opt(None, "the 'no relation' label for the positive figures "
                                           "(default: the model's eval.negative_label: auto, "
                                           "none or a label)", kind=str, metavar="NAME")
    skip_bad_rows: bool = opt(False, "go on past invalid rows (each is counted in "
                                     "skipped_rows)")
    batch_size: int = 256

    def __post_init__(self):
        super().__post_init__()
        if self.batch_size < 1:
            raise UserError(f"the batch size must be at least 1, not {self.batch_size}")
        if self.negative_label is not None and not self.negative_label.strip():
            raise UserError("--negative-label must be auto, none or a label, not empty")
