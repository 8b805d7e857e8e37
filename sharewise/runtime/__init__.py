"""Physical mode: the scheduling loop of the simulator drives real jobs on the local devices (or on Ray).

``sharewise run`` executes a trace for real: jobs are started on device slots, paused and resumed, their
progress read from their step reports, and the pairs that share a slot are measured as they run. The pieces:
``slots`` (what stands for a GPU: a CUDA device or a set of CPU cores), ``runner`` (a built-in workload run
as a job), ``jobs`` (one job's process: start, pause, resume, progress, end), ``world`` (the real world behind
``sharewise.engine.loop``), ``ray_jobs`` (the same jobs as Ray actors), and ``physical`` (one policy's run over a
trace: the world, the loop, saving and resuming, the result; the runtime's one entry, as
``engine.simulator.simulate`` is the simulator's). ``sharewise.app.run`` is the command above it: its inputs,
the calibration, one run per policy, the comparison with the simulator.
"""
