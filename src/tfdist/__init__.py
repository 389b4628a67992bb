"""tfdist."""
