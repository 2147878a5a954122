"""The gradient all-reduce alone: reltrain's shared-memory one against gloo's, same processes.

    python bench/allreduce_cost.py --nproc 2

N processes on this host (one thread each) average a float32 tensor of each ``--sizes`` (by
default the CNN's gradient on deepke-zh and about MiniLM's) ``--steps`` times with each
all-reduce, after a barrier so every call starts together. Printed: the median ms per call.
No compute runs in between, so this is the collective's own cost; ``bench/ddp_step_cost.py``
shows it inside a training step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch


def time_calls(fn, tensor: torch.Tensor, steps: int) -> float:
    import torch.distributed as dist

    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        fn(tensor)
        times.append(time.perf_counter() - start)
    return statistics.median(times[steps // 5:]) * 1000


def worker(args) -> None:
    import torch.distributed as dist

    from reltrain.training import distributed as D

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = D.DistContext(rank=rank, world_size=world, strategy="ddp", backend="gloo",
                        cpu_allreduce="shm")

    def gloo_mean(t: torch.Tensor) -> None:
        t.div_(world)
        dist.all_reduce(t)

    for size in args.sizes:
        shared = D.open_shm_allreduce(ctx, size * 4)
        tensor = torch.randn(size)
        shm_ms = time_calls(shared.mean_, tensor, args.steps)
        gloo_ms = time_calls(gloo_mean, tensor, args.steps)
        if rank == 0:
            print(f"RESULT {size} {shm_ms:.2f} {gloo_ms:.2f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", type=int, nargs="+", default=[852_559, 22_700_000])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={args.nproc}", __file__, "--worker",
                           f"--steps={args.steps}", "--sizes", *map(str, args.sizes)],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("the all-reduce run failed")
    print(f"{args.nproc} processes, 1 thread each, {os.cpu_count()} cores; median ms per all-reduce")
    print(f"{'float32 elements':>17}{'shared memory':>15}{'gloo':>10}{'gloo / shm':>12}")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            size, shm, gloo = line.split()[1:]
            print(f"{int(size):>17}{float(shm):>15.2f}{float(gloo):>10.2f}{float(gloo) / float(shm):>12.1f}")


if __name__ == "__main__":
    main()
