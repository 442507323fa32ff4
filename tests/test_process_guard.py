"""The memory guard that ends a runaway engine (a torch profile that keeps growing) before the OOM killer does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from engines.process import RssGuard, group_alive, group_rss_bytes

GROWER = textwrap.dedent("""
    import time
    chunks = []
    for _ in range(40):                      # up to 40 x 32 MiB, touched so that it is resident
        chunks.append(bytearray(b"x" * (32 * 2**20)))
        time.sleep(0.1)
    time.sleep(30)
""")


def _start(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_guard_kills_a_group_whose_memory_passes_the_limit():
    proc = _start(GROWER)
    try:
        with RssGuard(proc.pid, limit_bytes=256 * 2**20, interval_s=0.1) as guard:
            proc.wait(timeout=30)
        assert guard.tripped
        assert guard.peak_bytes > 256 * 2**20
        assert proc.returncode == -9 and not group_alive(proc.pid)
    finally:
        proc.kill()


def test_guard_leaves_a_group_within_its_limit_alone():
    proc = _start("import time; data = bytearray(8 * 2**20); time.sleep(30)")
    try:
        time.sleep(0.5)
        assert group_rss_bytes(proc.pid) > 8 * 2**20
        with RssGuard(proc.pid, limit_bytes=2 * 2**30, interval_s=0.05) as guard:
            time.sleep(0.5)
        assert not guard.tripped and proc.poll() is None
        assert 8 * 2**20 < guard.peak_bytes < 2 * 2**30
    finally:
        proc.kill()
        proc.wait()
