"""Observed pairs from jobs that another scheduler started: export their step rates, collect the pairs.

``launch``
    ``sharewise observe -- COMMAND``: the environment that makes a job export its steps (the step hook of
    ``cmd:`` workloads plus ``profiler.exporter``), and the wrapper that runs a command with it, forwarding
    signals and returning its exit status unchanged.
``series``
    The exported series read back: from a Prometheus server's HTTP API over a time range, or from saved
    text-format scrapes, as one ``JobSeries`` per observed process on a common time grid.
``intervals``
    Which observed jobs ran on one device at each grid step, the stretches of one state (a job alone, two
    jobs together), and the windows of at least a few steps each stretch is cut into.
``collect``
    ``sharewise collect``: the windows become ``pairs`` repeats (a job's rate together over its rate alone),
    kept or skipped by the confidence rule of ``pairs``, and written as pair rows with ``source`` observed.
"""
