"""Membership inference: the attacks (``threshold``, ``lira``, ``rmia``; each registers one attack in
:data:`bench.attacks.ATTACKS`, sharing ``observed``, ``decoded`` and ``reference_base``) and their
library — the candidate pool (``pool``), per-sample signals of stacked models (``signals``), the
statistics of LiRA (``likelihood_ratio``) and RMIA (``pairwise_likelihood``), reference worlds
(``reference_worlds``), threshold choice, ROC and metrics (``threshold_choice``, ``roc``, ``metrics``) and
an empirical ε lower bound (``epsilon``);
the scorer alone knows which candidates are members (see ``README.md`` here)."""
