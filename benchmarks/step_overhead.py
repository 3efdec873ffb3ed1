"""The per-step overhead lines the simulator speed scripts print (bench_maniskill.py, metaworld_speed.py).

    >>> import numpy as np
    >>> print_step_overhead("state-only", "raw sim", "VLA/X-v0", np.array([0.010, 0.010]), np.array([0.011, 0.011]))
    state-only: 2 steps each
      raw sim     100.00 steps/s   median   10.00 ms/step
      VLA/X-v0     90.91 steps/s   median   11.00 ms/step
      overhead: +10.0% total, +10.0% median
"""
from __future__ import annotations

import numpy as np


def print_step_overhead(label: str, raw_name: str, ours_name: str, raw_times: np.ndarray,
                        ours_times: np.ndarray) -> None:
    """Steps/s and median step time of the raw simulator and the vla_gym env, then vla_gym's overhead."""
    width = max(len(raw_name), len(ours_name))
    print(f"{label}: {len(raw_times)} steps each")
    for name, times in ((raw_name, raw_times), (ours_name, ours_times)):
        print(f"  {name:<{width}} {1 / times.mean():9.2f} steps/s   median {1e3 * np.median(times):7.2f} ms/step")
    print(f"  overhead: {100 * (ours_times.sum() / raw_times.sum() - 1):+.1f}% total, "
          f"{100 * (np.median(ours_times) / np.median(raw_times) - 1):+.1f}% median", flush=True)
