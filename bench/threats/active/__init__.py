"""Active adversaries of decentralized learning (Pasquini, Raynal & Troncoso, S&P 2023, §5–6):
policies that rewrite what a coalition of corrupt nodes sends after the defense ran (``echo``,
``state_override``, ``trap``), functional marginalization (``marginalization``, which the
membership attacks use too), their contract (``policy``) and where the attacker sits in the
graph (``placement``); the ``active`` threat model runs them (:mod:`bench.threats.active.threat`), and
importing the package registers them all.
"""

from bench.threats.active import echo, state_override, threat  # noqa: F401  (registration)
from bench.threats.active.policy import POLICIES, ActivePolicy, build_policy

__all__ = ["POLICIES", "ActivePolicy", "build_policy"]
