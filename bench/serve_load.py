"""``reltrain serve`` under load: requests/s and latency with 1, 8 and 64 concurrent clients,
micro-batching on (``--max-batch 64``: what queued while the model was busy; and with
``--max-wait-ms 5``) against off (``--max-batch 1``).

    python bench/serve_load.py                 # CNN trained on deepke-zh, 20 s per setting
    python bench/serve_load.py --model my-model --seconds 10

    python bench/serve_load.py --abuse --clients 8 --seconds 15
    python bench/serve_load.py --abuse --clients 1 --abusers spans heavy --abuse-rate 1

Each client is a thread with its own keep-alive connection that sends one example per request
(deepke-zh test sentences, in turn) and waits for the answer; clients and server share this
machine's cores, as they would on a small host. Printed: requests/s, p50 and p99 latency, the
mean batch the server formed (from GET /health), and the ratio of requests/s to batching off.

``--abuse``: the good clients once alone and once beside three abusers running all the while in a
process of their own (a slow client that sends headers and half a body and then stalls, again
and again; a sentence with 4,000 entities, 16 million pairs; a list with one bad item among good
ones; the last two ``--abuse-rate`` times a second each), micro-batching on; printed: the good
clients' p50/p99 in both runs and the ratio (the goal: p99 under 2x), and what the abusers were
answered. Two more abusers, chosen with ``--abusers``: ``spans`` (issue 35's request: 32
entities each covering a 9,599-character text, 992 pairs; refused by ``--max-request-chars``)
and ``heavy`` (992 pairs of an 899-character text, within every default limit: predicted in
slices of ``--max-batch`` between the good clients' requests).
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from deepke_runs import DEFAULT_DATA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_model(data: Path, work: Path) -> Path:
    run = work / "run"
    for args in (["train", f"data.train={data / 'train.csv'}", f"data.valid={data / 'valid.csv'}",
                  f"data.labels={data / 'relation.csv'}", "data.language=zh", "train.epochs=1",
                  "log.progress=false", f"data.cache_dir={work / 'cache'}",
                  f"output_dir={run}"],
                 ["export", str(run / "checkpoints" / "best"), str(work / "model")]):
        subprocess.run([sys.executable, "-m", "reltrain", *args], check=True, capture_output=True)
    return work / "model"


def start_server(model: Path, extra: list[str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "reltrain", "serve", str(model), "--port",
                             str(port), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if get(port, "/health")["status"] == "ok":
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    return json.loads(conn.getresponse().read())


def load(port: int, bodies: list[bytes], clients: int, seconds: float) -> tuple[float, list[float]]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop_at = [0.0]
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        n = i
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t = time.perf_counter()
            conn.request("POST", "/predict", bodies[n % len(bodies)],
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise SystemExit(f"HTTP {resp.status}")
            latencies[i].append(time.perf_counter() - t)
            n += clients

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    flat = [x for per in latencies for x in per]
    return len(flat) / elapsed, flat


_LONG = " ".join(f"w{i:04d}" for i in range(1600))  # 9,599 characters
_SHORT = " ".join(f"w{i:04d}" for i in range(150))  # 899 characters
ABUSE = {
    "pairs": json.dumps({"text": " ".join(f"w{i}" for i in range(40)),
                         "entities": [{"pos": [3 * i, 3 * i + 2]} for i in range(4000)]}).encode(),
    # Issue 35's payload: 32 entities that each cover the text, 992 pairs of 9,599 characters.
    "spans": json.dumps({"text": _LONG, "entities": [{"pos": [6 * i, len(_LONG) - 6 * i]}
                                                     for i in range(32)]}).encode(),
    # The most a request may ask within the default limits: 992 pairs of an 899-character text.
    "heavy": json.dumps({"text": _SHORT, "entities": [{"pos": [24 * i, 24 * i + 5]}
                                                      for i in range(32)]}).encode(),
}


ABUSERS = ("stall", "pairs", "bad", "spans", "heavy")


def abusers(port: int, good: bytes, stop: threading.Event, answered: dict,
            rate: float, kinds: list[str]) -> list[threading.Thread]:
    """Three clients that misbehave until ``stop``, the posting ones ``rate`` times a second
    each; ``answered`` counts their statuses."""
    bad_list = b"[" + good + b", " + json.dumps({"text": "x", "head": "y", "tail": "z"}).encode() \
        + b"]"
    lock = threading.Lock()

    def note(kind: str, status) -> None:
        with lock:
            answered.setdefault(kind, {}).setdefault(status, 0)
            answered[kind][status] += 1

    def stalling() -> None:
        while not stop.is_set():
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
                try:
                    note("stalled body", s.recv(100).split(b" ")[1].decode())
                except (OSError, IndexError):
                    note("stalled body", "closed")

    def posting(kind: str, body: bytes) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        due = time.perf_counter()
        while not stop.is_set():
            conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            note(kind, resp.status)
            due += 1 / rate
            stop.wait(max(0.0, due - time.perf_counter()))

    threads = [threading.Thread(target=stalling, daemon=True),
               threading.Thread(target=posting, args=("4,000 entities", ABUSE["pairs"]), daemon=True),
               threading.Thread(target=posting, args=("a bad item in a list", bad_list), daemon=True),
               threading.Thread(target=posting, args=("32 entities over 9,599 chars", ABUSE["spans"]),
                                daemon=True),
               threading.Thread(target=posting, args=("992 pairs within the limits", ABUSE["heavy"]),
                                daemon=True)]
    threads = [t for t, name in zip(threads, ABUSERS) if name in kinds]
    for t in threads:
        t.start()
    return threads


def abuse(port: int, good: bytes, stop, queue, rate: float, kinds: list[str]) -> None:
    """The abusers until ``stop``; what they were answered goes to ``queue``."""
    done, answered = threading.Event(), {}
    threads = abusers(port, good, done, answered, rate, kinds)
    stop.wait()
    done.set()
    for t in threads:
        t.join(timeout=10)
    queue.put(answered)


def abuse_run(model: Path, bodies: list[bytes], clients: int, seconds: float, rate: float,
              kinds: list[str]) -> None:
    # A short body timeout, so that the stalling client comes back many times in a run.
    proc, port = start_server(model, ["--max-batch", "64", "--body-timeout-s", "2"])
    try:
        load(port, bodies, clients, min(2.0, seconds))  # warm up
        _, alone = load(port, bodies, clients, seconds)
        # The abusers run in a process of their own (they stand for other hosts' clients), so
        # that their threads do not hold this process's GIL from the good clients.
        ctx = multiprocessing.get_context("spawn")
        stop, queue = ctx.Event(), ctx.Queue()
        abusing = ctx.Process(target=abuse, args=(port, bodies[0], stop, queue, rate, kinds))
        abusing.start()
        time.sleep(1.0)
        _, beside = load(port, bodies, clients, seconds)
        stop.set()
        answered = queue.get(timeout=60)
        abusing.join(timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    p50 = [np.percentile(x, 50) * 1e3 for x in (alone, beside)]
    p99 = [np.percentile(x, 99) * 1e3 for x in (alone, beside)]
    print(f"{clients} good clients, micro-batching on, {seconds:g} s per run; abusers post "
          f"{rate:g} requests/s each", flush=True)
    print(f"{'':>16}{'p50 ms':>9}{'p99 ms':>9}{'requests':>10}")
    print(f"{'alone':>16}{p50[0]:>9.1f}{p99[0]:>9.1f}{len(alone):>10}")
    print(f"{'beside abusers':>16}{p50[1]:>9.1f}{p99[1]:>9.1f}{len(beside):>10}")
    print(f"p99 ratio (beside / alone): {p99[1] / p99[0]:.2f}")
    for kind, statuses in answered.items():
        print(f"abuser '{kind}': {dict(sorted(statuses.items(), key=str))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--model", help="an exported folder (default: train a CNN on deepke-zh)")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--abuse", action="store_true", help="good clients' latency beside abusive ones")
    p.add_argument("--abuse-rate", type=float, default=20,
                   help="requests/s of each posting abuser (a flood at any rate is a rate "
                        "limiter's job, in front of the server)")
    p.add_argument("--abusers", nargs="+", choices=ABUSERS, default=list(ABUSERS[:3]),
                   help="which abusers run (default: stall pairs bad; 'spans' is issue 35's "
                        "payload, 'heavy' the largest request the default limits allow)")
    args = p.parse_args()
    data = Path(args.data)
    with open(data / "test.csv", encoding="utf-8", newline="") as f:
        bodies = [json.dumps({"text": r["sentence"], "head": r["head"], "tail": r["tail"],
                              "head_offset": int(r["head_offset"]),
                              "tail_offset": int(r["tail_offset"])}, ensure_ascii=False).encode()
                  for r in csv.DictReader(f)]
    with tempfile.TemporaryDirectory(prefix="reltrain-serve-") as tmp:
        model = Path(args.model) if args.model else train_model(data, Path(tmp))
        if args.abuse:
            print(f"{os.cpu_count()} cores; one example per good request", flush=True)
            for clients in args.clients:
                abuse_run(model, bodies, clients, args.seconds, args.abuse_rate, args.abusers)
            return
        print(f"{os.cpu_count()} cores; {args.seconds:g} s per setting; one example per request",
              flush=True)
        print(f"{'clients':>8}{'batching':>10}{'req/s':>9}{'vs off':>8}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'mean batch':>12}", flush=True)
        for clients in args.clients:
            off = None
            for name, extra in (("off", ["--max-batch", "1"]), ("on", ["--max-batch", "64"]),
                                ("on+5ms", ["--max-batch", "64", "--max-wait-ms", "5"])):
                proc, port = start_server(model, extra)
                try:
                    load(port, bodies, clients, min(2.0, args.seconds))  # warm up
                    before = get(port, "/health")
                    rate, lat = load(port, bodies, clients, args.seconds)
                    after = get(port, "/health")
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                off = off or rate
                batch = (after["examples"] - before["examples"]) / max(after["batches"] - before["batches"], 1)
                print(f"{clients:>8}{name:>10}{rate:>9.0f}{rate / off:>8.2f}"
                      f"{np.percentile(lat, 50) * 1e3:>9.1f}{np.percentile(lat, 99) * 1e3:>9.1f}"
                      f"{batch:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
