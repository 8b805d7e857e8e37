"""The engine that runs policies: what a policy sees and returns, the scheduling loop, and the worlds behind it.

Layers, each importing only those before it: the compiled-kernel decorator (``compiled``) and the rules every
policy may use (``order``, ``gpus``); the policies' knowledge of interference (``table``); the policy types
(``policy_types``: the queue, the cluster state, a placement, a decision) and the rules beside them
(``free_gpus``: which free GPUs a job gets; ``queue_order``: the orders a queue is walked in; ``validation``:
what a placement must satisfy); the cluster (``cluster``), its one transition (``transition``), the world
protocol and the job states (``world``), a run's result (``result``), the scheduling loop (``loop``) and the
simulated world behind it (``simulator``). The policies themselves live in ``sharewise.policy``, above this
package; the real world of physical runs, and its one entry, in ``sharewise.runtime``.
"""
