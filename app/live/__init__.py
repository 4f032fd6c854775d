"""Live view and human takeover of a running browser (DESIGN.md §11)."""
