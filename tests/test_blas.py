"""asrkit's choice of OpenBLAS kernels (asrkit._blas), on made-up CPUs and environments."""

import os
import subprocess
import sys

from asrkit._blas import (
    AVX512_FLAGS,
    THREAD_TIMEOUT,
    choose_openblas_core,
    choose_thread_timeout,
    cpu_info,
    openblas_core_for,
)

ZEN5 = ("AuthenticAMD", 0x1A, AVX512_FLAGS | {"avx2", "fma"})
ZEN3 = ("AuthenticAMD", 0x19, frozenset({"avx2", "fma"}))
INTEL = ("GenuineIntel", 6, AVX512_FLAGS | {"avx2"})


def test_only_zen5_and_later_with_avx512_get_skylakex():
    assert openblas_core_for(*ZEN5) == "SkylakeX"
    assert openblas_core_for(*ZEN3) is None
    assert openblas_core_for(*INTEL) is None
    assert openblas_core_for("AuthenticAMD", 0x1A, frozenset({"avx512f"})) is None


def test_unset_or_pinned_avx2_core_is_replaced_on_zen5():
    env = {}
    assert choose_openblas_core(env, ZEN5) == "SkylakeX" and env["OPENBLAS_CORETYPE"] == "SkylakeX"
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    assert choose_openblas_core(env, ZEN5) == "SkylakeX" and env["OPENBLAS_CORETYPE"] == "SkylakeX"


def test_user_choices_are_kept():
    env = {"OPENBLAS_CORETYPE": "Cooperlake"}
    assert choose_openblas_core(env, ZEN5) is None and env["OPENBLAS_CORETYPE"] == "Cooperlake"
    env = {"OPENBLAS_CORETYPE": "Haswell", "ASRKIT_OPENBLAS_CORETYPE": "keep"}
    assert choose_openblas_core(env, ZEN5) is None and env["OPENBLAS_CORETYPE"] == "Haswell"
    env = {"ASRKIT_OPENBLAS_CORETYPE": "Zen"}
    assert choose_openblas_core(env, INTEL) == "Zen" and env["OPENBLAS_CORETYPE"] == "Zen"
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    assert choose_openblas_core(env, INTEL) is None and env["OPENBLAS_CORETYPE"] == "Haswell"


def test_cpu_info_reads_this_machine_or_returns_empty(tmp_path):
    vendor, family, flags = cpu_info()
    assert isinstance(vendor, str) and isinstance(family, int) and isinstance(flags, frozenset)
    assert cpu_info(str(tmp_path / "missing")) == ("", 0, frozenset())


def test_import_asrkit_sets_the_variable_before_numpy_loads():
    code = ("import os, asrkit, numpy; from asrkit._blas import openblas_core_for, cpu_info; "
            "want = openblas_core_for(*cpu_info()); "
            "assert want is None or os.environ['OPENBLAS_CORETYPE'] == want, os.environ")
    env = {k: v for k, v in os.environ.items() if k != "ASRKIT_OPENBLAS_CORETYPE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_openblas_workers_sleep_soon_unless_the_user_says_otherwise():
    env = {}
    assert choose_thread_timeout(env) == THREAD_TIMEOUT and env["OPENBLAS_THREAD_TIMEOUT"] == "4"
    env = {"OPENBLAS_THREAD_TIMEOUT": "20"}
    assert choose_thread_timeout(env) is None and env["OPENBLAS_THREAD_TIMEOUT"] == "20"
    r = subprocess.run([sys.executable, "-c", "import os, asrkit, numpy; "
                        "print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"],
                       capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items()
                            if k != "OPENBLAS_THREAD_TIMEOUT"})
    assert r.returncode == 0 and r.stdout.strip() == THREAD_TIMEOUT, r.stderr
