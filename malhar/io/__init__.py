"""malhar io."""
