"""Browsers for the web agent: the interface, its drivers, the page-side script and the GIF recorder."""
