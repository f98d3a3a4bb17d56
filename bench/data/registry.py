"""The dataset registry (kept in its own module so that generators can import it)."""

from bench.registry import Registry

DATASETS: Registry = Registry("dataset")
