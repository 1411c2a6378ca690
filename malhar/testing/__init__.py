"""malhar testing."""
