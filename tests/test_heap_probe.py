"""experiments/reliability_soaks/heap_probe.py: a live process made to call malloc_trim from outside, its RSS
before and after.

The target is a real Python process that allocated ~200 MB in small blocks, freed most of them and waits: glibc
keeps that heap, and the probe's trim gives it back. Without gdb the script must say how to install it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from short_runs import assert_ok, executable, run_command

HOLDER = """
import sys, time
blocks = [bytearray(40_000) for _ in range(5_000)]   # 200 MB in 40 KB blocks (below the mmap threshold)
keep = blocks[::50]                                    # a few stay, pinning nothing but their own pages
del blocks
print("ready", flush=True)
time.sleep(120)
"""


def test_heap_probe_trims_a_process_that_freed_memory(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        out = tmp_path / "probe.json"
        result = run_command([*executable("python"), "experiments/reliability_soaks/heap_probe.py",
                              "--pid", str(holder.pid), "--json", str(out)], timeout=180)
        if shutil.which("gdb") is None:
            assert result.returncode != 0 and "apt-get install gdb" in result.stderr
            return
        if result.returncode and "ptrace" in result.stderr:
            pytest.skip(f"this machine does not allow ptrace: {result.stderr.strip()[-200:]}")
        assert_ok(result)
        probe = json.loads(out.read_text())["probes"][0]
        assert probe["pid"] == holder.pid and probe["rss_after_mb"] > 0
        assert probe["freed_mb"] > 50, probe  # most of the 200 MB freed in Python was still held by glibc
        assert holder.poll() is None  # the probed process goes on
    finally:
        holder.kill()
        holder.wait()
