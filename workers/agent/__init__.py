"""The agent runtime: planner → loop → environment (DESIGN.md §3)."""
