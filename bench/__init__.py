"""bench: a benchmark of privacy attacks and defenses in federated and decentralized learning.
Each folder holds one concept of the pipeline that turns a task and a defense into a leaderboard
entry: the shared foundations (``core/``), what a task is (``spec/``), data, models, graphs and
protocols (``data/``, ``models/``, ``topology/``, ``protocols/``), the engine (``simulation/``),
defenses (``defense/``), threat models (``threats/``), attacks (``attacks/``), metrics
(``metrics/``), running and scoring jobs (``evaluation/``), stored results (``results/``), the
papers' claims (``claims/``), the leaderboard and its page (``leaderboard/``) and the command
line (``cli``, ``commands/``) with the notebook API (``api``) (``docs/architecture.md``).
"""

import os

__version__ = "0.1.0"

# Large CPU tensors on transparent huge pages (PyTorch's allocator reads this variable at its first
# large allocation). The stacked engine allocates round temporaries of tens to hundreds of MiB;
# with 4 KiB pages, first-touch page faults cost more than the arithmetic (see
# performance/README.md). A user's own setting wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def __getattr__(name: str):  # the notebook API, imported on first use (``import bench`` stays light)
    if name in ("evaluate_defense", "load_leaderboard"):
        from bench import api

        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
