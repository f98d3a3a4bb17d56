"""Active adversaries of decentralized learning (Pasquini, Raynal & Troncoso, S&P 2023, §5–6):
policies that substitute what a coalition sends. Importing the package registers them all."""

from bench.active import echo, state_override  # noqa: F401  (registration)
from bench.active.policy import POLICIES, ActivePolicy, build_policy

__all__ = ["POLICIES", "ActivePolicy", "build_policy"]
