"""``reltrain preprocess``: build (or confirm) the preprocessing cache and report it."""

from __future__ import annotations

from reltrain.config.train import Config
from reltrain.data.preprocess import PREPROCESSING, prepare_run
from reltrain.data.examples import use_example_data
from reltrain.runtime.launch import local_processes
from reltrain.runtime.logs import progress_enabled
from reltrain.runtime.stops import StopRequest


def run_preprocess(cfg: Config) -> dict:
    """Tokenize, index and cache the configured files; prints what was cached and where."""
    use_example_data(cfg.data)
    with StopRequest() as stop:  # a stop signal ends the tokenizing child and the command
        prepared = prepare_run(cfg, progress_enabled(cfg.log.progress, True),
                               lambda: stop.check(PREPROCESSING), local_processes())
    meta = prepared.meta
    info = {"cache": str(prepared.cache_path) if prepared.cache_path else None,
            "reused": prepared.reused, "rows": meta["rows"],
            "skipped": {k: len(v) for k, v in meta["skipped"].items()},
            "truncated": meta["truncated"], "vocab_size": prepared.vocab_size,
            "relations": len(prepared.labels), "tokenizer": meta["tokenizer"]}
    for split, reasons in meta["skipped"].items():
        for reason in reasons[:20]:
            print(f"skipped ({split}): {reason}")
    state = "reused" if prepared.reused else "built"
    where = prepared.cache_path or "(not cached: the cache location is not writable)"
    print(f"{state} {where}: " + ", ".join(f"{k} {v}" for k, v in meta["rows"].items())
          + f" rows; vocabulary {info['vocab_size']}; {info['relations']} relations")
    return info
