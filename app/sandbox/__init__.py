"""Browsers as hostile tenants: `box` (one browser's sandbox, flags, policies, files), `processes` (finding, proving and ending them)."""
