"""experiments/runtime.py: the drivers' process settings (BLAS threads, freed memory kept)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import runtime

ROOT = Path(__file__).resolve().parents[1]

# In a fresh process: a 64 MiB block is made, written and freed twice; the page faults of
# the second one are printed. glibc by default gives a block this large back to the kernel on
# free (mmap), so the second pays a fault for each of its 16,384 pages again; kept, it reuses
# the first one's pages.
FAULTS_OF_A_SECOND_BLOCK = """
import resource, sys
from experiments import runtime
kept = runtime.keep_freed_memory() if sys.argv[1] == "kept" else False

def faults_of_a_block():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(64 * 2**20)                 # malloc'd, zeroed: every page written
    block[::4096] = bytes(len(block[::4096]))
    del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults_of_a_block()
print(kept, faults_of_a_block(), runtime.freed_memory_setting())
"""


def _second_block(setting):
    out = subprocess.run([sys.executable, "-c", FAULTS_OF_A_SECOND_BLOCK, setting], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout.split(maxsplit=2)
    return out[0] == "True", int(out[1]), out[2].strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_kept_freed_memory_is_reused_without_page_faults():
    kept, faults, setting = _second_block("kept")
    if not kept:
        pytest.skip("this C library has no mallopt (musl?): nothing to keep")
    _, faults_default, setting_default = _second_block("default")
    assert faults_default >= 16_384 // 2                 # the control: each page paid again
    assert faults < 200                                   # kept: reused, not faulted in again
    assert setting.startswith("kept") and setting_default == "the C library's default"


def test_keep_freed_memory_refuses_a_size_it_cannot_set():
    for bad in (0, -1, 2**30 + 1):
        with pytest.raises(ValueError, match="kept_bytes"):
            runtime.keep_freed_memory(bad)


def test_one_blas_thread_keeps_a_count_the_caller_set(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    for name in runtime.BLAS_THREAD_VARIABLES[1:]:
        monkeypatch.delenv(name, raising=False)
    runtime.one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
    assert all(os.environ[name] == "1" for name in runtime.BLAS_THREAD_VARIABLES[1:])
