"""The process's malloc settings (asrkit.utils.memory.keep_freed_memory)."""

import os
import subprocess
import sys

import pytest

CODE = """
import resource, numpy as np
from asrkit.utils.memory import keep_freed_memory
on = keep_freed_memory()
assert keep_freed_memory() == on   # once per process
for _ in range(3):                 # warm: the first round maps the heap
    a = [np.ones(1 << 20, np.float32) for _ in range(8)]
    del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = [np.ones(1 << 20, np.float32) for _ in range(8)]
    del a
print(on, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(env_value):
    env = {**os.environ}
    env.pop("ASRKIT_MALLOC", None)
    if env_value is not None:
        env["ASRKIT_MALLOC"] = env_value
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_blocks_serve_the_next_allocations_without_page_faults():
    on, faults = _run(None)
    assert on and faults < 100            # 5 rounds of 8 x 4 MiB from the blocks freed
    off, faults_default = _run("default")
    assert not off and faults_default > 5000  # fresh pages in most rounds
