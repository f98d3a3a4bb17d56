"""The harness that runs jobs across the trust boundary: expanding and checking a sweep
(``grid``, ``planning``, ``validate``); running one job end to end (``job``) in processes of its
own, forked from a warm fork server (``isolation``, ``warm``, ``queries``) — the defense probe,
the sandboxed simulation worker, the defense oracle and the attack workers
(``probe``, ``sim_worker``, ``sandbox``, ``oracle``, ``attack_worker``,
``adaptive``); deriving ground truth, utility and scores in the parent (``truth``); and the Ray
executor (``ray_executor``).
"""
