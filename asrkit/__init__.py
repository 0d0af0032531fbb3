"""asrkit: a speech-recognition toolkit in the spirit of CNTK.

Subpackages are imported on demand (``import asrkit.features``); importing ``asrkit`` itself is
cheap and pulls in nothing heavy, so that the layering of DESIGN.md holds at import time too.
"""

__version__ = "0.1.0"
