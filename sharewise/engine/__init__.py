"""The engine that runs policies: what a policy sees and returns, the scheduling loop, and the worlds behind it.

Layers, each importing only those before it: the compiled-kernel decorator (``compiled``) and the rules every
policy may use (``order``, ``gpus``); the policies' knowledge of interference (``table``); the policy interface
(``interface``: the queue, the cluster state, a placement, a decision); the cluster (``cluster``), its one
transition (``transition``), a run's result (``result``), the world protocol (``world``), the scheduling loop
(``loop``) and the simulated world behind it (``simulator``). The policies themselves live in
``sharewise.policy``, above this package; the real world of physical runs in ``sharewise.runtime``.
"""
