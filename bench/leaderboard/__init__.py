"""The committed leaderboard: one JSON entry per evaluated defense configuration and suite
(``leaderboard/entries/<suite>/<defense-id>.json``), exported from a results store, validated
against a pydantic schema and re-checked for consistency, re-run in part to verify it, and
rendered into the page without any store (:mod:`bench.leaderboard.entry`,
:mod:`bench.leaderboard.convert`, :mod:`bench.leaderboard.files`,
:mod:`bench.leaderboard.verify`); the ranking of a track's defenses
(:mod:`bench.leaderboard.ranking`) and the page and generated documentation (``site/``)."""

#: ``leaderboard verify``'s default allowed difference, relative to ``max(1, |stated|)``
DEFAULT_TOLERANCE = 1e-6
#: the largest tolerance a recorded ``verified`` may carry (``verify --record`` refuses a larger one)
MAX_RECORDED_TOLERANCE = 1e-4
