"""Cluster a generated CMS Phase-1 event and plot the cluster sizes (pixels per cluster).

    pip install ./crates/python matplotlib
    python examples/cluster_sizes.py [--backend auto|cpu|cuda] [--out cluster_sizes.png]

Reads nothing from disk: the event comes from detkit's generator (Run-3-like pile-up). With a
digi file instead, load its columns with numpy (``np.loadtxt(f, delimiter=",", skiprows=1,
dtype=np.uint16, unpack=True)`` for a ``module,x,y,adc`` CSV) and pass them the same way.
"""

import argparse

import numpy as np

import detkit

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--out", default="cluster_sizes.png")
args = parser.parse_args()

backend = detkit.Backend(args.backend)
print(backend.description)

# 1. An event: module, x, y, adc (uint16 each).
module, x, y, adc = detkit.generate.cluster_event(seed=args.seed)
print(f"{len(module)} digis in {len(np.unique(module))} modules")

# 2. Clusters: the index of every digi's cluster within its module (-1: not in a cluster).
clus, per_module = backend.cluster(module, x, y, adc, geometry="phase1")
print(f"{int(per_module.sum())} clusters after the CMS charge cut")

# 3. Cluster sizes: count digis per (module, cluster).
kept = clus >= 0
key = module[kept].astype(np.int64) * 65536 + clus[kept]
_, sizes = np.unique(key, return_counts=True)
print(f"mean size {sizes.mean():.2f} pixels, largest {sizes.max()}")

# 4. The plot.
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 4))
ax.hist(sizes, bins=np.arange(1, min(sizes.max(), 40) + 2) - 0.5, color="tab:blue")
ax.set_xlabel("cluster size (pixels)")
ax.set_ylabel("clusters")
ax.set_yscale("log")
ax.set_title(f"CMS Phase-1 pixel clusters, generated event (seed {args.seed})")
fig.tight_layout()
fig.savefig(args.out, dpi=120)
print(f"wrote {args.out}")
