"""A Flower app whose ServerApp selects its sites with PowerTrip (examples/flower/README.md)."""
