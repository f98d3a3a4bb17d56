"""The presentation layer: the leaderboard page rendered from per-track entry tables with Jinja2
(``render`` with the templates under ``templates/``; its cells, filters, summary, figures and
entry pages), the ranked table of a track for the terminal (``text``), and the generated parts
of the documentation (``docs``, ``python -m bench.leaderboard.site.docs``); nothing here changes a number.
"""

from bench.leaderboard.site.render import render_index, write_site

__all__ = ["render_index", "write_site"]
