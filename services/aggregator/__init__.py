"""Aggregator service: the global model and the round loop."""
