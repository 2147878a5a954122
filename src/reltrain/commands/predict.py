"""``reltrain predict``: label a file of any size, or one sentence, with a checkpoint or folder."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain, islice
from typing import TYPE_CHECKING

from reltrain.runtime import children
from reltrain.data.readers import STDIN, iter_rows
from reltrain.data.rows import text_value
from reltrain.runtime.errors import SharedUserError, UserError, DataError
from reltrain.inference import pool
from reltrain.runtime.output import check_output, output_stream
from reltrain.runtime.logs import progress_enabled
from reltrain.config.commands import PredictOptions
from reltrain.runtime.launch import local_processes
from reltrain.runtime.stops import StopRequest
from reltrain.data.schema import Annotated
from reltrain.config.train import DistConfig

if TYPE_CHECKING:  # torch, imported by run_predict once the helpers have started
    from reltrain.runtime import distributed as D
    from reltrain.inference.predictor import Predictor

log = logging.getLogger("reltrain.predict")


def run_predict(checkpoint: str | None = None, data: str | None = None, text: str | None = None,
                head: str | None = None, tail: str | None = None, head_offset: int | None = None,
                tail_offset: int | None = None, output: str | None = None,
                options: PredictOptions | None = None, **settings) -> int:
    """Label a file (CSV/JSONL) or one sentence as JSON lines; returns how many lines were written.
    ``options`` (the command line's) or the arguments and ``settings`` (PredictOptions' fields).

    Chunks of ``chunk_rows`` rows are read, predicted (by ``workers`` processes on a CPU, this one
    included) and written in input order, so memory stays flat for a corpus of any size.
    ``--output`` is renamed into place at the end: an error or a stop (between chunks) leaves no
    half-written file."""
    o = options or PredictOptions(checkpoint, data, text, head, tail, head_offset, tail_offset,
                                  output=output, **settings)
    check_output(o.output, (o.data, o.checkpoint))
    # torch: not before the helpers are started
    from reltrain.artifacts.model_folder import model_task

    extracting = model_task(o.checkpoint) == "extract"
    if not extracting and o.data is None and (o.head is None or o.tail is None):
        raise UserError("this model labels a given pair: --text needs --head and --tail")
    given = [f"--{k.replace('_', '-')}" for k in ("head", "tail", "head_offset", "tail_offset")
             if getattr(o, k) is not None]
    if extracting and given:  # as the server refuses them: silently ignored, they would mislead
        raise UserError(f"{' and '.join(given)}: not for an extraction model, which finds the "
                        f"entities itself; give --text alone")
    stop = StopRequest().install()  # to the end: one line, exit 128 + the signal
    try:
        chunks = _row_chunks(o, stop, extracting) if o.data is not None else iter(())
        # Standard input is first read after the check that one process reads it (``_predict``).
        first = [] if o.data == STDIN else list(islice(chunks, 2))
        workers = o.workers if o.workers is not None else children.default_workers(local_processes())
        # Started before this process imports torch and loads the model, as they do the same;
        # one chunk is not worth a process that loads the model.
        with pool.start(workers if len(first) > 1 or o.data == STDIN else 1) as helpers:
            return _predict(o, chain(first, chunks), helpers, stop)
    except Exception:
        stop.check(_STOPPED)  # a collective broke: the other ranks stopped on the same signal
        raise
    finally:
        stop.restore()


def _predict(o: PredictOptions, chunks: Iterator[list], helpers: children.Pool,
             stop: StopRequest) -> int:
    from reltrain.runtime import distributed as D  # torch only once the helpers have started
    # torch: not before the helpers are started
    from reltrain.inference.predictor import make_record

    ctx = D.setup(o.device, DistConfig())
    try:
        predictor = load_predictor(o, ctx)
        # an extraction model: each sentence (raw text, or any gold format with its labels
        # ignored) with its entities and relations, through the same chunks and helpers
        extracting = predictor.config.task == "extract"
        if o.data == STDIN and ctx.distributed:  # the ranks would share one stream
            raise SharedUserError("DATA '-' (standard input) is read by one process: drop "
                                  "--devices / torchrun, or give a file")
        if extracting and o.top_k is not None:
            raise SharedUserError("--top-k does not apply to an extraction model: it answers "
                                  "every relation above its threshold")
        o = replace(o, top_k=3 if o.top_k is None else o.top_k)
        if not extracting and o.top_k > len(predictor.labels):
            raise SharedUserError(f"--top-k must be between 1 and {len(predictor.labels)} (the "
                                  f"model's relations), not {o.top_k}")
        if o.data is None and extracting:  # --text: a chunk of one sentence
            # the extraction readers: for an extraction model only
            from reltrain.data.extraction import MAX_CHARS, Parsed

            text = text_value(o.text, "--text", None, None, MAX_CHARS)
            chunks = iter([[(0, partial(Parsed, [Annotated(text, (), (), "--text")]))]])
        if o.data is None and not extracting:
            record = make_record(o.text, o.head, o.tail, o.head_offset, o.tail_offset, cli=True)
            warn_misfit(predictor, [record])
            lines = iter([Lines([_JSON.encode(r) for r in predictor.answer([record], o.top_k)])])
        else:
            # Under torchrun each rank predicts whole chunks of its own (chunk i on rank i % W)
            # and rank 0 writes them in input order: the rows meet in the same batches as in one
            # process.
            mine = (chunk for i, chunk in enumerate(chunks) if i % ctx.world_size == ctx.rank)
            lines = _gathered_in_order(_predicted_chunks(predictor, mine, o, helpers, stop,
                                                         warn=ctx.rank == 0),
                                       ctx)
        if not ctx.is_main:
            for _ in lines:  # joins every round of the gather
                pass
            return 0
        return _write(lines, o, stop)
    finally:
        D.teardown(ctx)


_STOPPED = "while predicting; the output is not complete"


def _write(chunks: Iterator[Lines], o: PredictOptions, stop: StopRequest) -> int:
    """The chunks' lines to ``o.output`` (renamed into place at the end) or stdout, in order,
    with a progress bar; returns how many lines were written."""
    from tqdm.auto import tqdm

    written, bad, windowed = 0, 0, 0
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
            windowed += chunk.windowed
            bar.update(len(chunk.lines))
    if bad:
        log.warning("%d bad row(s) in %s: each has a {\"line\": N, \"error\": ...} line in "
                    "its place", bad, o.data)
    if windowed:
        log.info("%d text(s) hold a sentence longer than this model reads at once (its "
                 "data.max_len units): it was read in overlapping windows, and a relation between "
                 "entities farther apart than a window is not found", windowed)
    return written


@dataclass
class Lines:
    """A chunk's output lines, and how many of them stand for bad rows."""

    lines: list[str]
    bad: int = 0
    windowed: int = 0  # extraction: texts with a sentence longer than data.max_len units


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


def _row_chunks(o: PredictOptions, stop: StopRequest, extracting: bool) -> Iterator[list]:
    """The rows of ``o.data``, ``o.chunk_rows`` at a time, each ``(line, build)``: parsing a row
    (``build``) is part of a chunk's work, done by whichever process predicts or tokenizes it.
    ``extracting``: sentences (raw text, or any gold format with its labels ignored)."""
    if extracting:
        # the extraction readers: for an extraction model only
        from reltrain.data.extraction import iter_annotated

        rows = iter_annotated(o.data, o.encoding, False, "text" if o.data == STDIN else None)
    else:
        rows = iter_rows(o.data, require_relation=False, entity_lists=True, encoding=o.encoding)
    # an extraction model takes about ten times a classifier's time a row: smaller chunks
    # keep every process busy to the end of a file of a few thousand rows
    size = o.chunk_rows or (1024 if extracting else 4096)
    while chunk := list(islice(rows, size)):
        stop.check(_STOPPED)
        yield chunk


def _predicted_chunks(predictor: Predictor, chunks: Iterator[list], o: PredictOptions,
                      helpers: children.Pool, stop: StopRequest, warn: bool) -> Iterator[Lines]:
    """The output lines of ``chunks``, in order, predicted here and in ``helpers``; ``warn``:
    say when the first chunk's text does not fit the model."""
    first = list(islice(chunks, 1))
    chunks = chain(first, chunks)
    if first and warn:
        good = _good(_parsed(first[0][:256], skip_bad_rows=True))
        if predictor.config.task == "extract":  # each row's sentences (a PURE document's several)
            good = [s for item in good for s in item.sentences]
        warn_misfit(predictor, good)
    how = pool.mode(predictor, bool(helpers.children))
    if how == "main":
        helpers.close()
    else:
        helpers.setup(pool.load, str(o.checkpoint), o.runtime, o.amp)
    check = lambda: stop.check(_STOPPED)  # noqa: E731  while waiting for a helper
    with pool.long_lived():
        if how == "main":
            for chunk in chunks:
                yield _chunk_lines(predictor, chunk, o.top_k, o.skip_bad_rows)
        elif how == "predict":
            with pool.one_thread():
                yield from helpers.map(partial(_chunk_lines, top_k=o.top_k,
                                               skip_bad_rows=o.skip_bad_rows),
                                       chunks, check, local=predictor)
        else:
            encode = partial(_encode_chunk, skip_bad_rows=o.skip_bad_rows)
            for parsed, encoded in helpers.map(encode, chunks, check, local=predictor):
                yield _lines(predictor, parsed, o.top_k, encoded)


def load_predictor(o, ctx: D.DistContext) -> Predictor:
    """The model of ``o.checkpoint`` on this rank's device; rank 0 logs its precision."""
    # torch: not before the helpers are started
    from reltrain.inference.predictor import Predictor

    predictor = Predictor.from_checkpoint(o.checkpoint, device=ctx.device, runtime=o.runtime,
                                          amp=o.amp)
    if ctx.is_main:
        log.info(predictor.precision.describe())
    return predictor


def warn_misfit(predictor: Predictor, items: list) -> None:
    """A warning when the rows are not in the model's language or mostly unknown to it: the
    answers would all be one relation, with exit status 0 and nothing else to notice."""
    warning = predictor.fit_warning(items)
    if warning:
        log.warning("%s", warning)


def _parsed(chunk: list, skip_bad_rows: bool) -> list:
    """``(line, record or EntitySentence or DataError)`` for each ``(line, build)``."""
    out = []
    for line, build in chunk:
        try:
            out.append((line, build()))
        except DataError as exc:
            if not skip_bad_rows:
                raise
            out.append((line, exc))
    return out


def _good(parsed: list) -> list:
    """The rows that parsed (records and sentences), without the bad rows' errors."""
    return [item for _, item in parsed if not isinstance(item, DataError)]


def _encode_chunk(predictor: Predictor, chunk: list, skip_bad_rows: bool):
    """A helper's share on a GPU: parse and encode; this process scores and writes."""
    parsed = _parsed(chunk, skip_bad_rows)
    return parsed, predictor.encode(_good(parsed))


def _chunk_lines(predictor: Predictor, chunk: list, top_k: int, skip_bad_rows: bool) -> Lines:
    parsed = _parsed(chunk, skip_bad_rows)
    if predictor.config.task == "extract":
        return _extracted(predictor, parsed)
    return _lines(predictor, parsed, top_k)


def _lines(predictor: Predictor, parsed: list, top_k: int, encoded=None) -> Lines:
    """The output lines of a chunk of ``(line number, record or DataError)``: the predictor's
    pipeline over its good rows (``encoded`` already, when a helper did that stage)."""
    if encoded is None:
        encoded = predictor.encode(_good(parsed))
    results = iter(predictor.answers(encoded, predictor.score(encoded), top_k))
    encode = _JSON.encode
    return Lines([encode({"line": line, "error": str(item)} if isinstance(item, DataError)
                         else next(results)) for line, item in parsed],
                 sum(isinstance(item, DataError) for _, item in parsed))


def _extracted(extractor, parsed: list) -> Lines:
    """The output lines of a chunk of ``(line number, Parsed or DataError)`` rows: each of a
    row's sentences answered in order (a PURE document holds several), a bad row's error in its
    place."""
    answers = extractor.extract_rows([s for item in _good(parsed) for s in item.sentences])
    lines, windowed = [], extractor.windowed
    for line, item in parsed:
        if isinstance(item, DataError):
            lines.append(_JSON.encode({"line": line, "error": str(item)}))
        else:
            lines.extend(_JSON.encode(next(answers)) for _ in item.sentences)
    return Lines(lines, sum(isinstance(item, DataError) for _, item in parsed),
                 extractor.windowed - windowed)


# json.dumps(..., ensure_ascii=False) itself, without making an encoder for every line
_JSON = json.JSONEncoder(ensure_ascii=False)
