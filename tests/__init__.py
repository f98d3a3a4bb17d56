"""The test suite; its folders mirror the packages of ``bench/`` (see docs/usage.md, "Tests")."""
