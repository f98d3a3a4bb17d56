"""Membership-inference attacks: each module registers one attack in :data:`bench.attacks.ATTACKS`.
They score the harness' candidate pool (:mod:`bench.attacks.membership.pool`) with the statistics of
:mod:`bench.membership`; the scorer alone knows which candidates are members."""
