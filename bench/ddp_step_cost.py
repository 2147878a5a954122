"""What a CPU DDP step costs beyond its compute, and why: synchronisation or volume.

    python bench/ddp_step_cost.py --nproc 2 --batch-size 32

The CNN's training step (deepke-zh's vocabulary size, Zipf-distributed word ids, one thread per
process) is timed in one process without DDP, then in N gloo processes with DDP whose gradient
all-reduce is replaced by nothing, by an all-reduce of 10 floats, and by an all-reduce of the
same size that touches no gradients, then with DDP's real gloo all-reduce (as ``reltrain train``
wraps the model). Printed: the median
step time of each (steps after a warm-up), so the cost of having a collective at all can be told
from the cost of its bytes. Same run, same machine, cycling through the variants ``--rounds`` times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

VARIANTS = ("no all-reduce", "10 floats", "same size, dummy", "DDP all-reduce")


def step_times(model, batch_size: int, vocab: int, steps: int, seed: int) -> float:
    opt = torch.optim.Adam(model.parameters(), fused=True)
    gen = torch.Generator().manual_seed(seed)
    zipf = 1.0 / torch.arange(1, vocab - 1).float()
    length = 40
    times = []
    for _ in range(steps):
        word = torch.multinomial(zipf, batch_size * length, True, generator=gen).view(batch_size, length) + 2
        pos = torch.randint(0, 61, (batch_size, length), generator=gen)
        mask = torch.ones(batch_size, length, dtype=torch.bool)
        spans = torch.zeros(batch_size, 2, dtype=torch.long)
        start = time.perf_counter()
        model(word, pos, pos, mask, head=spans, tail=spans + 1).sum().backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[steps // 5:]) * 1000


def build(vocab: int):
    from reltrain.config.load import load_config
    from reltrain.models import build_model

    torch.manual_seed(0)
    cfg = load_config(None, ["model.name=cnn"])
    return build_model(cfg.model, vocab, 11, cfg.data.pos_limit)


def worker(args) -> None:
    import torch.distributed as dist

    from reltrain.runtime import distributed as D

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        ms = step_times(build(args.vocab), args.batch_size, args.vocab, args.steps, 0)
        print(f"RESULT alone {ms:.2f}", flush=True)
        return

    def hook_for(variant: str, size: int):
        dummy = torch.zeros(10 if variant == "10 floats" else size)

        def hook(state, bucket):
            if variant == "no all-reduce":
                done = torch.futures.Future()
                done.set_result(bucket.buffer())
                return done
            return dist.all_reduce(dummy, async_op=True).get_future().then(lambda f: bucket.buffer())
        return hook

    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            model = build(args.vocab)
            if variant == "DDP all-reduce":
                ctx = D.DistContext(rank=rank, world_size=world, strategy="ddp", backend="gloo")
                ddp = D.wrap(model, ctx)
            else:
                ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
                size = sum(p.numel() for p in model.parameters())
                ddp.register_comm_hook(None, hook_for(variant, size))
            dist.barrier()
            results.setdefault(variant, []).append(
                step_times(ddp, args.batch_size, args.vocab, args.steps, rank))
    if rank == 0:
        for variant, values in results.items():
            print(f"RESULT {variant} {statistics.median(values):.2f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab", type=int, default=6163, help="deepke-zh's jieba vocabulary")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--rounds", type=int, default=3, help="each variant's median is over this many runs")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for nproc in (1, args.nproc):
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc_per_node={nproc}", __file__, "--worker",
                               f"--batch-size={args.batch_size}", f"--vocab={args.vocab}",
                               f"--steps={args.steps}", f"--rounds={args.rounds}"],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"{nproc}-process run failed")
        rows += [ln[len("RESULT "):].rsplit(" ", 1) for ln in proc.stdout.splitlines()
                 if ln.startswith("RESULT ")]
    alone = float(rows[0][1])
    print(f"CNN step, batch {args.batch_size} per process, 1 thread per process, "
          f"{os.cpu_count()} cores; median ms per step")
    print(f"{'variant':<34}{'ms/step':>9}{'efficiency if this were all':>30}")
    for name, ms in rows:
        label = "1 process, no DDP" if name == "alone" else f"{args.nproc} processes, {name}"
        print(f"{label:<34}{float(ms):>9.2f}{alone / float(ms):>30.2f}")


if __name__ == "__main__":
    main()
