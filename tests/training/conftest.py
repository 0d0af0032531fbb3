import pytest

from tests.training.datadirs import digits_dir


@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    """(train_dir, test_dir, tokens) of a tiny spoken-digits corpus with real fbank features."""
    try:
        return digits_dir(str(tmp_path_factory.mktemp("digits")))
    except Exception as e:  # eSpeak NG missing on this machine
        pytest.skip(f"cannot synthesise the digits corpus: {e}")
