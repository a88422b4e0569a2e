"""The drivers: a run planned, sent to workers (runner.Worker) job by job, and its results gathered: check.py
(`kernelkit check`), bench.py (`kernelkit bench`, strict or plain), strict.py and strict_bench.py (strict mode's
judging side), repeat.py (`bench --repeat`), verdicts.py (a format's own verdicts)."""
