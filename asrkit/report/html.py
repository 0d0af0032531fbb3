"""The HTML run report: curves, WER tables, worst utterances, network picture, commands, configs.

Everything is embedded (PNG plots as base64 data URIs, SVG inline), so the file can be mailed or
archived on its own. A missing matplotlib or graphviz leaves out the pictures, never the report.
"""

from __future__ import annotations

import base64
import datetime
import html

from asrkit.utils import atomic_write_text

CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .7em;text-align:right}
th{background:#f4f4f4}pre{background:#f7f7f7;padding:.7em;overflow-x:auto;font-size:.85em}
.plots img{max-width:48%;margin:.5%}"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,' \
           f'{base64.b64encode(png).decode()}">'


def _curves(train_log: list[dict]) -> list[str]:
    """PNG <img> tags for loss, learning rate and throughput found in the log records."""
    try:
        from asrkit.report.plots import line_plot_png
    except ImportError:
        return []

    def series(key, kind=None):
        pts = [(r.get("step", i), r[key]) for i, r in enumerate(train_log)
               if key in r and r[key] is not None and (kind is None or r.get("kind") == kind)]
        return [p[0] for p in pts], [p[1] for p in pts]

    imgs = []
    try:
        loss = {"train loss": series("loss", "train"), "CV loss": series("loss", "cv")}
        if not loss["train loss"][0]:
            loss["train loss"] = series("loss")
        if any(xs for xs, _ in loss.values()):
            imgs.append(_img(line_plot_png(loss, "loss", "step", "loss per frame"), "loss"))
        for key, title in (("lr", "learning rate"), ("frames_per_s", "frames/s"),
                           ("cv_error", "CV token error rate")):
            xs, ys = series(key)
            if xs:
                imgs.append(_img(line_plot_png({title: (xs, ys)}, title, "step", title), title))
    except ImportError:
        return []
    return imgs


def _network_picture(dot_source: str) -> str:
    from asrkit.graph.dot import render

    svg = render(dot_source, "svg")
    if svg is not None:
        text = svg.decode("utf-8", "replace")
        return text[text.find("<svg"):]
    return "<p>(graphviz is not installed: the network in dot format)</p><pre>" + \
        html.escape(dot_source) + "</pre>"


def write_report(path: str, title: str, train_log: list[dict] | None = None,
                 scores: dict | None = None, worst: int = 10, commands: list[str] | None = None,
                 configs: dict[str, str] | None = None, network_dot: str | None = None,
                 summary: dict | None = None,
                 tables: dict[str, list[list[str]]] | None = None) -> str:
    """Write the report to ``path`` atomically and return the HTML.

    Args:
        title: page title (e.g. the recipe and experiment name).
        train_log: records from training, each a dict with some of ``step``, ``kind`` ("train"
            or "cv"), ``loss``, ``lr``, ``frames_per_s``, ``cv_error``.
        scores: test-set name -> ``asrkit.decoders.scoring.ScoreReport``.
        worst: how many of the worst utterances per test set to show with their alignments.
        commands: the exact command lines that were run.
        configs: file name -> text of each config used.
        network_dot: the network as graphviz dot source.
        summary: extra key/value facts shown at the top (model size, training time, ...).
        tables: title -> rows (the first row is the header) of tables a recipe made, e.g. WER
            per speaker beside a peer system's; shown first, under the summary.
    """
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>written {datetime.datetime.now().isoformat(timespec='seconds')}</p>"]
    if summary:
        parts.append("<table>" + "".join(f"<tr><th>{html.escape(str(k))}</th><td>"
                                         f"{html.escape(str(v))}</td></tr>"
                                         for k, v in summary.items()) + "</table>")
    for name, rows in (tables or {}).items():
        parts.append(f"<h2>{html.escape(name)}</h2><table>")
        for i, row in enumerate(rows):
            cell = "th" if i == 0 else "td"
            parts.append("<tr>" + "".join(f"<{cell}>{html.escape(str(v))}</{cell}>"
                                          for v in row) + "</tr>")
        parts.append("</table>")
    if scores:
        parts.append("<h2>Results</h2><table><tr><th>test set</th><th>error rate %</th>"
                     "<th>errors</th><th>tokens</th><th>sub</th><th>del</th><th>ins</th>"
                     "<th>sentences</th><th>SER %</th></tr>")
        for name, rep in scores.items():
            d = rep.as_dict()
            parts.append(f"<tr><th>{html.escape(name)} ({'WER' if rep.unit == 'word' else 'CER'})"
                         f"</th><td>{d['error_rate']:.2f}</td><td>{d['errors']}</td>"
                         f"<td>{d['num_ref']}</td><td>{d['substitutions']}</td>"
                         f"<td>{d['deletions']}</td><td>{d['insertions']}</td>"
                         f"<td>{d['num_sentences']}</td><td>{d['sentence_error_rate']:.2f}</td>"
                         "</tr>")
        parts.append("</table>")
    if train_log:
        imgs = _curves(train_log)
        parts.append("<h2>Training</h2>")
        parts.append(f"<div class='plots'>{''.join(imgs)}</div>" if imgs else
                     "<p>(matplotlib is not installed: no plots)</p>")
        last = train_log[-1]
        parts.append("<p>last record: <code>" + html.escape(str(last)) + "</code></p>")
    if scores:
        for name, rep in scores.items():
            parts.append(f"<h2>Worst utterances: {html.escape(name)}</h2><pre>"
                         f"{html.escape(rep.report(worst=worst))}</pre>")
    if network_dot:
        parts.append("<h2>Network</h2>" + _network_picture(network_dot))
    if commands:
        parts.append("<h2>Commands</h2><pre>" + html.escape("\n".join(commands)) + "</pre>")
    for name, text in (configs or {}).items():
        parts.append(f"<h2>Config: {html.escape(name)}</h2><pre>{html.escape(text)}</pre>")
    parts.append("</body></html>\n")
    page = "\n".join(parts)
    atomic_write_text(path, page)
    return page
