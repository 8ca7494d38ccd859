"""Policy service: given profiles and history, returns the next round's site set."""
