"""Job grid, the harness that runs one job, and executors."""
