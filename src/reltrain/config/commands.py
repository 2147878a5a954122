"""A command's options as one dataclass: each field says its flag and help once (``opt``), the
command line's parser is built from the class (``add_to``), the command gets the class back
(``from_args``), and the class validates itself once, in ``__post_init__``; the Python API
(``run_predict``, ``run_evaluate``, ``export_model``, ``create_app``) takes the same object. The
options of the commands that read a model are here; inspect's, report's and compare's stand in
their own modules."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields

from reltrain.config.checks import check_encoding
from reltrain.config.train import (AT_LEAST_1, NOT_NEGATIVE, POSITIVE, RUNTIMES, SWITCH, Bound,
                                   check_fields)
from reltrain.runtime.devices import AMP_SETTINGS, check_device_name
from reltrain.runtime.errors import UserError


def opt(default=MISSING, help: str = "", *, metavar: str | None = None, flag: str | None = None,
        kind: type | None = None, choices: tuple | None = None, bound: Bound | None = None,
        positional: bool = False):
    """A field that is also a command-line option: ``--name-with-dashes`` unless ``flag`` says
    otherwise; a field without a default (or with ``positional``) is a positional argument, one
    whose default is ``[]`` takes one or more values; a bool is a switch that turns its default
    around (``--no-demo`` for a default of True); ``kind``: the type of a value whose default is
    None; ``choices`` and ``bound`` are the values it may take (``check_fields``)."""
    meta = {"help": help, "metavar": metavar, "flag": flag, "kind": kind, "choices": choices,
            "bound": bound, "positional": positional}
    if default == []:
        return field(default_factory=list, metadata=meta)
    return field(default=default, metadata=meta)


def add_to(parser: argparse.ArgumentParser, cls) -> None:
    """An argument for each field of ``cls`` made with ``opt``, in the order of the fields (those
    of ``ModelOptions`` last)."""
    for f in sorted(fields(cls), key=lambda f: f.kw_only):
        meta = f.metadata
        if "help" not in meta:
            continue  # set by the program, not on the command line
        dashed = f.name.replace("_", "-")
        if f.default_factory is list:
            parser.add_argument(f.name, nargs="+", help=meta["help"], metavar=meta["metavar"])
        elif f.default is MISSING or meta["positional"]:
            optional = {} if f.default is MISSING else {"nargs": "?", "default": f.default}
            parser.add_argument(f.name, help=meta["help"], metavar=meta["metavar"], **optional)
        elif isinstance(f.default, bool):
            flag = meta["flag"] or (f"--no-{dashed}" if f.default else f"--{dashed}")
            parser.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true",
                                help=meta["help"])
        else:
            parser.add_argument(meta["flag"] or f"--{dashed}", dest=f.name, default=f.default,
                                type=meta["kind"] or type(f.default), choices=meta["choices"],
                                metavar=meta["metavar"], help=meta["help"])


@dataclass(kw_only=True)
class ModelOptions:
    """How the commands that read a model (predict, evaluate, serve) run it."""

    device: str = opt("cpu", "cpu, cuda, cuda:N or auto (default: cpu)")
    runtime: str = opt("torch", "onnx: run an exported folder's model.onnx with onnxruntime",
                       choices=RUNTIMES)
    amp: str = opt("auto", "compute precision, as train.amp (auto: bf16 for a pretrained encoder "
                           "where the GPU or CPU has bf16 arithmetic, else fp32)",
                   choices=AMP_SETTINGS)

    def __post_init__(self):
        check_fields(self)
        check_device_name(self.device)


def from_args(cls, args: argparse.Namespace):
    """``cls`` from the parsed command line (its fields that the parser has)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


ENCODING_HELP = "the data file's text encoding (default utf-8; gbk, gb18030, utf-16, ...)"
_MODEL = ("a model folder (a checkpoint such as RUN/checkpoints/best, or an export) or a run "
          "directory (its best checkpoint)")


@dataclass
class PredictOptions(ModelOptions):
    checkpoint: str = opt(help=_MODEL)
    data: str | None = opt(None, ".csv or .jsonl (relation column optional); - reads standard "
                                 "input (JSON lines if its first row is an object, else CSV)",
                           positional=True)
    text: str | None = opt(None, "one sentence: its entities and relations (an extraction "
                                 "model), or the relation of --head and --tail", kind=str)
    head: str | None = opt(None, "head entity text", kind=str)
    tail: str | None = opt(None, "tail entity text", kind=str)
    head_offset: int | None = opt(None, "character offset of the head (default: first "
                                        "occurrence)", kind=int)
    tail_offset: int | None = opt(None, "character offset of the tail (default: first "
                                        "occurrence)", kind=int)
    top_k: int | None = opt(None, "alternatives per answer (default 3; a classifier's: an "
                                  "extraction model answers every relation above its threshold)",
                            kind=int, bound=AT_LEAST_1)
    output: str | None = opt(None, "write JSON lines here instead of stdout", kind=str,
                             metavar="FILE")
    progress: str = opt("auto", "progress bar with rows/s (auto: on a terminal)", choices=SWITCH)
    workers: int | None = opt(None, "processes that predict chunks of rows, this one included "
                                    "(on a GPU: that tokenize them; default: one per core, at "
                                    "most 8; 0 or 1: this one alone)", kind=int, metavar="N",
                                bound=NOT_NEGATIVE)
    chunk_rows: int | None = opt(None, "rows read, predicted and written at a time (default "
                                       "4096; an extraction model's 1024)", kind=int,
                                 metavar="N", bound=AT_LEAST_1)
    devices: int = opt(0, "predict in N local processes through torch.distributed.run (the "
                          "same output as one)", metavar="N", bound=NOT_NEGATIVE)
    skip_bad_rows: bool = opt(False, "go on past invalid rows: a {\"line\", \"error\"} line "
                                     "in their place")
    encoding: str = opt("utf-8", ENCODING_HELP, metavar="NAME")

    def __post_init__(self):
        super().__post_init__()
        check_encoding(self.encoding, "--encoding")
        given = [name for name in ("text", "head", "tail", "head_offset", "tail_offset")
                 if getattr(self, name) is not None]
        if self.data is not None and given:
            flags = " --".join(name.replace("_", "-") for name in given)
            raise UserError(f"give either a DATA file or --text with --head and --tail, not both "
                            f"(--{flags} with {self.data})")
        if self.data is None and self.text is None:
            raise UserError("give a DATA file, or --text (with --head and --tail for a model "
                            "that labels a given pair)")


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
    encoding: str = opt("utf-8", ENCODING_HELP, metavar="NAME")
    batch_size: int = field(default=256, metadata={"bound": AT_LEAST_1})

    def __post_init__(self):
        super().__post_init__()
        check_encoding(self.encoding, "--encoding")
        if self.negative_label is not None and not self.negative_label.strip():
            raise UserError("--negative-label must be auto, none or a label, not empty")


@dataclass
class ServeOptions(ModelOptions):
    model: str = opt(help="a model folder (a checkpoint or an export) or a run directory")
    host: str = opt("127.0.0.1", "address to listen on (default 127.0.0.1; 0.0.0.0 for every "
                                 "interface)")
    port: int = opt(8000, "(default 8000)", bound=Bound(lambda v: 0 <= v <= 65535, "from 0 to 65535"))
    max_batch: int = opt(64, "examples per model batch (default 64; 1: no micro-batching)",
                         metavar="N", bound=AT_LEAST_1)
    max_wait_ms: float = opt(0.0, "how long a batch waits for more requests (default 0: it takes "
                                  "what queued while the model was busy)", metavar="MS",
                             bound=NOT_NEGATIVE)
    workers: int = opt(1, "server processes, each with the model and the cores shared (default 1)",
                       metavar="N", bound=AT_LEAST_1)
    top_k: int = opt(3, "alternatives per answer (a request may ask ?top_k=N)", bound=AT_LEAST_1)
    max_items: int = opt(1024, "examples per request, each pair of a sentence's entities counting "
                               "(default 1024)", metavar="N", bound=AT_LEAST_1)
    max_text_chars: int = opt(10_000, "characters per text (default 10000)", metavar="N",
                              bound=AT_LEAST_1)
    max_request_chars: int = opt(1_000_000, "characters of text one request may ask to read, each "
                                            "example (every entity pair) reading its whole text; "
                                            "more: 413 (default 1000000)", metavar="N",
                                 bound=AT_LEAST_1)
    max_queue: int = opt(4096, "examples waiting for the model at most; more: 503 with "
                               "Retry-After (default 4096)", metavar="N", bound=AT_LEAST_1)
    max_connections: int = opt(1000, "open connections per worker process; more: 503 (default "
                                     "1000)", metavar="N", bound=AT_LEAST_1)
    body_timeout_s: float = opt(30.0, "a request body slower than this: 408 (default 30)",
                                metavar="S", bound=POSITIVE)
    drain_timeout_s: float = opt(30.0, "on SIGTERM/SIGINT, how long requests in flight may finish "
                                       "(default 30; a second signal stops at once)", metavar="S",
                                 bound=POSITIVE)
    access_log: bool = opt(False, "one JSON line per request on stderr (request id, status, time)")
    demo: bool = opt(True, "no demo page at GET / (the JSON API only)")
    max_body_bytes: int = field(default=1_000_000, metadata={"bound": AT_LEAST_1})
    # torch threads per process; 0: the cores shared among the workers
    threads: int = field(default=0, metadata={"bound": NOT_NEGATIVE})

    def __post_init__(self):
        super().__post_init__()
        if self.max_queue < self.max_items:
            raise UserError(f"--max-queue ({self.max_queue}) must hold at least one request of "
                            f"--max-items ({self.max_items}) examples")


EXPORT_FORMATS = ("safetensors", "onnx")


@dataclass
class ExportOptions:
    checkpoint: str = opt(help="a model folder (a checkpoint or an export) or a run directory")
    out_dir: str = opt(help="a new (or empty) folder", metavar="OUT_DIR")
    format: str = opt("safetensors", "onnx: also model.onnx, for --runtime onnx (needs "
                                     "reltrain[onnx])", choices=EXPORT_FORMATS)

    def __post_init__(self):
        check_fields(self)
        if not str(self.out_dir).strip():
            raise UserError("OUT_DIR must name the folder to write")
