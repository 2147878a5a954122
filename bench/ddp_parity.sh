#!/usr/bin/env bash
# The same job with N processes (batch 32 each) and with one process (batch 32 x N) on
# deepke-zh: prints both test figures, and whether the N-process summary.json equals
# `reltrain evaluate` of its best checkpoint in one process, key for key.
#   bash bench/ddp_parity.sh 2 3        (from the repository root, in the project's venv)
set -euo pipefail
D=$(realpath ../shared/data/deepke-zh)
OUT=$(mktemp -d /tmp/reltrain-parity-XXXX)
C="data.train=$D/train.csv data.valid=$D/valid.csv data.test=$D/test.csv data.labels=$D/relation.csv data.language=zh log.progress=false"
for n in "${@:-2}"; do
  OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=$n -m reltrain train device=cpu $C output_dir=$OUT/ddp$n > $OUT/ddp$n.log 2>&1
  python -m reltrain evaluate $OUT/ddp$n/checkpoints/best $D/test.csv > $OUT/eval$n.json
  python -m reltrain train $C train.batch_size=$((32 * n)) output_dir=$OUT/single$n > $OUT/single$n.log 2>&1
  python - "$OUT" "$n" <<'PY'
import json, sys
out, n = sys.argv[1], sys.argv[2]
ddp = json.load(open(f"{out}/ddp{n}/summary.json"))
one = json.load(open(f"{out}/single{n}/summary.json"))
ev = json.load(open(f"{out}/eval{n}.json"))
keys = ["macro_f1", "micro_f1", "macro_precision", "macro_recall", "per_class"]
print(f"{n} processes x 32: test macro-F1 {ddp['test']['macro_f1']:.4f} (best epoch {ddp['best']['epoch']}); "
      f"summary == 1-process evaluate: {all(ddp['test'][k] == ev[k] for k in keys)}")
print(f"1 process x {32 * int(n)}: test macro-F1 {one['test']['macro_f1']:.4f} (best epoch {one['best']['epoch']}); "
      f"difference {ddp['test']['macro_f1'] - one['test']['macro_f1']:+.4f}")
PY
done
rm -rf "$OUT"
