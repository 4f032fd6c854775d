"""Browsers for the web agent: the interface, its drivers, the page-side script, the GIF recorder and the run recording."""
