"""Profiler service: each site's power availability and link, configured and measured."""
