"""Replay scripts: the script of a finished task, and saved scripts with their versions."""
