"""asrkit: a speech-recognition toolkit in the spirit of CNTK.

Subpackages are imported on demand (``import asrkit.features``); importing ``asrkit`` itself is
cheap and pulls in nothing heavy, so that the layering of DESIGN.md holds at import time too.
It does two things first: on CPUs whose AVX-512 OpenBLAS does not detect, it points OpenBLAS at
its AVX-512 kernels before numpy loads it, and makes OpenBLAS's idle workers sleep sooner
(see :mod:`asrkit._blas`); where numba would find no
writable place for its compile cache, it sets ``NUMBA_CACHE_DIR`` to one before numba loads
(see :mod:`asrkit.utils.jit`).

``asrkit.Recognizer`` (DESIGN.md's way to use a trained model) is loaded on first use.
"""

from asrkit._blas import choose_openblas_core, choose_thread_timeout
from asrkit._lazy import lazy_exports
from asrkit.utils.jit import ensure_cache_dir

choose_openblas_core()
choose_thread_timeout()
ensure_cache_dir()

__getattr__, _ = lazy_exports(__name__, {"Recognizer": "asrkit.recognizer.recognizer"})

__version__ = "0.1.0"
