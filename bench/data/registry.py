"""The dataset registry (kept in its own module so that generators can import it)."""

from bench.core.registry import Registry

DATASETS: Registry = Registry("dataset")
