"""What of an extraction model exports to ONNX, and whether onnxruntime runs it faster.

The part of a tagger (`extract.mentions=tags`) that holds most of prediction's time, the BiLSTM
with the tag logits, exported alone (the mention decoding and pair building between it and the
pair classifier are Python over data-dependent shapes, so no single graph holds the model) and
timed on one thread against torch over the same length-sorted batches of a DuIE file.

    python bench/extract_onnx.py RUN_OR_FOLDER [--data ../shared/data/duie/valid.json] [--rows 1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

INPUTS = ["ids", "mask", "first", "unit_mask"]  # and "shapes" where the model reads them


class Tagging(torch.nn.Module):
    """Units' tag logits from the sentence's ids: the exported part."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask, first, unit_mask, shapes=None):
        return self.model.tagger(self.model.units(ids, mask, first, unit_mask, shapes=shapes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2]
                                              / "shared/data/duie/valid.json"))
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128, help="sentences a batch (prediction's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import onnxruntime as ort

    import reltrain
    from reltrain.data.dataset import eval_batches
    from reltrain.data.schema import Annotated

    extractor = reltrain.load(args.model)
    if not extractor.model.tags:
        raise SystemExit("a tagger's folder is needed (extract.mentions=tags)")
    lines = Path(args.data).read_text(encoding="utf-8").splitlines()[:args.rows]
    sentences = [Annotated(json.loads(line)["text"], (), (), "bench") for line in lines]
    dataset = extractor.dataset(sentences)
    batches = [dataset.batch(ix) for ix in eval_batches(dataset.lengths, args.batch)]
    part = Tagging(extractor.model).eval()
    shapes = hasattr(extractor.model, "shape")  # extract.shapes: an input of its own
    names = INPUTS + ["shapes"] * shapes
    tensors = [(b.ids, b.mask, b.first, b.unit_mask) + (b.shapes,) * shapes for b in batches]
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "tagging.onnx")
        axes = {name: {0: "b", 1: "t" if name in ("ids", "mask") else "u"}
                for name in names + ["tags"]}
        torch.onnx.export(part, tensors[0], path, input_names=names, output_names=["tags"],
                          dynamic_axes=axes, dynamo=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    # the exporter drops an input the graph does not read (``first`` where each token is a unit)
    fed = {i.name for i in session.get_inputs()}

    def in_torch():
        with torch.no_grad():
            return [part(*t).numpy() for t in tensors]

    def in_onnxruntime():
        return [session.run(None, {k: v.numpy() for k, v in zip(names, t) if k in fed})[0] for t in tensors]

    gap = max(float(np.abs(a - b).max()) for a, b in zip(in_torch(), in_onnxruntime()))
    print(f"{len(sentences)} sentences, {len(batches)} batches; largest difference of a tag "
          f"logit {gap:.1e}")
    times = {f.__name__: [] for f in (in_torch, in_onnxruntime)}
    for _ in range(args.repeats):  # alternated, so both see the same machine
        for f in (in_torch, in_onnxruntime):
            start = time.perf_counter()
            f()
            times[f.__name__].append(1000 * (time.perf_counter() - start) / len(sentences))
    for name, ms in times.items():
        print(f"{name:16} best {min(ms):.3f} ms a sentence (runs: "
              f"{', '.join(f'{m:.3f}' for m in ms)})")
    print(f"onnxruntime / torch: {min(times['in_onnxruntime']) / min(times['in_torch']):.2f}")


if __name__ == "__main__":
    main()
