"""Performance: a pull request's benchmarks, base against head, in one run.

``driver_script.py`` (stdlib only, in the run's image) finds the benchmarks the project already
has and times base and head in alternating rounds; ``step.py`` makes it a step and reads its
results; ``stats.py`` turns the rounds into a verdict per benchmark. docs/performance.md explains
the method and its measured detection rates.
"""
