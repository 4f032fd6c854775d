"""Planners decide the next action: the built-in step parser, or an OpenAI-compatible model."""
