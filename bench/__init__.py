"""bench: a benchmark of privacy attacks and defenses in federated and decentralized learning."""

__version__ = "0.1.0"
