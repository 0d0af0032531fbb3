"""Fixtures of the transducer tests."""

import pytest

from asrkit.models import save
from asrkit.recognizer import package_model_folder
from tests.transducer.test_recognizer import FBANK, tone_transducer_model


@pytest.fixture(scope="module")
def tone_transducer(tmp_path_factory):
    """(model folder, its parent folder) of the hand-set tone transducer
    (``test_recognizer.tone_transducer_model``)."""
    root = tmp_path_factory.mktemp("rnnt_tones")
    save(str(root / "final.mdl"), tone_transducer_model())
    conf = root / "fbank.toml"
    conf.write_text(FBANK)
    folder = str(root / "final")
    package_model_folder(folder, str(root / "final.mdl"), str(conf))
    return folder, root
