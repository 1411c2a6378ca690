"""malhar algo."""
