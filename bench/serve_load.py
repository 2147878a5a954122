"""``reltrain serve`` under load: requests/s and latency with 1, 8 and 64 concurrent clients,
micro-batching on (``--max-batch 64``: what queued while the model was busy; and with
``--max-wait-ms 5``) against off (``--max-batch 1``).

    python bench/serve_load.py                 # CNN trained on deepke-zh, 20 s per setting
    python bench/serve_load.py --model my-model --seconds 10

Each client is a thread with its own keep-alive connection that sends one example per request
(deepke-zh test sentences, in turn) and waits for the answer; clients and server share this
machine's cores, as they would on a small host. Printed: requests/s, p50 and p99 latency, the
mean batch the server formed (from GET /health), and the ratio of requests/s to batching off.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
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
                  "log.progress=false", "log.plots=false", f"data.cache_dir={work / 'cache'}",
                  f"output_dir={run}"],
                 ["export", str(run / "checkpoints" / "best.pt"), str(work / "model")]):
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--model", help="an exported folder (default: train a CNN on deepke-zh)")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    args = p.parse_args()
    data = Path(args.data)
    with open(data / "test.csv", encoding="utf-8", newline="") as f:
        bodies = [json.dumps({"text": r["sentence"], "head": r["head"], "tail": r["tail"],
                              "head_offset": int(r["head_offset"]),
                              "tail_offset": int(r["tail_offset"])}, ensure_ascii=False).encode()
                  for r in csv.DictReader(f)]
    with tempfile.TemporaryDirectory(prefix="reltrain-serve-") as tmp:
        model = Path(args.model) if args.model else train_model(data, Path(tmp))
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
