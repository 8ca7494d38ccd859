"""PowerTrip link shaping (see tc/README.md).

``from tc import shaping`` with the repository root on sys.path, or put tc/ itself on
sys.path and ``import shaping``.  Standard library only.
"""
