"""``recommend``'s planner: a queue of jobs and a cluster layout (``jobs``) paired onto GPUs by one assignment
(``pairing``). It uses the engine's slowdown table and GPU rules; it is no policy and runs no loop.

``METHODS`` lives here, not in ``pairing``, so the CLI's ``--method`` help reads it without numpy or pandas.
"""

#: How ``plan_pairs`` may solve: the integer program when small enough (``auto``), always, or greedily.
METHODS = ("auto", "exact", "greedy")
