"""`autotune report`: writes report.md, report.html and their figures for a study. Only the
writing: ``report_data`` computes, ``report_render`` renders, ``plots`` draws."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.errors import ConfigError
from autotune.study.output.plot_data import load_png
from autotune.study.output.plots import plot_capacity, plot_front, plot_load
from autotune.study.output.report_data import Report, compute_report
from autotune.study.output.report_render import FRONT_PNG, capacity_png, report_sections, to_html, to_markdown


def report_folder(out_dir: Path) -> Path:
    """`report --out`, checked before the study is read: a folder (created where missing; its
    report files are replaced), never a file."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: a file, not a folder; give a folder (it is created "
                          "if missing; its report files are replaced)")
    return out_dir


def write_report(study: optuna.Study, out_dir: Path, *, figures: bool = True) -> list[Path]:
    """Write report.md, report.html and the figures they name to ``out_dir``; returns the
    files. ``figures`` False: the two pages alone, the same text, no figure drawn (0.1-0.2 s
    each with matplotlib), for the tests whose subject is the pages' words."""
    report = compute_report(study)
    sections = report_sections(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = _draw_figures(report, out_dir) if figures else []
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(to_markdown(sections))
    page.write_text(to_html(sections))
    return [md, page, *drawn]


def _draw_figures(report: Report, out_dir: Path) -> list[Path]:
    """The front, each pick's load curve and the capacity curves, as the pages name them."""
    figures = []
    if report.front_plot is not None:
        figures.append(out_dir / FRONT_PNG)
        plot_front(report.front_plot, figures[-1])
    for curve in report.load_curves:
        figures.append(out_dir / load_png(curve))
        plot_load(curve, figures[-1])
    for profile, curves in report.capacity_curves.items():
        figures.append(out_dir / capacity_png(profile))
        plot_capacity(curves, figures[-1])
    return figures
