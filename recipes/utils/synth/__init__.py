"""Speech for the recipes' corpora: English voices of several engines (``voices``), the real
recordings of FSDD (``fsdd``), speaker perturbation and channel simulation (``augment``), and
cached rendering into Kaldi data directories over several processes (``corpus``).

A recipe script puts ``recipes/utils`` on ``sys.path`` and imports ``synth``; everything from
asrkit comes through its public API (``asrkit.features``, ``asrkit.io``).
"""
