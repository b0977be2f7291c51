"""Audit a model and a dataset defined outside privbench, from Python (run from any folder)."""
from __future__ import annotations

import sys
from pathlib import Path

import privbench

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so that the configs' `_target_: shapes.…` import
results = sys.argv[1] if len(sys.argv) > 1 else "results"
common = [f"hydra.searchpath=[file://{HERE / 'conf'}]", "data=shapes", "fl=fedavg", "payload=gradient",
          "attack=idlg", "fl.rounds=2", "fl.participants=3", "attack.iterations=200", f"results_dir={results}"]

# 1. The user's own model factory (conf/model/tiny_cnn.yaml).
own = privbench.run([*common, "model=tiny_cnn"])
print(f"tiny_cnn: PSNR {own.privacy['psnr_mean']:.1f} dB (chance {own.privacy['psnr_chance']:.1f}), "
      f"accuracy {own.metrics['utility']['accuracy']:.2f}, files in {own.run_dir}")

# 2. torchvision's resnet18, untrained, through privbench's `model=torchvision` adapter.
tv = privbench.run([*common, "model=torchvision", "model.name=resnet18", "fl.rounds=1", "fl.local_epochs=1",
                    "attack.iterations=2"])
print(f"resnet18: {tv.metrics['bytes']['uplink_bytes']:,} uplink bytes, "
      f"files in {tv.run_dir}")
