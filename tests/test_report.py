"""The HTML run report is produced, parses, and embeds decodable PNG plots."""

import base64
import html.parser

from asrkit.decoders.scoring import score_texts
from asrkit.report import write_report


class _Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.headings, self._in_h2 = [], [], False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data)
            self._in_h2 = False


def test_report_has_curves_results_alignments_and_commands(tmp_path):
    log = [{"step": i, "kind": "train", "loss": 5.0 / (i + 1), "lr": 1e-3,
            "frames_per_s": 9000 + i} for i in range(20)]
    log += [{"step": 10, "kind": "cv", "loss": 0.9}, {"step": 19, "kind": "cv", "loss": 0.6}]
    rep = score_texts({"u1": "one two three", "u2": "four"}, {"u1": "one too three", "u2": "four"})
    out = tmp_path / "exp" / "report.html"
    write_report(str(out), "digits: blstm", train_log=log, scores={"test": rep},
                 commands=["asrkit train conf/train.toml"], configs={"train.toml": "[a]\nb=1"},
                 network_dot="digraph { x -> y }", summary={"parameters": 1234})
    page = out.read_text()
    p = _Collector()
    p.feed(page)
    assert {"Results", "Training", "Worst utterances: test", "Network", "Commands",
            "Config: train.toml"} <= set(p.headings)
    assert len(p.images) == 3  # loss (train + CV), learning rate, frames/s
    for src in p.images:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "25.00" in page and "TOO" in page and "asrkit train conf/train.toml" in page


def test_recipe_tables_are_shown_with_their_header(tmp_path):
    import subprocess
    import sys

    exp = tmp_path / "exp"
    (exp / "decode_test").mkdir(parents=True)  # a scored decode beside the tables
    (tmp_path / "text").write_text("u1 one two\nu2 three\n")
    (exp / "decode_test" / "hyp.txt").write_text("u1 one two\nu2 two\n")
    (exp / "decode_test" / "ref_text").write_text(f"{tmp_path / 'text'}\n")
    (tmp_path / "wer.tsv").write_text("speaker\tasrkit WER %\tpocketsphinx WER %\n"
                                      "lucas\t4.20\t33.48\njackson\t1.10\t50.80\n")
    r = subprocess.run([sys.executable, "-m", "asrkit", "report", str(exp), "--table",
                        f"WER per speaker={tmp_path / 'wer.tsv'}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    page = (exp / "report.html").read_text()
    p = _Collector()
    p.feed(page)
    assert "WER per speaker" in p.headings
    assert "<th>pocketsphinx WER %</th>" in page and "<td>33.48</td>" in page
    assert "decode_test (WER)" in page and "<td>33.33</td>" in page
    r = subprocess.run([sys.executable, "-m", "asrkit", "report", str(exp), "--table",
                        "no-equals-sign"], capture_output=True, text=True)
    assert r.returncode == 2 and "expected TITLE=FILE.tsv" in r.stderr
