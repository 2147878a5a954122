"""``reltrain predict``: label a file of any size, or one sentence, with a checkpoint or folder."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from collections.abc import Callable, Iterator

from reltrain import distributed as D
from reltrain import children
from reltrain.data.readers import STDIN
from reltrain.data.schema import Record
from reltrain.errors import SharedUserError, UserError
from reltrain.inference.predictor import Predictor, expand, make_record
from reltrain.output import check_output, output_stream
from reltrain.command_options import PredictOptions
from reltrain.launch import local_processes
from reltrain.stops import StopRequest

log = logging.getLogger("reltrain.predict")


def run_predict(checkpoint: str | None = None, data: str | None = None, text: str | None = None,
                head: str | None = None, tail: str | None = None, head_offset: int | None = None,
                tail_offset: int | None = None, output: str | None = None,
                options: PredictOptions | None = None, **settings) -> int:
    """Label a file (CSV/JSONL) or one sentence as JSON lines; returns how many lines were written.
    ``options`` (the command line's) or the arguments and ``settings`` (PredictOptions' fields).

    Chunks of ``chunk_rows`` rows are read, predicted (by ``workers`` processes on a CPU) and
    written in input order, so memory stays flat for a corpus of any size. ``--output`` is renamed
    into place at the end: an error or a stop (between chunks) leaves no half-written file."""
    from reltrain.config import DistConfig

    o = options or PredictOptions(checkpoint, data, text, head, tail, head_offset, tail_offset,
                                  output=output, **settings)
    checkpoint, data, output = o.checkpoint, o.data, o.output
    check_output(output, (data, checkpoint))
    stop, ctx = StopRequest().install(), None  # to the end: one line, exit 128 + the signal
    try:
        ctx = D.setup(o.device, DistConfig())
        # Under torchrun each rank predicts whole chunks of its own (chunk i on rank i % W) and
        # rank 0 writes them in input order: the rows meet in the same batches as in one process.
        predictor = Predictor.from_checkpoint(checkpoint, device=ctx.device, runtime=o.runtime,
                                              amp=o.amp)
        if ctx.is_main:
            log.info(predictor.precision.describe())
        if data == STDIN and ctx.distributed:  # the ranks would share one stream
            raise SharedUserError("DATA '-' (standard input) is read by one process: drop "
                                  "--devices / torchrun, or give a file")
        if o.top_k > len(predictor.labels):
            raise SharedUserError(f"--top-k must be between 1 and {len(predictor.labels)} (the "
                                  f"model's relations), not {o.top_k}")
        if data is None:
            record = make_record(o.text, o.head, o.tail, o.head_offset, o.tail_offset, cli=True)
            warn_misfit(predictor, [record])
            chunks = iter([Lines([json.dumps(r, ensure_ascii=False)
                                  for r in predictor.predict([record], o.top_k)])])
        else:
            mine = _predicted_chunks(predictor, data, o.top_k, o.skip_bad_rows, o.chunk_rows,
                                     o.workers, shard=(ctx.rank, ctx.world_size),
                                     source=(str(checkpoint), o.runtime, o.amp),
                                     stop=lambda: stop.check(_STOPPED))
            chunks = _gathered_in_order(mine, ctx)
        if not ctx.is_main:
            for _ in chunks:  # joins every round of the gather
                pass
            return 0
        return _write(chunks, o, stop)
    except Exception:
        stop.check(_STOPPED)  # a collective broke: the other ranks stopped on the same signal
        raise
    finally:
        stop.restore()
        if ctx is not None:
            D.teardown(ctx)


_STOPPED = "while predicting; the output is not complete"


def _write(chunks: Iterator[Lines], o: PredictOptions, stop: StopRequest) -> int:
    """The chunks' lines to ``o.output`` (renamed into place at the end) or stdout, in order,
    with a progress bar; returns how many lines were written."""
    from tqdm.auto import tqdm

    from reltrain.logs import progress_enabled

    written, bad = 0, 0
    # The bar counts what is written, so under torchrun it covers every rank's rows.
    with output_stream(o.output) as out, tqdm(desc="predict", unit="row", dynamic_ncols=True,
                                              disable=not progress_enabled(o.progress, True)) as bar, \
            stop.checked():  # between chunks
        for chunk in chunks:
            stop.check(_STOPPED)
            out.write("".join(line + "\n" for line in chunk.lines))
            out.flush()
            written += len(chunk.lines)
            bad += chunk.bad
            bar.update(len(chunk.lines))
    if bad:
        log.warning("%d bad row(s) in %s: each has a {\"line\": N, \"error\": ...} line in "
                    "its place", bad, o.data)
    return written


@dataclass
class Lines:
    """A chunk's output lines, and how many of them stand for bad rows."""

    lines: list[str]
    bad: int = 0


def _gathered_in_order(mine: Iterator[Lines], ctx: D.DistContext) -> Iterator[Lines]:
    """Every rank's chunks in input order (rank r holds chunks r, r + W, ...), on rank 0; a
    user error on any rank stops all of them alike."""
    if not ctx.distributed:
        yield from mine
        return
    done = False
    while True:
        part = None
        if not done:
            try:
                part = ("lines", next(mine))
            except StopIteration:
                done = True
            except UserError as exc:
                done, part = True, ("error", str(exc))
        parts = ctx.all_gather_objects(part)
        errors = [p[1] for p in parts if p and p[0] == "error"]
        if errors:
            raise UserError(errors[0]) if ctx.is_main else SharedUserError(errors[0])
        if all(p is None for p in parts):
            return
        for p in parts:
            if p:
                yield p[1]


def _predicted_chunks(predictor: Predictor, path: str, top_k: int, skip_bad_rows: bool,
                      chunk_rows: int, workers: int | None = None,
                      shard: tuple[int, int] = (0, 1),
                      source: tuple[str, str, str] | None = None,
                      stop: Callable[[], None] = lambda: None) -> Iterator[Lines]:
    """The output lines of ``path`` a chunk at a time, in order (``shard=(r, W)``: chunks r, r+W,
    ...); ``source`` (path, runtime, amp): where workers load the predictor; None: no workers;
    ``stop``: called between chunks and while waiting for workers, it may raise to give up."""
    from functools import partial
    from itertools import chain, islice

    from reltrain.data.readers import iter_rows
    from reltrain.inference import pool

    # The rows are split here; parsing them (``build``) is part of a chunk's work, done by
    # whichever process predicts or tokenizes it.
    rows = iter_rows(path, require_relation=False, entity_lists=True)

    def chunks():
        index = 0
        while chunk := list(islice(rows, chunk_rows)):
            stop()
            if index % shard[1] == shard[0]:
                yield chunk
            index += 1

    if workers is None:
        workers = children.default_workers(local_processes())
    mine = chunks()
    first = list(islice(mine, 2))  # one chunk: not worth starting workers that load the model
    mine = chain(first, mine)
    if first and shard[0] == 0:
        warn_misfit(predictor, _chunk_records(_parsed(first[0][:256], skip_bad_rows=True))[1])
    how = pool.mode(predictor, workers if source and len(first) > 1 else 0)
    if how == "predict":
        yield from pool.ordered_map(partial(_chunk_lines, top_k=top_k, skip_bad_rows=skip_bad_rows),
                                    mine, source, workers, stop)
    elif how == "encode":
        encode = partial(_encode_chunk, skip_bad_rows=skip_bad_rows)
        for parsed, split in pool.ordered_map(encode, mine, source, workers, stop):
            yield _lines(predictor, parsed, top_k, split)
    else:
        for chunk in mine:
            yield _chunk_lines(predictor, chunk, top_k, skip_bad_rows)


def warn_misfit(predictor: Predictor, records: list[Record]) -> None:
    """A warning when the rows are not in the model's language or mostly unknown to it: the
    answers would all be one relation, with exit status 0 and nothing else to notice."""
    warning = predictor.fit_warning(records)
    if warning:
        log.warning("%s", warning)


def _parsed(chunk: list, skip_bad_rows: bool) -> list:
    """``(line, record or EntitySentence or DataError)`` for each ``(line, build)``."""
    from reltrain.errors import DataError

    out = []
    for line, build in chunk:
        try:
            out.append((line, build()))
        except DataError as exc:
            if not skip_bad_rows:
                raise
            out.append((line, exc))
    return out


def _chunk_records(parsed: list) -> tuple[list, list[Record]]:
    from reltrain.errors import DataError

    groups = expand([item for _, item in parsed if not isinstance(item, DataError)])
    return groups, [rec for _, records in groups for rec in records]


def _encode_chunk(predictor: Predictor, chunk: list, skip_bad_rows: bool):
    parsed = _parsed(chunk, skip_bad_rows)
    _, flat = _chunk_records(parsed)
    return parsed, predictor.encode(flat) if flat else None


def _chunk_lines(predictor: Predictor, chunk: list, top_k: int, skip_bad_rows: bool) -> Lines:
    return _lines(predictor, _parsed(chunk, skip_bad_rows), top_k)


def _lines(predictor: Predictor, parsed: list, top_k: int, split=None) -> Lines:
    """The output lines of a chunk of ``(line number, record or DataError)``."""
    from reltrain.errors import DataError

    groups, flat = _chunk_records(parsed)
    if split is None and flat:
        split = predictor.encode(flat)
    probs = predictor.split_probabilities(split) if flat else []
    results = iter(predictor.regroup(groups, iter(probs), top_k))
    return Lines([json.dumps({"line": line, "error": str(item)} if isinstance(item, DataError)
                             else next(results), ensure_ascii=False) for line, item in parsed],
                 sum(isinstance(item, DataError) for _, item in parsed))
