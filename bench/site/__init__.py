"""The leaderboard page generator (Jinja2 templates under ``templates/``)."""

from bench.site.render import render_index, write_site

__all__ = ["render_index", "write_site"]
