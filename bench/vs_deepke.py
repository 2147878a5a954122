"""reltrain's encoders against DeepKE's own training loop, side by side, same data, same run.

    pip install --no-deps deepke==2.2.7        # once, in the same environment
    python bench/vs_deepke.py --models cnn pcnn
    python bench/vs_deepke.py --models bilstm transformer --deepke-epochs transformer=2
    python bench/vs_deepke.py --models cnn lm --lm-folder PATH   # no DeepKE counterpart for lm

reltrain trains with the documented recipe, configs/deepke-zh-MODEL.yaml (its epochs unless
--epochs is given); DeepKE for the same number of epochs unless --deepke-epochs says otherwise.

Each side runs in its own process (so peak RSS is its own) with torch's default 2 threads on
this 2-core machine. Printed per side: training throughput (sentences/s, median of the epochs
after the first), evaluation throughput (valid + test sentences/s; reltrain's figure includes
tokenizing the raw text, as `reltrain predict` does, DeepKE's starts from its preprocessed
pickles), peak RSS, and test macro-F1
at the epoch with the best validation macro-F1 (never selected on test).

DeepKE runs as shipped: its preprocess, CustomDataset, collate_fn, its PCNN (cnn, pcnn), BiLSTM
and Transformer models and its train / validate functions, with its documented defaults (../shared/data/README.md) and
``replace_entity_with_type=False``, because the default looks entity types up from the gold
relation and so leaks the answer. Only imports that fail here are patched: ``deepke/__init__``
(it imports every sub-package) is bypassed with namespace stubs, and ``transformers`` (used by
its LM code only) is stubbed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "deepke-zh"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------- reltrain side
def run_reltrain(data: Path, model: str, epochs: int, batch_size: int, workdir: Path,
                 extra: list[str]) -> dict:
    import torch

    from reltrain.config.load import load_config
    from reltrain.inference.predictor import Predictor
    from reltrain.data.readers import read_records
    from reltrain.commands.train import run_train

    cfg = load_config(str(recipe(model)), [
        f"data.train={data / 'train.csv'}", f"data.valid={data / 'valid.csv'}",
        f"data.test={data / 'test.csv'}", f"data.labels={data / 'relation.csv'}",
        "data.language=zh", f"data.cache_dir={workdir / 'cache'}", f"model.name={model}",
        f"train.epochs={epochs}", f"train.batch_size={batch_size}", "log.progress=false",
        f"output_dir={workdir / ('reltrain-' + model)}", *extra])
    summary = run_train(cfg)
    # Evaluation throughput: the best checkpoint over valid + test, as the CLI would load it.
    predictor = Predictor.from_checkpoint(summary["checkpoints"]["best"])
    records = [r for name in ("valid", "test") for r in read_records(data / f"{name}.csv").records]
    start = time.perf_counter()
    predictor.score(predictor.encode(records), batch_size)
    eval_rate = len(records) / (time.perf_counter() - start)
    return {"side": "reltrain", "model": model, "train_sent_per_s": summary["train_sent_per_s_median"],
            "eval_sent_per_s": eval_rate, "test_macro_f1": summary["test"]["macro_f1"],
            "best_epoch": summary["best"]["epoch"], "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads()}


# ----------------------------------------------------------------------------- DeepKE side
def _import_deepke_standard():
    """Import deepke.relation_extraction.standard without deepke/__init__ and transformers."""
    import importlib.util

    spec = importlib.util.find_spec("deepke")
    if spec is None:
        raise SystemExit("DeepKE is not installed: pip install --no-deps deepke==2.2.7")
    base = Path(spec.submodule_search_locations[0])
    for name, path in (("deepke", base), ("deepke.relation_extraction", base / "relation_extraction")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    stub = types.ModuleType("transformers")  # only its LM model and LM tokenizer need it
    stub.BertTokenizer = stub.BertModel = None
    sys.modules.setdefault("transformers", stub)
    import matplotlib

    matplotlib.use("Agg")
    import deepke.relation_extraction.standard as standard

    return standard


DEEPKE_NAMES = {"cnn": "cnn", "pcnn": "cnn", "bilstm": "rnn", "transformer": "transformer"}


def deepke_config(data: Path, out: Path, model: str, epochs: int, batch_size: int):
    from omegaconf import OmegaConf

    dropout = {"bilstm": 0.3, "transformer": 0.1}.get(model, 0.3)
    return OmegaConf.create({
        "cwd": "/", "data_path": str(data), "out_path": str(out), "model_name": DEEPKE_NAMES[model],
        "use_pcnn": model == "pcnn", "chinese_split": True, "replace_entity_with_type": False,
        "replace_entity_with_scope": True, "min_freq": 3, "pos_limit": 30, "seed": 1,
        "epoch": epochs, "batch_size": batch_size, "learning_rate": 3e-4, "lr_factor": 0.7,
        "lr_patience": 3, "weight_decay": 1e-3, "early_stopping_patience": 6, "word_dim": 60,
        "pos_dim": 10, "dim_strategy": "sum", "num_relations": 11, "out_channels": 100,
        "kernel_sizes": [3, 5, 7], "activation": "gelu", "pooling_strategy": "max",
        "keep_length": True, "dropout": dropout, "intermediate": 80, "train_log": False,
        "type_rnn": "LSTM", "hidden_size": 150 if model == "bilstm" else 60, "num_layers": 2,
        "bidirectional": True, "last_layer_hn": True, "num_heads": 4, "num_hidden_layers": 3,
        "intermediate_size": 256, "hidden_act": "gelu_new", "layer_norm_eps": 1e-12,
        # DeepKE's Transformer model unpacks (states, all states, attentions): both must be on.
        "output_attentions": True, "output_hidden_states": True,
        "log_interval": 10, "show_plot": False, "only_comparison_plot": False,
        "plot_utils": "matplot", "use_gpu": False})


def run_deepke(data: Path, model: str, epochs: int, batch_size: int, workdir: Path,
               extra: list[str]) -> dict:
    import logging

    import torch
    from torch.utils.data import DataLoader

    logging.basicConfig(level=logging.WARNING)
    standard = _import_deepke_standard()
    out = workdir / f"deepke-{model}"
    cfg = deepke_config(data, out, model, epochs, batch_size)
    standard.manual_seed(cfg.seed) if hasattr(standard, "manual_seed") else torch.manual_seed(cfg.seed)
    standard.preprocess(cfg)
    vocab = standard.load_pkl(str(out / "vocab.pkl"), verbose=False)
    cfg.vocab_size = vocab.count
    cfg.pos_size = 2 * cfg.pos_limit + 2
    loaders = {}
    for name in ("train", "valid", "test"):
        ds = standard.CustomDataset(str(out / f"{name}.pkl"))
        loaders[name] = DataLoader(ds, batch_size=cfg.batch_size, shuffle=name == "train",
                                   collate_fn=standard.collate_fn(cfg))
    # standard.Transformer is the encoder block (module/ is star-imported after models/).
    models = standard.models
    net = {"cnn": models.PCNN, "rnn": models.BiLSTM,
           "transformer": models.Transformer}[cfg.model_name](cfg)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=cfg.lr_factor,
                                                           patience=cfg.lr_patience)
    criterion = torch.nn.CrossEntropyLoss()
    device = torch.device("cpu")
    train_rates, eval_rates, best = [], [], (-1.0, 0, 0.0)
    n_train = len(loaders["train"].dataset)
    n_eval = len(loaders["valid"].dataset) + len(loaders["test"].dataset)
    for epoch in range(1, cfg.epoch + 1):
        if hasattr(standard, "manual_seed"):
            standard.manual_seed(cfg.seed + epoch)  # as DeepKE's run.py does
        start = time.perf_counter()
        standard.train(epoch, net, loaders["train"], optimizer, criterion, device, None, cfg)
        train_rates.append(n_train / (time.perf_counter() - start))
        start = time.perf_counter()
        valid_f1, valid_loss = standard.validate(epoch, net, loaders["valid"], criterion, device, cfg)
        test_f1, _ = standard.validate(-1, net, loaders["test"], criterion, device, cfg)
        eval_rates.append(n_eval / (time.perf_counter() - start))
        scheduler.step(valid_loss)
        if valid_f1 > best[0]:
            best = (valid_f1, epoch, test_f1)  # test at the best-valid epoch; never selected on test
    rates = train_rates[1:] or train_rates
    return {"side": "deepke", "model": model, "train_sent_per_s": statistics.median(rates),
            "eval_sent_per_s": statistics.median(eval_rates), "test_macro_f1": float(best[2]),
            "best_epoch": best[1], "peak_rss_mb": peak_rss_mb(), "threads": torch.get_num_threads()}


# ----------------------------------------------------------------------------- driver
def child(args) -> None:
    fn = run_reltrain if args.child == "reltrain" else run_deepke
    result = fn(Path(args.data).resolve(), args.models[0], args.epochs, args.batch_size,
                Path(args.workdir), args.extra)
    print("RESULT " + json.dumps(result), flush=True)


def recipe(model: str) -> Path:
    return ROOT / "configs" / f"deepke-zh-{model}.yaml"


def spawn(side: str, model: str, args, workdir: Path) -> dict:
    from omegaconf import OmegaConf

    epochs = args.epochs or OmegaConf.load(recipe(model)).train.epochs
    if side == "deepke" and model in args.deepke_epochs:
        epochs = args.deepke_epochs[model]
    extra = [f"model.lm.pretrained={args.lm_folder}"] if model == "lm" else []
    cmd = [sys.executable, __file__, "--child", side, "--models", model, "--epochs",
           str(epochs), "--batch-size", str(args.batch_size), "--data", str(args.data),
           "--workdir", str(workdir), *(f"--extra={e}" for e in extra)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{side} {model} failed (exit {proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--models", nargs="+", default=["cnn", "pcnn"],
                   choices=["cnn", "pcnn", "bilstm", "transformer", "lm"])
    p.add_argument("--deepke-epochs", nargs="*", default=[], metavar="MODEL=N",
                   help="fewer epochs for a slow DeepKE model (its Transformer: ~7 min an epoch)")
    p.add_argument("--lm-folder", default="", help="model.lm.pretrained for --models lm")
    p.add_argument("--extra", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--skip-deepke", action="store_true")
    p.add_argument("--child", choices=["reltrain", "deepke"], help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.deepke_epochs = {k: int(v) for k, v in (x.split("=") for x in args.deepke_epochs)}
    if args.child:
        return child(args)
    print(f"data {args.data}; {args.epochs or 'the recipes'} epochs "
          f"({args.deepke_epochs or 'same'} for DeepKE), "
          f"batch {args.batch_size}; "
          f"{os.cpu_count()} CPU cores", flush=True)
    header = f"{'model':<12}{'side':<10}{'train sent/s':>13}{'eval sent/s':>13}{'peak RSS MB':>13}" \
             f"{'test macro-F1':>15}{'best ep':>9}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="reltrain-bench-") as tmp:
        for model in args.models:
            sides = ["reltrain"] + ([] if args.skip_deepke or model == "lm" else ["deepke"])
            results = {}
            for side in sides:
                try:
                    results[side] = spawn(side, model, args, Path(tmp))
                except SystemExit as exc:  # report what did run
                    print(f"{model:<12}{side:<10} {exc}", flush=True)
            for r in results.values():
                rows.append(f"{model:<12}{r['side']:<10}{r['train_sent_per_s']:>13.1f}"
                            f"{r['eval_sent_per_s']:>13.1f}{r['peak_rss_mb']:>13.0f}"
                            f"{r['test_macro_f1']:>15.4f}{r['best_epoch']:>9}")
            if {"deepke", "reltrain"} <= set(results):
                ratio = results["reltrain"]["train_sent_per_s"] / results["deepke"]["train_sent_per_s"]
                rows.append(f"{model:<12}{'ratio':<10}{ratio:>12.1f}x"
                            f"{results['reltrain']['eval_sent_per_s'] / results['deepke']['eval_sent_per_s']:>12.1f}x")
            print("\n".join([header, *rows]), flush=True)
            rows = []


if __name__ == "__main__":
    main()
