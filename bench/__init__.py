"""Benchmarks of the chat front, each runnable as ``.venv/bin/python -m bench.<name>``; see ``bench/README.md``."""
