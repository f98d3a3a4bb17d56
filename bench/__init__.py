"""bench: a benchmark of privacy attacks and defenses in federated and decentralized learning."""

__version__ = "0.1.0"


def __getattr__(name: str):  # the notebook API, imported on first use (``import bench`` stays light)
    if name in ("evaluate_defense", "load_leaderboard"):
        from bench import api

        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
