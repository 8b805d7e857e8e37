"""``recommend``'s planner: a queue of jobs and a cluster layout (``jobs``) paired onto GPUs by one assignment
(``pairing``). It uses the engine's slowdown table and GPU rules; it is no policy and runs no loop."""
