"""Run reports: one self-contained HTML page per experiment (what DIGITS gave Caffe users)."""

from asrkit.report.html import write_report

__all__ = ["write_report"]
