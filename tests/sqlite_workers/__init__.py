"""Subprocess entry points for the SQLite crash and concurrency tests (run with ``python -m``)."""
