"""reltrain predict's helper pool (``children.Pool``) against the standard library's
``concurrent.futures.ProcessPoolExecutor`` on the same schedule: helpers started before the
model is loaded here, at most two chunks in flight per helper, this process predicting a chunk
whenever every helper has two, output in input order. The executor's helper loads the model in
its initializer as it starts (the pool's does so once this process has its own).

    python bench/pool_vs_executor.py RUN_OR_CHECKPOINT CORPUS.csv [--rounds 3] [--workers 2]

Each variant runs in a fresh process, alternating, ``--rounds`` times; prints each wall time and
the mean ratio to the pool's, and checks that every variant wrote the same lines. Then, for each
variant, the process is killed (SIGKILL, as the OOM killer or ``scancel`` would) once its helpers
are predicting, and the helper processes still alive ``--linger`` seconds later are counted.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

VARIANTS = ("pool", "forkserver", "spawn")


def _init(checkpoint: str) -> None:
    global _PREDICTOR
    import torch

    from reltrain.inference.predictor import Predictor

    torch.set_num_threads(1)
    _PREDICTOR = Predictor.from_checkpoint(checkpoint, device="cpu")
    gc.freeze()


def _start() -> None:
    return None


def _chunk(chunk: list):
    from reltrain.commands.predict import _chunk_lines

    return _chunk_lines(_PREDICTOR, chunk, 3, False)


def run_executor(checkpoint: str, corpus: str, out: str, context: str, workers: int) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from reltrain.inference import pool
    from reltrain.commands.predict import _chunk_lines, _row_chunks
    from reltrain.runtime.stops import StopRequest

    helpers = ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context(context),
                                  initializer=_init, initargs=(checkpoint,))
    for _ in range(workers - 1):
        helpers.submit(_start)  # the executor starts a process when a task comes
    from reltrain.inference.predictor import Predictor

    predictor = Predictor.from_checkpoint(checkpoint, device="cpu")
    pending: deque = deque()  # (future or None, lines)
    with open(out, "w", encoding="utf-8") as f, pool.long_lived(), pool.one_thread():
        def write_oldest():
            future, lines = pending.popleft()
            f.write("".join(line + "\n" for line in (future.result() if future else lines).lines))

        for chunk in _row_chunks(corpus, 4096, StopRequest()):
            if sum(future is not None for future, _ in pending) < 2 * (workers - 1):
                pending.append((helpers.submit(_chunk, chunk), None))
            else:
                pending.append((None, _chunk_lines(predictor, chunk, 3, False)))
            while pending and (len(pending) > 2 * workers or pending[0][0] is None
                               or pending[0][0].done()):
                write_oldest()
        while pending:
            write_oldest()
    helpers.shutdown()


def one(variant: str, checkpoint: str, corpus: str, out: str, workers: int) -> float:
    start = time.perf_counter()
    if variant == "pool":
        from reltrain.commands.predict import run_predict

        run_predict(checkpoint, corpus, output=out, workers=workers, progress="false")
    else:
        run_executor(checkpoint, corpus, out, variant, workers)
    return time.perf_counter() - start


def descendants(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for kid in map(int, kids):
        out |= {kid, *descendants(kid)}
    return out


def left_after_kill(variant: str, args, out: str) -> int:
    """Helper processes alive ``args.linger`` s after this variant's process was SIGKILLed."""
    proc = subprocess.Popen([sys.executable, __file__, args.checkpoint, args.corpus, "--one",
                             variant, "--out", out, "--workers", str(args.workers)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(args.kill_after)
    helpers = descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(args.linger)
    alive = {pid for pid in helpers if Path(f"/proc/{pid}").exists()}
    for pid in alive:  # cleaned up, so the next variant runs on a quiet machine
        os.kill(pid, signal.SIGKILL)
    return len(alive)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("corpus")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2, help="processes, this one included")
    p.add_argument("--kill-after", type=float, default=4.0, help="s before the kill")
    p.add_argument("--linger", type=float, default=5.0, help="s after it before counting")
    p.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(one(args.one, args.checkpoint, args.corpus, args.out, args.workers))
        return
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="reltrain-pool-") as tmp:
        for _ in range(args.rounds):
            for variant in VARIANTS:
                out = str(Path(tmp) / f"{variant}.jsonl")
                proc = subprocess.run([sys.executable, __file__, args.checkpoint, args.corpus,
                                       "--one", variant, "--out", out, "--workers",
                                       str(args.workers)], capture_output=True, text=True)
                if proc.returncode != 0:
                    sys.exit(proc.stderr[-3000:])
                times[variant].append(float(proc.stdout.split()[-1]))
        outputs = {v: (Path(tmp) / f"{v}.jsonl").read_bytes() for v in VARIANTS}
    same = len(set(outputs.values())) == 1
    base = sum(times["pool"]) / len(times["pool"])
    print(f"{args.workers} processes, {args.rounds} rounds; the same lines from all: {same}")
    for variant in VARIANTS:
        mean = sum(times[variant]) / len(times[variant])
        label = "children.Pool" if variant == "pool" else f"ProcessPoolExecutor ({variant})"
        print(f"{label:<36} {' / '.join(f'{t:.2f}' for t in times[variant])} s"
              f"   mean {mean:.2f} s   x{mean / base:.2f} the pool's time")
    print(f"killed (SIGKILL) after {args.kill_after:g} s: its child processes alive "
          f"{args.linger:g} s later")
    with tempfile.TemporaryDirectory(prefix="reltrain-pool-") as tmp:
        for variant in VARIANTS:
            left = left_after_kill(variant, args, str(Path(tmp) / f"{variant}.jsonl"))
            label = "children.Pool" if variant == "pool" else f"ProcessPoolExecutor ({variant})"
            print(f"{label:<36} {left}")


if __name__ == "__main__":
    main()
