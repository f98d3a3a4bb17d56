"""The committed leaderboard: one JSON entry per evaluated defense configuration and suite
(``leaderboard/entries/<suite>/<defense-id>.json``), exported from a results store, validated
against a pydantic schema and re-checked for consistency, and rendered into the page without any
store (:mod:`bench.leaderboard.entry`, :mod:`bench.leaderboard.export`,
:mod:`bench.leaderboard.check`)."""
