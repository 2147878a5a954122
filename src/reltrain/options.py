"""A command's options as one dataclass: each field says its flag and help once (``opt``), the
command line's parser is built from the class (``add_to``), the command gets the class back
(``from_args``), and the class validates itself once, in ``__post_init__``; the Python API takes
the same object."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields

from reltrain.config import AMP_SETTINGS, RUNTIMES, check_choices


def opt(default=MISSING, help: str = "", *, metavar: str | None = None, flag: str | None = None,
        kind: type | None = None, choices: tuple | None = None, positional: bool = False):
    """A field that is also a command-line option: ``--name-with-dashes`` unless ``flag`` says
    otherwise; a field without a default (or with ``positional``) is a positional argument, one
    whose default is ``[]`` takes one or more values; a bool is a switch that turns its default
    around (``--no-demo`` for a default of True); ``kind``: the type of a value whose default is
    None."""
    meta = {"help": help, "metavar": metavar, "flag": flag, "kind": kind, "choices": choices,
            "positional": positional}
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
        check_choices(runtime=(self.runtime, RUNTIMES), amp=(self.amp, AMP_SETTINGS))


def from_args(cls, args: argparse.Namespace):
    """``cls`` from the parsed command line (its fields that the parser has)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})
