"""Recorder of the labelled agent-trace corpus: scenarios, real tools, scripted LLMs, framework drivers.

Nothing here is part of the ``otelloop`` package; it needs the ``corpus`` extra (the agent frameworks)
and is run through ``benchmarks/corpus/record.py``.
"""
