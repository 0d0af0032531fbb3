"""The page in a real headless Chromium (Debian's ``chromium``, driven by playwright): it loads,
an uploaded wav shows its transcript with word times, a file streamed over the WebSocket and
the (fake, file-fed) microphone show theirs, and the curves grow as train_log.jsonl grows.

Skipped, with the reason, where playwright or a Chromium binary is missing: install them with
``pip install playwright`` and ``apt-get install -y chromium`` (no browser download is needed:
the tests use ``/usr/bin/chromium``, or ``$ASRKIT_CHROMIUM``).
"""

import json
import os
import re
import shutil

import numpy as np
import pytest

from tests.serve.fixtures import WORDS

CHROMIUM = os.environ.get("ASRKIT_CHROMIUM") or shutil.which("chromium") or \
    shutil.which("chromium-browser") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-dev-shm-usage", "--use-fake-ui-for-media-stream",
         "--use-fake-device-for-media-stream"]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def mic_wav(tmp_path_factory):
    """What the fake microphone plays (in a loop): the words, then 2 s of quiet."""
    from tests.recognizer.tones import RATE, recording, write_wav

    x, _ = recording(WORDS)
    x = np.concatenate([x, np.zeros(2 * RATE, np.float32)])
    return write_wav(tmp_path_factory.mktemp("mic") / "mic.wav", x)


@pytest.fixture(scope="module")
def browser(mic_wav):
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                  args=FLAGS + [f"--use-file-for-fake-audio-capture={mic_wav}"])
        except Error as e:
            pytest.skip(f"Chromium at {CHROMIUM} does not start: {str(e).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context()
    context.grant_permissions(["microphone"], origin=server.url)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, errors


def _open(page, server, hash_=""):
    page.goto(server.url + "/" + hash_)
    page.wait_for_selector("body[data-ready='1']", state="attached")


def test_the_page_loads(page, server):
    _open(page, server)
    assert page.title() == "asrkit"
    assert server.recognizer.folder.path in page.inner_text("#model")
    assert page.is_visible("#tab-experiments")


def test_an_uploaded_wav_shows_its_transcript(page, server, wav):
    _open(page, server)
    page.set_input_files("#file", wav[0])
    page.click("#upload")
    page.wait_for_function("document.getElementById('upload-text').textContent.length > 0")
    assert page.inner_text("#upload-text") == " ".join(WORDS)
    rows = page.query_selector_all("#upload-words tr")[1:]
    assert [r.query_selector("td.word").inner_text() for r in rows] == WORDS
    starts = [float(r.query_selector_all("td")[1].inner_text()) for r in rows]
    for got, want in zip(starts, wav[2]):
        assert abs(got - want) < 0.1
    assert "RTF" in page.inner_text("#upload-status")


def test_a_streamed_file_shows_its_transcript(page, server, wav):
    _open(page, server)
    page.set_input_files("#file", wav[0])
    page.check("#file-stream")
    page.click("#upload")
    page.wait_for_function(
        "document.getElementById('upload-status').textContent.startsWith('streamed')")
    assert page.inner_text("#upload-text") == " ".join(WORDS)
    assert len(page.query_selector_all("#upload-words tr")) == len(WORDS) + 1


def test_the_microphone_streams_live(page, server):
    _open(page, server)
    page.click("#mic-start")
    page.wait_for_function(
        "document.getElementById('mic-status').textContent.startsWith('recording')")
    page.wait_for_function(
        "document.getElementById('mic-final').textContent.split(' ').length >= 3 || "
        "document.getElementById('mic-partial').textContent.split(' ').length >= 3")
    page.click("#mic-stop")
    page.wait_for_function(
        "document.getElementById('mic-status').textContent.startsWith('done')")
    said = page.inner_text("#mic-final").split()
    assert said[:3] == WORDS, said  # the fake microphone plays the words in a loop


def test_curves_update_as_the_log_grows(page, server):
    _open(page, server, "#experiments")
    page.wait_for_function("document.getElementById('runs').value === 'exp/a'")
    page.wait_for_function("Number(document.getElementById('chart-loss').dataset.points) > 0")
    before = int(page.get_attribute("#chart-loss", "data-points"))
    path = os.path.join(server.exp_dir, "exp", "a", "train_log.jsonl")
    with open(path, "a") as f:
        for step in (1000, 1010):
            f.write(json.dumps({"step": step, "kind": "train", "loss": 0.05, "lr": 0.01}) + "\n")
    page.wait_for_function(
        f"Number(document.getElementById('chart-loss').dataset.points) >= {before + 2}")
    assert re.search(r"last: step 1010", page.inner_text("#log-summary"))
    page.wait_for_selector("#wer-table")
    assert "decode_test" in page.inner_text("#wer-table")
    page.wait_for_selector("#network svg, #network pre")
