"""The one outbound path: `policy` (parse, resolve, check), `client` (pinned HTTP for workers), `proxy` + `plugin` (the browsers' egress proxy)."""
