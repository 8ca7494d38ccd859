"""Site worker: hosts one or many virtual sites, trains them with torch, uploads deltas."""
