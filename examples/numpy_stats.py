# /// script
# requires-python = ">=3.9"
# dependencies = ["numpy"]
#
# [tool.python-sandbox]
# net = "off"
# ///
"""Summary statistics with numpy; writes stats.txt into the current directory."""

import numpy as np

rng = np.random.default_rng(723)
sample = rng.normal(loc=10.0, scale=2.0, size=100_000)
line = f"mean={sample.mean():.3f} std={sample.std():.3f}"
print(line)
with open("stats.txt", "w", encoding="utf-8") as f:
    f.write(line + "\n")
