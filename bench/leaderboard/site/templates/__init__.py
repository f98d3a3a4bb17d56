"""The Jinja2 templates of the leaderboard page (``index.html.j2``, ``entry.html.j2`` and the shared
``_style.html.j2``) and its table-sorting script (``sort.js``), loaded by
:mod:`bench.leaderboard.site.render`.
"""
