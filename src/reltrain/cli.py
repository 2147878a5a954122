"""Command line: parse once, dispatch to run_* functions. User errors exit 2 without a traceback."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

from reltrain.commands.compare import CompareOptions
from reltrain.runtime.errors import Preempted, UserError
from reltrain.commands.inspect import InspectOptions
from reltrain.runtime.launch import adopt_local_rank_flag, first_rank, run_local_workers
from reltrain.config.commands import (EvaluateOptions, ExportOptions, PredictOptions, ServeOptions,
                              add_to, from_args)
from reltrain.commands.report import ReportOptions
from reltrain import __version__
from reltrain.config.train import describe_options

_CONFIG_EPILOG = """\
options (key=value, after --config FILE; nested keys use dots):
{options}

examples:
  reltrain train
  reltrain train data.train=train.csv data.valid=valid.csv data.test=test.csv \\
      data.labels=relation.csv data.language=zh model.name=pcnn train.epochs=20
  torchrun --standalone --nproc_per_node=2 -m reltrain train --config configs/deepke-zh-cnn.yaml
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reltrain", description="Train and use relation-extraction models.")
    parser.add_argument("--version", action="version", version=f"reltrain {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    epilog = _CONFIG_EPILOG.format(options=describe_options())
    for name, text in (("train", "train a model (one process, or one per torchrun worker)"),
                       ("preprocess", "tokenize and cache the data only")):
        p = sub.add_parser(name, help=text, description=text, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--config", metavar="FILE", help="YAML or JSON config file")
        p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
        # torch.distributed.launch passes --local-rank (torch >= 2) or --local_rank (older).
        p.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int,
                       help=argparse.SUPPRESS)
    for name, options, text, description, _ in _COMMANDS:
        add_to(sub.add_parser(name, help=text, description=description), options)
    return parser


_COMMANDS = (  # name, options, help, description, the function that runs it
    ("inspect", InspectOptions, "check data before training: repeated rows, test sentences also "
                                "in train, untrained relations, balance", None,
     "reltrain.commands.inspect:run_inspect"),
    ("report", ReportOptions, "one offline HTML page of runs: figures, curves, F1 per relation, "
                              "confusion matrix, misclassified rows", None,
     "reltrain.commands.report:run_report"),
    ("compare", CompareOptions, "finished runs side by side: test figures, F1 per relation, the "
                                "options that differ", None, "reltrain.commands.compare:run_compare"),
    ("evaluate", EvaluateOptions, "metrics of a checkpoint on a labelled file (JSON)", None,
     "reltrain.commands.evaluate:run_evaluate"),
    ("predict", PredictOptions, "label a file or one sentence (JSON lines)", None, None),
    ("export", ExportOptions, "write a shareable model folder (safetensors + JSON + card)",
     "Write CHECKPOINT as a folder: model.safetensors, config.json (id2label), the vocabulary "
     "or tokenizer files, README.md.", "reltrain.commands.export:run_export"),
    ("serve", ServeOptions, "an HTTP JSON API with micro-batching (needs reltrain[serve])",
     "POST /predict (one example or a list), GET /health, GET /model. Concurrent requests are "
     "predicted in shared batches.", "reltrain.commands.serve:run_serve"),
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        key = unknown[0].split("=", 1)[0]
        hint = (f" (options are key=value without dashes: {unknown[0].lstrip('-')})"
                if key.startswith("--") and "." in key and args.command in ("train", "preprocess")
                else "")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    args.argv = argv
    from reltrain.runtime.logs import setup_console_logging  # only the command that runs loads its code

    setup_console_logging(first_rank())
    try:
        return _dispatch(args)
    except UserError as exc:
        if not exc.shared or first_rank():  # an agreed error
            print(f"reltrain: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Preempted as exc:
        if first_rank():
            print(f"reltrain: {exc}{_resume_hint(args, exc)}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        if first_rank():
            print("reltrain: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output left (`reltrain predict ... | head`): stop quietly, as the
        # shell's own tools do, and keep Python's exit-time flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # SIGPIPE


def _resume_hint(args, exc: Preempted) -> str:
    """The command that continues a stopped run: the same one, with the run's output_dir."""
    if not exc.checkpoint:
        return ""
    import shlex

    overrides = [o for o in args.overrides if not o.startswith("output_dir=")]
    devices = [o for o in overrides if o.startswith("devices=")]
    from reltrain.runtime.distributed import launched  # numpy, torch, tqdm only when used

    if launched() and not devices:
        return f"; to resume, run the same launch command with output_dir={exc.run_dir}"
    command = ["reltrain", "train", *(["--config", args.config] if args.config else []),
               *overrides, f"output_dir={exc.run_dir}"]
    return f"; to resume: {shlex.join(command)}"


@contextmanager
def _starting():
    """Imports and set-up while a stop signal is only noted: raised inside an extension module's
    import, the exception left numpy half-loaded (an ImportError in a torchrun worker)."""
    from reltrain.runtime.stops import StopRequest  # only the command that runs loads its code

    with StopRequest() as stop:
        yield
    stop.check("while starting; nothing to save")


def _dispatch(args) -> int:
    if args.command in ("train", "preprocess"):
        adopt_local_rank_flag(args.local_rank)
        with _starting():
            from reltrain.config.load import load_config  # only the command that runs loads its code
            from reltrain.runtime.distributed import launched  # numpy, torch, tqdm only when used
            from reltrain.commands.preprocess import run_preprocess  # numpy only when used
            from reltrain.commands.train import run_train  # numpy, torch, tqdm only when used
            from reltrain.training.run_dir import new_run_dir  # numpy, torch, tqdm only when used

            cfg = load_config(args.config, args.overrides)
            launch = args.command == "train" and cfg.devices > 1 and not launched()
            # The run directory is named here, so that a rerun can name it too.
            run_dir = [] if cfg.output_dir or not launch else [f"output_dir={new_run_dir(cfg)}"]
        if launch:
            config = ["--config", args.config] if args.config else []
            return run_local_workers(cfg.devices, ["train", *config, *args.overrides, *run_dir])
        if args.command == "preprocess":
            run_preprocess(cfg)
        else:
            run_train(cfg)
    elif args.command != "predict":
        import importlib

        _, options, _, _, runner = next(c for c in _COMMANDS if c[0] == args.command)
        module, function = runner.split(":")
        getattr(importlib.import_module(module), function)(options=from_args(options, args))
    else:
        options = from_args(PredictOptions, args)
        with _starting():
            from reltrain.commands.predict import run_predict  # only the command that runs loads its code
        if options.devices > 1:  # distributed imports torch, which run_predict's helpers also do
            from reltrain.runtime.distributed import launched  # numpy, torch, tqdm only when used

            if not launched():
                return run_local_workers(options.devices, args.argv)  # the workers see the launcher
        run_predict(options=options)
    return 0
