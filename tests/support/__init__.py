"""Shared helpers of the test suite (imported as ``tests.support.<module>``; not test files).

* ``bench_root``: a tiny task and a benchmark root holding it, and ``evaluate`` run on that root;
  ``REPO``, the repository's root;
* ``one_task``: one tiny task evaluated in a root of its own (the containment tests' set-up);
* ``runs``: FedSGD on digits observed by the server and the scores of its reconstructions, the
  PDMM tests' MLP, the run of the quick membership-inference tasks;
* ``readmes``: the examples printed in the contributor READMEs;
* ``result_samples``: hand-made job results with known leakages and utilities;
* ``site_fixtures``: a site built from the committed entries plus a hostile one;
* ``hostile_plugins``: attacks that try to escape their View (the containment tests);
* ``isolation_targets``: functions the isolation tests run in child processes;
* ``pg_server``: a throw-away PostgreSQL server.
"""
